"""Every pair of a run's fabric stage as the numbers the rules judge, built once from the pairs documents read one at
a time (plan/pairs_files.py, plan/carried_pairs.py): per pair its nodes, its all-reduce figure or why there is none,
and what NCCL said of its transport; per RDMA record its rail, ends and ports, its median, its largest sample and
why its samples cannot be believed. No models and no samples are kept: at 1,024 nodes x 8 rails the pairs as models
were tens of GiB (about 125 KiB a pair), the index under a KiB a pair. Pure: it is given the documents.

What each field answers is what the rules asked of the models: rules/multinode.py `_figures`,
rules/fabric_checks.py `_pair_figure` (sample_problem's last question, against the rail's bar, is asked then:
`absurd_problem` of the largest sample), rules/fabric_transport.py `Collective.seen`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gpucert.evaluate.rules.fabric_transport import Collective, Seen
from gpucert.evaluate.rules.performance import sample_problem, top_busbw
from gpucert.evaluate.stats import median
from gpucert.measure.evidence import FabricEvidence, FabricPairs
from gpucert.measure.evidence_fabric import RdmaBandwidth

__all__ = ["PairRow", "PairsIndex", "RdmaRow", "index_pairs"]


@dataclass(frozen=True, slots=True)
class PairRow:
    """One pair's all-reduce: its figure (the median bus bandwidth at the largest message), or why it has none."""

    nodes: tuple[str, ...]
    busbw: float | None
    why: str | None  # the pair's errors, or "no correct samples"; None with a figure
    gpus_per_node: int
    transport: Collective | Seen | None  # what NCCL said (a Collective only where the pair names no GPU count)


@dataclass(frozen=True, slots=True)
class RdmaRow:
    """One RDMA record of a pair, as fabric.rdma_bw judges it (the fields rules/fabric_schedule.py reads)."""

    doc: tuple[str, ...]  # the nodes of the pair document it came from
    rail: int
    client: str
    server: str
    client_hca: str
    server_hca: str
    unit: str
    error: str | None
    median: float | None  # of its samples; None without samples
    top: float | None  # its largest sample
    problem: str | None  # sample_problem(samples, None): too few, not numbers, not above zero


@dataclass
class PairsIndex:
    """Every pair of the run, in the order read (carried first, then the run's own rounds)."""

    pairs: list[PairRow] = field(default_factory=list)
    rdma: list[RdmaRow] = field(default_factory=list)


def _s(text: str) -> str:
    return sys.intern(text)


def _pair(pair: FabricEvidence, nodes: tuple[str, ...], shared: dict[frozenset[str], frozenset[str]]) -> PairRow:
    busbw = top_busbw(pair.nccl) if pair.nccl is not None else []
    transport = Collective(list(nodes), pair.gpus_per_node, pair.transport)
    seen: Collective | Seen | None = transport  # a count of 0 is the pool's, asked when it is judged
    if pair.gpus_per_node:
        seen = transport.seen()
        if seen is not None:  # the same devices in nearly every pair: one set for them all
            seen = replace(seen, devices=shared.setdefault(seen.devices, seen.devices))
    if pair.errors or not busbw or not (pair.nccl and pair.nccl.correct) or sample_problem(busbw, None):
        why = "; ".join(e.message for e in pair.errors) or "no correct samples"
        return PairRow(nodes, None, why, pair.gpus_per_node, seen)
    return PairRow(nodes, median(busbw), None, pair.gpus_per_node, seen)


def _rdma(r: RdmaBandwidth, doc: tuple[str, ...]) -> RdmaRow:
    samples = list(r.samples)
    return RdmaRow(
        doc,
        r.rail,
        _s(r.client),
        _s(r.server),
        _s(r.client_hca),
        _s(r.server_hca),
        _s(r.unit),
        r.error,
        median(samples) if samples else None,
        max(samples) if samples else None,
        sample_problem(samples, None),
    )


def index_pairs(docs: Iterable[FabricPairs]) -> PairsIndex:
    """The index of every pair of `docs`, each document let go once indexed."""
    out = PairsIndex()
    shared: dict[frozenset[str], frozenset[str]] = {}
    for doc in docs:
        for pair in doc.pairs:
            nodes = tuple(_s(n) for n in pair.nodes)
            out.pairs.append(_pair(pair, nodes, shared))
            out.rdma += [_rdma(r, nodes) for r in pair.rdma]
    return out
