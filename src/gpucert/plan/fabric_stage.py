"""The fabric stage's pairs, round by round: each round's pairs written once when it ends (plan/pairs_files.py), and
each node's port counters over the whole stage folded as the documents arrive, so a fleet's pairs (gigabytes at
1,024 nodes) are never held at once. Writes through RunFolder and pairs_files only."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpucert._version import __version__
from gpucert.measure.evidence import CounterWindow, FabricEvidence, ProbeError
from gpucert.measure.evidence_fabric import merge_windows
from gpucert.measure.targets.base import FabricTarget, MeasurePlan, Target
from gpucert.plan.pairs_files import write_round
from gpucert.plan.runfolder import RunFolder

__all__ = ["StageWindows", "attach_windows", "in_rounds", "measure_fabric", "measure_pairs", "neighbour_pairs"]


@dataclass
class _Held:
    first: tuple[int, datetime, CounterWindow]  # (order seen, its `before` reading's time, the window)
    last: tuple[int, datetime, CounterWindow]  # (order seen, its `after` reading's time, the window)
    loads: dict[str, None] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


class StageWindows:
    """Each node's counter windows over the fabric stage, folded one document at a time: what merge_windows makes
    of them all (the earliest `before`, the latest `after`, every load and unreadable counter), holding two windows
    a node instead of one a pair."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._seen = 0

    def add(self, docs: Iterable[FabricEvidence]) -> None:
        for doc in docs:
            for node, window in doc.counters.items():
                self._seen += 1
                if window.seconds() is None:
                    continue  # merge_windows leaves out a window whose times do not read
                start = (self._seen, datetime.fromisoformat(window.started), window)
                end = (self._seen, datetime.fromisoformat(window.finished), window)
                held = self._held.get(node)
                if held is None:
                    held = self._held[node] = _Held(start, end)
                if start[1] < held.first[1]:
                    held.first = start
                if end[1] > held.last[1]:
                    held.last = end
                held.loads[window.load] = None
                held.unreadable.update(window.unreadable)

    def merged(self) -> dict[str, CounterWindow]:
        out: dict[str, CounterWindow] = {}
        for node, held in self._held.items():
            ends = sorted({held.first[0]: held.first, held.last[0]: held.last}.values(), key=lambda t: t[0])
            window = merge_windows([w for _, _, w in ends])
            if window is not None:
                out[node] = window.model_copy(update={"load": ", ".join(held.loads), "unreadable": held.unreadable})
        return out


def measure_pairs(
    target: FabricTarget, folder: RunFolder, schedule: list[list[list[str]]], plan: MeasurePlan, seen: StageWindows
) -> None:
    """Every round of the schedule, one after another, each written once as it ends (`pairs-<round>.json`)."""
    for number, pairs in enumerate(schedule, 1):
        docs = target.measure_fabrics(pairs, plan)
        write_round(folder.pairs_path.parent, number, len(schedule), docs)
        seen.add(docs)


def attach_windows(folder: RunFolder, docs: Iterable[FabricEvidence] | StageWindows) -> None:
    """Each node's port counters over the fabric stage (from the first reading of its first pair or all-reduce to
    the last of its last) into its evidence, where its own fabric reading has no window yet (the fabric pods read
    the counters around their traffic; the node's probe pod ran before it)."""
    seen = docs if isinstance(docs, StageWindows) else StageWindows()
    if not isinstance(docs, StageWindows):
        seen.add(docs)
    for node, merged in seen.merged().items():
        ev = folder.read_evidence(node)
        if ev is None or ev.fabric is None or ev.fabric.counters is not None:
            continue
        folder.write_evidence(ev.model_copy(update={"fabric": ev.fabric.model_copy(update={"counters": merged})}))


def neighbour_pairs(nodes: list[str]) -> list[list[list[str]]]:
    """Every pair of neighbours on the ring of `nodes`, in rounds where no node is in two pairs at once."""
    return in_rounds([[nodes[i], nodes[(i + 1) % len(nodes)]] for i in range(len(nodes) if len(nodes) > 2 else 1)])


def in_rounds(pairs: Iterable[list[str]]) -> list[list[list[str]]]:
    """The pairs in rounds where no node is in two pairs at once: each in its first round free of both its nodes
    (pairs of different pools, whose nodes are apart, side by side)."""
    rounds: list[list[list[str]]] = []
    busy: list[set[str]] = []  # each round's nodes: a pair's first free round found without scanning its pairs
    for pair in pairs:
        i = next((i for i, b in enumerate(busy) if b.isdisjoint(pair)), len(rounds))
        if i == len(rounds):
            rounds.append([])
            busy.append(set())
        rounds[i].append(pair)
        busy[i].update(pair)
    return rounds


def measure_fabric(target: Target, nodes: list[str], plan: MeasurePlan, lone: str | None = None) -> FabricEvidence:
    """The all-reduce across `nodes`, or a document that says why it could not run (`lone`: why, for a topology
    domain of one node: lone_domain)."""
    if len(nodes) >= 2 and isinstance(target, FabricTarget):
        return target.measure_fabrics([nodes], plan)[0]
    why = (
        (lone or f"{len(nodes)} node(s) could be measured: an all-reduce across nodes needs at least two")
        if len(nodes) < 2
        else f"the {target.kind} target measures one host: there is no fabric between nodes to measure"
    )
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return FabricEvidence(
        run_id=plan.run_id,
        target=target.kind,
        probe_version=__version__,
        started=now,
        finished=now,
        nodes=nodes,
        gpus_per_node=0,
        collected=False,
        errors=[ProbeError(probe="nccl", message=why, unavailable=True)],
    )
