"""Fabric rules: the all-reduce across nodes against its baseline figure, and the node that slows the ring.
Pure: they take the multi-node evidence and return Findings.

One number for the whole ring does not say which node slows it: every pair of neighbours runs the same
all-reduce, and a node whose every pair is behind the pairs' median (by more than the straggler limit and outside
their spread, robust z) is the one.
"""

from __future__ import annotations

from collections.abc import Collection

from gpucert.evaluate.rules.performance import Sampled, against_baseline, sample_problem, top_busbw
from gpucert.evaluate.rules.stragglers import MIN_PEERS
from gpucert.evaluate.stats import Summary, median, summarize
from gpucert.measure.evidence import FabricEvidence, FabricPairs
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.baseline import MetricBaseline

__all__ = [
    "MULTINODE",
    "PAIRS_CHECK",
    "judge_multinode",
    "judge_pairs",
    "members_problem",
    "pair_figures",
    "pairs_problem",
]

MULTINODE = "nccl.all_reduce.multinode"
PAIRS_CHECK = f"straggler.{MULTINODE}"


def judge_multinode(fabric: FabricEvidence, baseline: MetricBaseline) -> Finding:
    """A collective that ran, against the baseline's multi-node figure (one finding for the set, node None)."""
    if fabric.nccl is None or not fabric.nccl.points:
        return Finding(MULTINODE, CheckStatus.ERROR, None, None, "the all-reduce across nodes recorded no samples")
    where = f"{len(fabric.nodes)} nodes x {fabric.gpus_per_node} GPUs ({', '.join(fabric.nodes)}):"
    if not fabric.nccl.correct:
        return Finding(MULTINODE, CheckStatus.FAIL, None, None, f"{where} the reduced values were wrong")
    busbw = top_busbw(fabric.nccl)
    problem = sample_problem(busbw, baseline.expected)
    if problem is not None:
        return Finding(MULTINODE, CheckStatus.ERROR, None, None, f"{where} the samples cannot be believed: {problem}")
    found = against_baseline(MULTINODE, (where, None), Sampled(median(busbw), len(busbw), "GB/s"), baseline)
    return Finding(
        found.check,
        found.status,
        None,
        None,
        found.message,
        observed=found.observed,
        expected=found.expected,
        unit=found.unit,
        limit=found.limit,
    )


def pair_figures(pairs: FabricPairs) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Each pair's bus bandwidth at the largest message (by "a + b"), and per node the pairs it was in that did
    not run."""
    values: dict[str, float] = {}
    failed: dict[str, list[str]] = {}
    for pair in pairs.pairs:
        name = " + ".join(pair.nodes)
        busbw = top_busbw(pair.nccl) if pair.nccl is not None else []
        if pair.errors or not busbw or not (pair.nccl and pair.nccl.correct) or sample_problem(busbw, None):
            why = "; ".join(e.message for e in pair.errors) or "no correct samples"
            for node in pair.nodes:
                failed.setdefault(node, []).append(f"{name}: {why}")
            continue
        values[name] = median(busbw)
    return values, failed


def judge_pairs(
    node: str, values: dict[str, float], max_deviation: float, min_z: float = 3.5, peers: Summary | None = None
) -> Finding:
    """`straggler.nccl.all_reduce.multinode` for `node`, from the figures of every pair (at least MIN_PEERS + 1
    of them, and `node` in one: the caller says why not when there are fewer). `peers` is the summary of every
    pair's figure, when the caller judges every node against the same pairs (computed here otherwise)."""
    mine = {name: v for name, v in values.items() if node in name.split(" + ")}
    peers = peers if peers is not None else summarize(list(values.values()))
    behind = {k: v for k, v in mine.items() if v / peers.median - 1 < -max_deviation and peers.z(v) < -min_z}
    detail = ", ".join(f"{k} {v:.4g} GB/s ({v / peers.median - 1:+.1%})" for k, v in mine.items())
    where = f"the median of {len(values)} pairs is {peers.median:.4g} GB/s"
    if mine and len(behind) == len(mine):
        return Finding(
            PAIRS_CHECK,
            CheckStatus.FAIL,
            node,
            None,
            f"{node} slows every ring it is in: {detail}; {where} (limit {max_deviation:.0%})",
            observed=round(min(mine.values()), 4),
            expected=round(peers.median, 4),
            unit="GB/s",
            limit=round(peers.median * (1 - max_deviation), 4),
        )
    return Finding(PAIRS_CHECK, CheckStatus.PASS, node, None, f"{node}'s pairs: {detail}; {where}")


def enough_pairs(values: dict[str, float]) -> bool:
    return len(values) - 1 >= MIN_PEERS


def members_problem(nodes: list[str], inventory: Collection[str]) -> str | None:
    """Why a collective's member list is not one this run could have formed (a node twice, a stranger), or None."""
    if len(set(nodes)) != len(nodes):
        return f"a node is named twice among {nodes}"
    known = inventory if isinstance(inventory, frozenset) else frozenset(inventory)
    strangers = [n for n in nodes if n not in known]
    return f"{', '.join(strangers)} not in this run's inventory" if strangers else None


def pairs_problem(pairs: FabricPairs, inventory: list[str]) -> str | None:
    """Why the pairs' evidence is not what this run measures: each pair two distinct nodes of the inventory, once."""
    known = frozenset(inventory)
    for pair in pairs.pairs:
        why = members_problem(pair.nodes, known) or (None if len(pair.nodes) == 2 else f"{pair.nodes} is no pair")
        if why:
            return why
    names = [tuple(sorted(p.nodes)) for p in pairs.pairs]
    return "a pair is measured twice" if len(set(names)) != len(names) else None
