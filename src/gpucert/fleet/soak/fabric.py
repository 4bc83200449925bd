"""The all-reduce across the soak's nodes (issue 26: "NCCL within the node and across nodes"): where the spec asks
for one across nodes (`certify.multinode`) and the rounds run NCCL, every round runs it across the round's running
nodes (the first `maxNodes` of them) and judges its bus bandwidth against the fabric's figure and against its own
first rounds (`judge_fabric`). It is the fleet's, not a node's: at the first round it fails it leaves the soak with
that round's findings and the soak fails; the nodes' rounds go on. Kept in each round's summary (`fabric`), so a
resumed controller replays it as it replays the nodes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gpucert.evaluate.rules.fabric_checks import multinode_figure
from gpucert.evaluate.rules.soak import judge_fabric
from gpucert.evaluate.soak_history import Medians
from gpucert.evaluate.soak_round import MULTINODE, FabricRound
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.soak import SoakSpec

__all__ = ["FabricSoak"]

UNSUPPORTED = (
    "this target cannot run the all-reduce across nodes in a soak round: run the soak without certify.multinode"
)


class FabricSoak:
    """The cross-node all-reduce's rounds: measured, judged, replayed."""

    def __init__(self, spec: ClusterSpec, soak: SoakSpec, baselines: dict[str, GpuBaseline]) -> None:
        multinode = spec.certify.multinode
        self.asked = multinode is not None and "nccl" in soak.probes
        self.max_nodes = multinode.max_nodes if multinode is not None else None
        pool = spec.pools[0]  # one pool: a spec with several cannot ask for certify.multinode
        self.figure = multinode_figure(pool) or baselines[pool.name].metrics.get(MULTINODE)
        self.criteria = soak.criteria
        self.medians = Medians((MULTINODE,))
        self.rounds = 0
        self.left_round: int | None = None
        self.findings: list[dict[str, Any]] = []

    @property
    def running(self) -> bool:
        return self.asked and self.left_round is None

    def round(
        self, target: object, index: int, nodes: Sequence[str], round_h: float, folder: SoakFolder | None = None
    ) -> tuple[dict[str, Any] | None, float]:
        """Round `index` across `nodes`, judged, as its summary keeps it (None: not run, not asked or it left), and
        the seconds spent waiting on the target for it. With `folder`, the collective is written to the round's
        folder as it finishes, and one a controller killed before the round's commit left there (across the same
        nodes) is taken instead of running it again."""
        if not self.running:
            return None, 0.0
        began = time.monotonic()
        f = folder.read_fabric(index) if folder is not None else None
        if f is None or f.nodes != self.chosen(nodes):
            f = self.measure(target, index, nodes, index * round_h, (index + 1) * round_h)
            if folder is not None:
                folder.write_fabric(f)
        took = time.monotonic() - began
        return {"round": f.to_json(), "findings": self.take(f)}, took

    def replay(self, doc: dict[str, Any] | None) -> None:
        """A committed round's all-reduce (its summary's `fabric`), as it was judged then."""
        if doc is not None:
            self.take(FabricRound.from_json(doc["round"]), doc["findings"])

    def chosen(self, nodes: Sequence[str]) -> tuple[str, ...]:
        """The nodes the round's all-reduce runs across: the first `maxNodes` of the running ones."""
        return tuple(nodes[: self.max_nodes] if self.max_nodes else nodes)

    def measure(self, target: object, index: int, nodes: Sequence[str], start_h: float, end_h: float) -> FabricRound:
        chosen = self.chosen(nodes)
        run = getattr(target, "fabric_round", None)
        if run is None:  # fail closed: the spec asked for it
            return FabricRound(index, start_h, end_h, chosen, None, (), (UNSUPPORTED,))
        got: FabricRound = run(chosen, index, start_h, end_h)
        return got

    def take(self, f: FabricRound, committed: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Take round `f` in and judge it (or, replaying, take the findings its summary committed)."""
        if f.median is not None:
            self.medians.add(f.end_h, {MULTINODE: f.median})
        if committed is None:
            committed = [x.to_json() for x in judge_fabric(self.medians, f, self.figure, self.criteria)]
        self.rounds += 1
        if committed:
            self.left_round, self.findings = f.round, committed
        return committed

    def result(self) -> dict[str, Any] | None:
        """The soak's fabric row (None: no all-reduce across nodes was asked)."""
        if not self.asked:
            return None
        result = "fail" if self.left_round is not None else "pass"
        return {"result": result, "rounds": self.rounds, "leftRound": self.left_round, "findings": self.findings}
