"""The soak's controller: runs the rounds, judges each by the soak's criteria, applies the restart policy and
reports progress; resumable from its run folder without losing or repeating a round.

The restart policy (issue 26): a node that fails a round leaves the soak with the round's findings (its punch-list
row); it keeps the clean hours it had. `--rejoin NODE` on a resumed soak, once the node is repaired, restarts its
clock from zero at the next round. A node passes when its clean hours reach the soak's duration.

Memory holds, per node, the summaries the criteria need (no samples): raw rounds go to disk as they come.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from statistics import median
from typing import Any, Protocol

from gpucert.errors import ConfigError
from gpucert.evaluate.rules.soak import Peers, judge_round
from gpucert.evaluate.soak_history import NodeHistory
from gpucert.evaluate.soak_round import NodeRound, RoundEvidence, summarize
from gpucert.fleet.soak.fabric import FabricSoak
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.fleet.soak.inputs import drift_not_judged
from gpucert.fleet.soak.metrics import METRICS_FILE, write_soak_metrics
from gpucert.fleet.soak.model import Progress, SoakResult, fabric_progress
from gpucert.plan.checks import Finding
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.soak import SoakSpec

__all__ = ["Progress", "RoundTarget", "SoakController", "SoakResult"]

RESULT_SCHEMA = "gpucert.io/soak-result/v1"
RUNNING, LEFT = "running", "left"


class RoundTarget(Protocol):
    """What runs a round: each node's RoundEvidence as it finishes (then the round's wall time is over)."""

    def run_round(
        self, nodes: Sequence[str], index: int, start_h: float, end_h: float, dcgm_level: int | None = None
    ) -> Iterator[RoundEvidence]:
        """Run round `index` (hours [start_h, end_h) of the soak) on `nodes`; with `dcgm_level`, DCGM's
        diagnostic at that level too."""
        ...


@dataclass
class NodeSoak:
    """The restart policy's state of one node."""

    node: str
    pool: str | None
    status: str = RUNNING
    history: NodeHistory | None = None
    clean_hours: float = 0.0
    left_round: int | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    rejoined: int = 0  # times its clock restarted
    rounds: int = 0  # rounds it ran, the one it left in and those before a rejoin among them


