"""The all-reduce across the soak's nodes (issue 26: "NCCL within the node and across nodes"): where the spec asks
for one across nodes (`certify.multinode`) and the rounds run NCCL, every round runs it across each pool's running
nodes (the first `maxNodes` of them; never across pools, whose GPUs differ) and judges its bus bandwidth against
the pool's figure and against its own first rounds (`judge_fabric`). A ring is its pool's, not a node's: at the
first round it fails it leaves the soak with that round's findings and the soak fails; the nodes' rounds and the
other pools' rings go on. Kept in each round's summary (`fabric`: a one-pool spec's ring as it always was, several
pools' under `pools`), so a resumed controller replays it as it replays the nodes."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpucert.evaluate.rules.fabric_checks import multinode_figure
from gpucert.evaluate.rules.soak import judge_fabric
from gpucert.evaluate.soak_history import Medians
from gpucert.evaluate.soak_round import MULTINODE, FabricRound
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.spec.baseline import GpuBaseline, MetricBaseline
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.soak import SoakCriteria, SoakSpec

__all__ = ["FabricSoak"]

UNSUPPORTED = (
    "this target cannot run the all-reduce across nodes in a soak round: run the soak without certify.multinode"
)


class _Ring:
    """One pool's all-reduce across its running nodes, round by round."""

    def __init__(self, pool: str, max_nodes: int | None, figure: MetricBaseline | None, label: str) -> None:
        self.pool = pool
        self.file = pool if label else ""  # its round file's key: the one pool's is `_fabric.json` (SoakFolder)
        self.max_nodes = max_nodes
        self.figure = figure
        self.label = label  # "pool X: " before its findings' messages where the spec has several pools
        self.medians = Medians((MULTINODE,))
        self.rounds = 0
        self.left_round: int | None = None
        self.findings: list[dict[str, Any]] = []

    def chosen(self, nodes: Sequence[str]) -> tuple[str, ...]:
        """The nodes the round's all-reduce runs across: the first `maxNodes` of the pool's running ones."""
        return tuple(nodes[: self.max_nodes] if self.max_nodes else nodes)

    def measured(
        self, target: object, index: int, nodes: Sequence[str], round_h: float, folder: SoakFolder | None
    ) -> FabricRound:
        """The round's all-reduce across the pool's `nodes`: with `folder`, written to the round's folder as it
        finishes, and one a controller killed before the round's commit left there (across the same nodes) taken
        instead of running it again."""
        f = folder.read_fabric(index, self.file) if folder is not None else None
        if f is None or f.nodes != self.chosen(nodes):
            f = self.measure(target, index, nodes, index * round_h, (index + 1) * round_h)
            if folder is not None:
                folder.write_fabric(f, self.file)
        return f

    def measure(self, target: object, index: int, nodes: Sequence[str], start_h: float, end_h: float) -> FabricRound:
        chosen = self.chosen(nodes)
        run = getattr(target, "fabric_round", None)
        if run is None:  # fail closed: the spec asked for it
            return FabricRound(index, start_h, end_h, chosen, None, (), (UNSUPPORTED,))
        got: FabricRound = run(chosen, index, start_h, end_h)
        return got

    def take(self, f: FabricRound, criteria: SoakCriteria, committed: list[dict[str, Any]] | None) -> list[Any]:
        """Take round `f` in and judge it (or, replaying, take the findings its summary committed)."""
        if f.median is not None:
            self.medians.add(f.end_h, {MULTINODE: f.median})
        if committed is None:
            found = [x.to_json() for x in judge_fabric(self.medians, f, self.figure, criteria)]
            committed = [x | {"message": self.label + x["message"]} for x in found]
        self.rounds += 1
        if committed:
            self.left_round, self.findings = f.round, committed
        return committed

    def result(self) -> dict[str, Any]:
        result = "fail" if self.left_round is not None else "pass"
        return {"result": result, "rounds": self.rounds, "leftRound": self.left_round, "findings": self.findings}


class FabricSoak:
    """Each pool's cross-node all-reduce's rounds: measured, judged, replayed. `pool_of` names each node's pool
    (a node of none is in no ring); absent, every node is the one pool's."""

    def __init__(
        self,
        spec: ClusterSpec,
        soak: SoakSpec,
        baselines: dict[str, GpuBaseline],
        pool_of: Mapping[str, str | None] | None = None,
    ) -> None:
        multinode = spec.certify.multinode
        self.asked = multinode is not None and "nccl" in soak.probes
        self.several = len(spec.pools) > 1
        self.pool_of = pool_of
        self.criteria = soak.criteria
        self.rings: dict[str, _Ring] = {}
        for name, max_nodes in multinode.rings(spec.pool_names) if multinode is not None else []:
            pool = spec.pool(name)
            figure = multinode_figure(pool) or baselines[name].metrics.get(MULTINODE)
            self.rings[name] = _Ring(name, max_nodes, figure, f"pool {name}: " if self.several else "")

    @property
    def running(self) -> bool:
        return self.asked and any(r.left_round is None for r in self.rings.values())

    def _members(self, pool: str, nodes: Sequence[str]) -> list[str]:
        if self.pool_of is None:
            return list(nodes) if not self.several else []
        return [n for n in nodes if self.pool_of.get(n) == pool]

    def round(
        self, target: object, index: int, nodes: Sequence[str], round_h: float, folder: SoakFolder | None = None
    ) -> tuple[dict[str, Any] | None, float]:
        """Round `index` across each pool's running `nodes`, judged, as its summary keeps it (None: not run, not
        asked or every ring left), and the seconds spent waiting on the target for it. With `folder`, each ring
        is kept in the round's folder as it finishes (`_Ring.measured`)."""
        if not self.running:
            return None, 0.0
        began = time.monotonic()
        docs: dict[str, dict[str, Any]] = {}
        for ring in (r for r in self.rings.values() if r.left_round is None):  # one after another: see plan/run.py
            f = ring.measured(target, index, self._members(ring.pool, nodes), round_h, folder)
            docs[ring.pool] = {"round": f.to_json(), "findings": ring.take(f, self.criteria, None)}
        took = time.monotonic() - began
        return ({"pools": docs} if self.several else next(iter(docs.values()))), took

    def replay(self, doc: dict[str, Any] | None) -> None:
        """A committed round's all-reduce (its summary's `fabric`), as it was judged then."""
        if doc is None:
            return
        docs = doc["pools"] if "pools" in doc else {next(iter(self.rings)): doc}
        for pool, d in docs.items():
            self.rings[pool].take(FabricRound.from_json(d["round"]), self.criteria, d["findings"])

    def result(self) -> dict[str, Any] | None:
        """The soak's fabric row (None: no all-reduce across nodes was asked); with several pools, their rows
        under `pools` and the soak's over them (failed where one failed, at the first round one left)."""
        if not self.asked:
            return None
        rows = {p: r.result() for p, r in self.rings.items()}
        if not self.several:
            return next(iter(rows.values()))
        left = [r["leftRound"] for r in rows.values() if r["leftRound"] is not None]
        return {
            "result": "fail" if left else "pass",
            "rounds": max((r["rounds"] for r in rows.values()), default=0),
            "leftRound": min(left, default=None),
            "findings": [f for r in rows.values() for f in r["findings"]],
            "pools": rows,
        }