class SoakController:
    """One soak's rounds over its run folder."""

    def __init__(
        self,
        spec: ClusterSpec,
        baselines: dict[str, GpuBaseline],
        folder: SoakFolder,
        target: RoundTarget,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.spec = spec
        self.baselines = baselines
        self.folder = folder
        self.target = target
        self.on_progress = on_progress
        plan = folder.read_plan()
        self.soak = SoakSpec.model_validate(plan["soak"])
        self.round_h = self.soak.round_s / 3600
        self.nodes = {n["node"]: NodeSoak(n["node"], n["pool"]) for n in plan["nodes"]}
        self.fabric = FabricSoak(spec, self.soak, baselines, {n: s.pool for n, s in self.nodes.items()})
        for n in self.nodes.values():
            if n.pool is None:
                n.status, n.left_round = LEFT, -1
                n.findings = [
                    {
                        "check": "pool.membership",
                        "node": n.node,
                        "status": "fail",
                        "message": n.node
                        + " is in no pool of the spec (or in several): it has no baseline to soak against",
                    }
                ]
            else:
                n.history = NodeHistory(n.node, clock_round=0, clock_h=0.0)
        self.wall_s = 0.0
        self.controller_s = 0.0
        self.ingest_s = 0.0
        self._replaying = False
        self.controller_cpu_s = 0.0  # of the time between rounds, the CPU's (what a busy machine cannot inflate)
        self._round_wall: list[float] = []

    # ---- replay and restart policy --------------------------------------------------------------------------------

    def _rejoin(self, node: str, index: int) -> None:
        n = self.nodes.get(node)
        if n is None or n.pool is None:
            raise ConfigError(f"{node!r} is not a node of this soak", key="--rejoin")
        if n.status != LEFT:
            raise ConfigError(
                f"{node} has not left the soak: only a node that failed a round can rejoin", key="--rejoin"
            )
        n.status, n.left_round, n.findings, n.clean_hours = RUNNING, None, [], 0.0
        n.history = NodeHistory(node, clock_round=index, clock_h=index * self.round_h)
        n.rejoined += 1

    def _apply(self, r: NodeRound, findings: list[dict[str, Any]]) -> None:
        n = self.nodes[r.node]
        assert n.history is not None
        n.rounds += 1
        if findings:
            n.status, n.left_round, n.findings = LEFT, r.round, findings
            n.clean_hours = r.start_h - n.history.clock_h
            n.history = None  # what it measured before it left is on disk; its clock restarts if it rejoins
            self._mark(r.node, "failed")
        else:
            n.clean_hours = n.history.end_h - n.history.clock_h

    def _mark(self, node: str, status: str) -> None:
        """Tell the target where the node stands (a cluster labels it); a replayed round marks nothing again."""
        mark = getattr(self.target, "mark", None)
        if mark is not None and not self._replaying:
            mark(node, status)

    def _replay(self) -> int:
        """The committed rounds' effects (summaries only): the first round still to run."""
        k = 0
        self._replaying = True
        while (s := self.folder.read_summary(k)) is not None:
            for node in s.get("rejoined", []):
                self._rejoin(node, k)
            for node, doc in s["nodes"].items():
                r = NodeRound.from_json(doc)
                history = self.nodes[node].history
                assert history is not None
                history.add(r)
                self._apply(r, s["left"].get(node, []))
            self.fabric.replay(s.get("fabric"))
            self._round_wall.append(float(s.get("wallS", 0.0)))
            k += 1
        self._replaying = False
        return k

    # ---- one round ----------------------------------------------------------------------------------------------

    def _measure(self, index: int, running: list[str]) -> tuple[dict[str, NodeRound], float, float]:
        """Every running node's round summary: from its raw file where an interrupted controller left one, else
        from the target; the time spent waiting on the target, and taking in each node's round as it came (on a
        cluster, while the other nodes still run)."""
        start_h, end_h = index * self.round_h, (index + 1) * self.round_h
        level = self.soak.dcgm_level(start_h, end_h)
        summaries: dict[str, NodeRound] = {}
        for node in running:
            ev = self.folder.read_raw(index, node)
            if ev is not None:
                summaries[node] = summarize(ev, level)
        todo = [n for n in running if n not in summaries]
        rounds = iter(self.target.run_round(todo, index, start_h, end_h, level))
        waited = ingest = 0.0
        while True:
            t = time.monotonic()
            ev = next(rounds, None)
            got = time.monotonic()
            waited += got - t
            if ev is None:
                break
            self.folder.write_raw(ev)
            summaries[ev.node] = summarize(ev, level)
            ingest += time.monotonic() - got
        missing = [n for n in todo if n not in summaries]
        for node in missing:  # the target gave nothing for it: not measured, which fails closed
            summaries[node] = NodeRound(
                node, index, start_h, end_h, False, ("the target returned no round",), 0, (), {}
            )
        return summaries, waited, ingest

    def _pool_temperatures(self, summaries: dict[str, NodeRound]) -> dict[str, float | None]:
        temps: dict[str, list[float]] = {}
        for node, r in summaries.items():
            pool = self.nodes[node].pool
            assert pool is not None
            temps.setdefault(pool, []).extend(g.temperature_c for g in r.gpus if g.temperature_c is not None)
        return {p: (median(t) if t else None) for p, t in temps.items()}

    def _judge(self, r: NodeRound, pool_temps: dict[str, float | None]) -> list[Finding]:
        n = self.nodes[r.node]
        assert n.pool is not None
        assert n.history is not None
        n.history.add(r)
        pool = self.spec.pool(n.pool)
        peers = Peers(n.pool, pool_temps.get(n.pool))
        return judge_round(n.history, r, peers, self.baselines[n.pool], self.soak.criteria, pool.expect.gpus_per_node)

    def _round(self, index: int, rejoined: list[str]) -> None:
        began = time.monotonic()
        running = [n for n, s in self.nodes.items() if s.status == RUNNING]
        summaries, waited, ingest = self._measure(index, running)
        fabric, took = self.fabric.round(self.target, index, running, self.round_h, self.folder)  # across nodes
        end = getattr(self.target, "end_round", None)  # a cluster's round lasts its length, the collective within
        t = time.monotonic()
        if end is not None:
            end()
        waited += took + time.monotonic() - t
        cpu = time.process_time()  # between rounds only the controller runs in this process
        pool_temps = self._pool_temperatures(summaries)
        left: dict[str, list[dict[str, Any]]] = {}
        for node in running:
            findings = [f.to_json() for f in self._judge(summaries[node], pool_temps)]
            if findings:
                left[node] = findings
            self._apply(summaries[node], findings)
        wall = time.monotonic() - began
        overhead = wall - waited - ingest  # between rounds: the nodes wait on the controller
        self.controller_cpu_s += time.process_time() - cpu
        doc = {
            "round": index,
            "startH": index * self.round_h,
            "endH": (index + 1) * self.round_h,
            "rejoined": rejoined,
            "nodes": {n: r.to_json() for n, r in summaries.items()},
            "left": left,
            **({"fabric": fabric} if fabric is not None else {}),
            "wallS": round(wall, 4),
            "controllerS": round(overhead, 4),
            "ingestS": round(ingest, 4),
        }
        self.folder.write_summary(index, doc)  # the round's commit
        self.wall_s += wall
        self.controller_s += overhead
        self.ingest_s += ingest
        self._round_wall.append(wall)
        self._progress(index + 1)

    # ---- progress and result ------------------------------------------------------------------------------------

    def _progress(self, done: int) -> Progress:
        total = self.soak.rounds
        recent = self._round_wall[-10:]
        per_round = sum(recent) / len(recent) if recent else 0.0
        eta = datetime.now(UTC) + timedelta(seconds=per_round * (total - done))
        nodes = {
            n.node: {
                "status": n.status,
                "pool": n.pool,
                "rounds": n.rounds,
                "cleanHours": round(n.clean_hours, 3),
                "leftRound": n.left_round,
                "rejoined": n.rejoined,
                "eta": eta.strftime("%Y-%m-%dT%H:%M:%SZ") if n.status == RUNNING and done < total else None,
            }
            for n in self.nodes.values()
        }
        progress = Progress(done, total, nodes, self.wall_s, self.controller_s, self.ingest_s, self.controller_cpu_s)
        write_soak_metrics(
            self.folder.path / METRICS_FILE,
            self.folder.run.id,
            self.spec.metadata.name,
            progress,
            per_round * (total - done),
        )
        fabric = fabric_progress(self.fabric.result())
        self.folder.write_progress(
            {"round": done, "rounds": total, "roundHours": self.round_h, "nodes": nodes, "updated": _now()}
            | ({"fabric": fabric} if fabric is not None else {})
        )
        if self.on_progress is not None:
            self.on_progress(progress)
        return progress

    def _finish(self) -> SoakResult:
        need = self.soak.duration_s / 3600
        nodes: dict[str, dict[str, Any]] = {}
        unjudged = drift_not_judged(self.soak)
        for n in self.nodes.values():
            # to the microsecond: a round's hours are a float sum (three 1 s rounds: 3 * (1/3600) < 3/3600)
            result = "fail" if n.status == LEFT else "pass" if round(n.clean_hours - need, 9) >= 0 else "incomplete"
            if result == "pass" and unjudged:
                result = "incomplete"  # a soak too short to hold a round to its reference never passes
            nodes[n.node] = {
                **({"notJudged": unjudged} if unjudged and result != "fail" else {}),
                "result": result,
                "pool": n.pool,
                "cleanHours": round(n.clean_hours, 3),
                "requiredHours": need,
                "leftRound": n.left_round,
                "rejoined": n.rejoined,
                "findings": n.findings,
            }
        for node, v in nodes.items():
            if v["result"] != "fail" and self.nodes[node].pool is not None:
                self._mark(node, v["result"])
        fabric = self.fabric.result()
        results = {v["result"] for v in nodes.values()} | ({fabric["result"]} if fabric is not None else set())
        overall = "fail" if "fail" in results else "incomplete" if "incomplete" in results else "pass"
        doc = {"schema": RESULT_SCHEMA, "run": self.folder.run.id, "result": overall, "nodes": nodes, "fabric": fabric}
        self.folder.write_result(doc | {"finished": _now()})
        times = (self.wall_s, self.controller_s, self.ingest_s, self.controller_cpu_s)
        return SoakResult(self.folder.run.path, overall, nodes, *times, fabric)

    def run(self, rejoin: Sequence[str] = ()) -> SoakResult:
        """Run (or continue) the soak to its end; one controller per run (SoakBusyError otherwise)."""
        hold = getattr(self.target, "hold", None)  # a cluster's Leases on its nodes, beside the folder's lock
        in_pool = [n.node for n in self.nodes.values() if n.pool is not None]
        with self.folder.lock(), hold(in_pool) if hold is not None else contextlib.nullcontext():
            first = self._replay()
            for node in rejoin:
                self._rejoin(node, first)
            for index in range(first, self.soak.rounds):
                self._round(index, list(rejoin) if index == first else [])
            if first >= self.soak.rounds and rejoin:
                raise ConfigError("the soak has ended: a node cannot rejoin it; start a new soak", key="--rejoin")
            return self._finish()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
