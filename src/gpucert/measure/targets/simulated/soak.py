"""A simulated fleet's soak: rounds in compressed time (the fleet's `soak.timeScale`), with faults that start at a
time and grow (`soak.faults`): a board that degrades, an XID, thermal creep, a corrected-ECC storm, a pod that
restarts, a node's links to the fabric that slow (the all-reduce across nodes, `fabric_round`). Like the rest of
the simulator it produces observations only: each round's raw samples and NVML readings.

A round covers hours [start, end) of the soak; a fault shows in the round whose hours it starts in and in every
later round (a degraded board stays degraded, creep keeps climbing, a storm keeps counting; an XID and a restart are
events of their round). Deterministic: each (node, round) draws from a generator of its own.

Temperatures under the soak's load are an assumption (no public per-GPU soak data was found): 62 °C, a node's
GPUs 0.7 °C apart (sd, shared chassis air), each board 0.5 °C (sd), each round 0.2 °C (sd), so healthy peers stay
well inside the 5 °C spread the criterion allows.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import numpy as np

from gpucert.errors import ConfigError
from gpucert.evaluate.soak_round import MULTINODE, FabricRound, RoundEvidence
from gpucert.measure.evidence import (
    DcgmEvidence,
    EccCounts,
    GpuEvidence,
    Health,
    Measurement,
    SampleArray,
    XidEvent,
)
from gpucert.measure.probes.dcgm import parse_diag
from gpucert.measure.probes.dcgm_boards import tie_to_boards
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.measure.targets.simulated.dcgm import dcgm_document
from gpucert.measure.targets.simulated.nvml import nvml_health
from gpucert.measure.targets.simulated.world import T0, iso
from gpucert.plan.checks import METRICS
from gpucert.spec.simulated_fleet import DcgmFault
from gpucert.spec.soak import (
    DcgmAtFault,
    DegradeFault,
    EccStormFault,
    LinkSlowFault,
    PodRestartFault,
    SoakFault,
    SoakSimulation,
    ThermalCreepFault,
    XidAtFault,
)

__all__ = ["SimulatedSoak"]

SOAK_STREAM, TEMPERATURE_STREAM, FABRIC_STREAM = 0x50AC, 0x50AD, 0xFAB
LOAD_C, NODE_SD_C, GPU_SD_C, ROUND_SD_C = 62.0, 0.7, 0.5, 0.2
GPU_SAMPLES, NCCL_SAMPLES = 20, 10
# the round loads each GPU as one window (its throttle counters read around the whole round)


class SimulatedSoak:
    """Rounds on a simulated fleet: `run_round` yields each node's RoundEvidence, then waits out the round's
    compressed wall time."""

    def __init__(
        self, target: SimulatedTarget, probes: Sequence[str], run_id: str = "", reports: Path | None = None
    ) -> None:
        self.target = target
        self.probes = set(probes)
        self.run_id = run_id
        self.reports = reports  # where the fleet's node locks live (recertification's): None, no hold taken
        self.sim = target.fleet.soak or SoakSimulation()
        self._faults: dict[str, list[SoakFault]] = {}
        for i, f in enumerate(self.sim.faults):
            self._check(i, f)
            self._faults.setdefault(f.node, []).append(f)
        self._temperature: dict[str, np.ndarray] = {}
        self._nominal: dict[tuple[str, int | None, str], float] = {}

    @contextlib.contextmanager
    def hold(self, nodes: Sequence[str]) -> Iterator[None]:
        """Each node's lock (the one `gpucert recertify` takes on the simulator, under the reports folder) for as
        long as the controller runs: a second soak or a recertification of a soaking node is refused. A lock names
        its process, so one whose controller died (even by kill -9) is taken over; a resumed soak takes its own."""
        if self.reports is None:
            yield
            return
        control = self.target.node_control(self.reports)
        with contextlib.ExitStack() as stack:
            for node in nodes:
                stack.enter_context(control.lock(node, f"soak {self.run_id}"))
            yield

    def _check(self, i: int, f: SoakFault) -> None:
        path = (
            self.target.spec.resolve(self.target.spec.target.fleet)
            if hasattr(self.target.spec.target, "fleet")
            else None
        )
        if f.node not in self.target.names:
            raise ConfigError(f"no node {f.node!r} in the fleet", path=path, key=f"soak.faults[{i}].node")
        gpus = self.target.group(f.node).nodes.gpus_per_node
        gpu = getattr(f, "gpu", None)
        if gpu is not None and gpu >= gpus:
            raise ConfigError(f"{f.node} has {gpus} GPUs: name one below", path=path, key=f"soak.faults[{i}].gpu")
        if isinstance(f, DegradeFault) and f.metric not in self.target.baseline_of(f.node).metrics:
            known = ", ".join(self.target.baseline_of(f.node).metrics)
            raise ConfigError(
                f"{f.metric!r} is not measured; one of {known}", path=path, key=f"soak.faults[{i}].metric"
            )

    @property
    def round_wall_s_per_h(self) -> float:
        """Wall seconds one simulated hour takes (0: rounds run as fast as they are computed)."""
        return 3600 / self.sim.time_scale if self.sim.time_scale else 0.0

    def run_round(
        self, nodes: Sequence[str], index: int, start_h: float, end_h: float, dcgm_level: int | None = None
    ) -> Iterator[RoundEvidence]:
        began = time.monotonic()
        for node in nodes:
            yield self.node_round(node, index, start_h, end_h, dcgm_level)
        wait = (end_h - start_h) * self.round_wall_s_per_h - (time.monotonic() - began)
        if wait > 0:
            time.sleep(wait)

    def fabric_round(self, nodes: Sequence[str], index: int, start_h: float, end_h: float) -> FabricRound:
        """The all-reduce across `nodes` (certify.multinode) in the round: a ring runs at its slowest link's pace, so
        the slowest node's figure, times every link fault of theirs that has started by the round's end, sets it."""
        w = self.target
        b = w.baseline_of(nodes[0]).metrics.get(MULTINODE) if nodes else None
        if len(nodes) < 2 or b is None:
            why = "fewer than two nodes run" if len(nodes) < 2 else f"the baseline has no {MULTINODE} figure"
            return FabricRound(index, start_h, end_h, tuple(nodes), None, (), (f"{why}: no all-reduce across nodes",))
        nominal = min(self._healthy(n, None, MULTINODE) for n in nodes)
        for f in self.sim.faults:
            if isinstance(f, LinkSlowFault) and f.node in nodes and f.start_h < end_h:
                nominal = min(nominal, self._healthy(f.node, None, MULTINODE) * f.factor)
        rng = np.random.default_rng([w.fleet.seed, SOAK_STREAM, FABRIC_STREAM, index])
        samples = self._samples(rng, nominal, NCCL_SAMPLES)
        return FabricRound(index, start_h, end_h, tuple(nodes), float(np.median(samples)), tuple(samples))

    def _node_temperatures(self, node: str) -> np.ndarray:
        if node not in self._temperature:
            rng = self.target._stream(node, TEMPERATURE_STREAM)
            slots = self.target.group(node).nodes.gpus_per_node
            self._temperature[node] = LOAD_C + NODE_SD_C * rng.standard_normal() + GPU_SD_C * rng.standard_normal(slots)
        return self._temperature[node]

    def node_round(
        self, node: str, index: int, start_h: float, end_h: float, dcgm_level: int | None = None
    ) -> RoundEvidence:
        """One node's round: the certify probes' samples and NVML's readings as they stand at the round's end."""
        w = self.target
        if w.faults[node].unreachable:
            return RoundEvidence(
                node=node, round=index, start_h=start_h, end_h=end_h, collected=False, errors=["node is not Ready"]
            )
        rng = np.random.default_rng([w.fleet.seed, w.number(node) + 1, SOAK_STREAM, index])
        faults = [f for f in self._faults.get(node, []) if f.start_h < end_h]
        restarts = sum(1 for f in faults if isinstance(f, PodRestartFault) and f.start_h >= start_h)
        slots = w._present(node)
        gpus = [self._gpu(rng, node, i, s, faults, start_h, end_h) for i, s in enumerate(slots)]
        node_measurements = {}
        b = w.baseline_of(node).metrics.get("nccl.all_reduce")
        if "nccl" in self.probes and b is not None and len(slots) >= 2:
            nominal = self._healthy(node, None, "nccl.all_reduce")
            node_measurements["nccl.all_reduce"] = self._measurement(b.unit, self._samples(rng, nominal, NCCL_SAMPLES))
        return RoundEvidence(
            node=node,
            round=index,
            start_h=start_h,
            end_h=end_h,
            restarts=restarts,
            gpus=gpus,
            node_measurements=node_measurements,
            dcgm=self._dcgm(node, slots, gpus, faults, dcgm_level) if dcgm_level is not None else None,
        )

    def _dcgm(
        self, node: str, slots: list[int], gpus: list[GpuEvidence], faults: list[SoakFault], level: int
    ) -> DcgmEvidence:
        """The diagnostic as the certification's simulated probe runs it, with the fleet's own DCGM faults and the
        soak's that have started by the round's end."""
        w = self.target
        failing = {
            i: [
                *w.faults[node].gpu.get(slot, []),
                *(
                    DcgmFault(kind="dcgm", node=node, gpu=slot, test=f.test)
                    for f in faults
                    if isinstance(f, DcgmAtFault) and f.gpu == slot
                ),
            ]
            for i, slot in enumerate(slots)
        }
        serials = [g.serial or "" for g in gpus]
        doc = dcgm_document(
            failing, level, serials, version=w.installed[node]["dcgm"], driver=w._version(node, "driver")
        )
        failed = any(
            r.get("status") == "Fail"
            for c in doc["DCGM Diagnostic"]["test_categories"]
            for t in c["tests"]
            for r in t["results"]
        )
        parsed = parse_diag(doc, level=level, exit_code=226 if failed else 0)
        return tie_to_boards(parsed, {g.index: g.serial for g in gpus}, local=True)

    def _samples(self, rng: np.random.Generator, nominal: float, n: int) -> list[float]:
        x = nominal * (1 + self.target.fleet.noise.cv * rng.standard_normal(n))
        return list(np.round(x, 3).tolist())

    def _healthy(self, node: str, slot: int | None, metric: str) -> float:
        """What the board (or node) measures of `metric` without the soak's faults (its offsets, the fleet's own
        slow faults), drawn once: the same board in every round."""
        key = (node, slot, metric)
        if key not in self._nominal:
            w = self.target
            self._nominal[key] = (
                w.baseline_of(node).metrics[metric].expected
                * w._factor(node, slot, metric)
                * (w._offset(node, slot, metric))
            )
        return self._nominal[key]

    @staticmethod
    def _measurement(unit: str, samples: list[float]) -> Measurement:
        # built from the generator's floats: nothing to validate, and a soak builds tens of thousands of them
        return Measurement.model_construct(unit=unit, samples=SampleArray(samples), params={"simulated": True})

    def _gpu(
        self,
        rng: np.random.Generator,
        node: str,
        index: int,
        slot: int,
        faults: list[SoakFault],
        start_h: float,
        end_h: float,
    ) -> GpuEvidence:
        w = self.target
        mine = [f for f in faults if getattr(f, "gpu", None) == slot]
        baseline = w.baseline_of(node)
        metrics = [
            m
            for m in baseline.metrics
            if m in METRICS and m.split(".")[0] in self.probes and m.split(".")[0] not in ("p2p", "nccl")
        ]
        nominal = np.array([self._healthy(node, slot, m) for m in metrics])
        for f in mine:
            if isinstance(f, DegradeFault) and f.metric in metrics:
                nominal[metrics.index(f.metric)] *= f.factor
        # every metric's samples in one draw: a soak draws millions
        noise = 1 + w.fleet.noise.cv * rng.standard_normal((len(metrics), GPU_SAMPLES))
        drawn = np.round(nominal[:, None] * noise, 3).tolist()
        measurements = {m: self._measurement(baseline.metrics[m].unit, drawn[i]) for i, m in enumerate(metrics)}
        health = None
        if "health" in self.probes:
            health = nvml_health(rng, baseline, w.faults[node].gpu.get(slot, []), ["soak"])
            health = self._overlay(rng, health, node, slot, mine, start_h, end_h)
        gpu_uuid, serial = w.board_identity(node, slot)  # as the certification's simulated probe names the board
        return GpuEvidence(
            index=index,
            uuid=gpu_uuid,
            serial=serial,
            health=health,
            measurements=measurements,
        )

    def _overlay(
        self,
        rng: np.random.Generator,
        h: Health,
        node: str,
        slot: int,
        faults: Sequence[SoakFault],
        start_h: float,
        end_h: float,
    ) -> Health:
        """The static health of the fleet's faults, with the load's temperature and the faults that came in time."""
        temperature = float(self._node_temperatures(node)[slot]) + ROUND_SD_C * float(rng.standard_normal())
        corrected = h.ecc.volatile_corrected or 0
        xids = list(h.xid)
        for f in faults:
            match f:
                case ThermalCreepFault():
                    temperature += f.per_hour_c * (end_h - f.start_h)
                case EccStormFault():
                    corrected += int(f.per_hour * (end_h - f.start_h))
                case XidAtFault() if f.start_h >= start_h:
                    xids.append(XidEvent(code=f.code, time=iso(T0 + timedelta(hours=f.start_h)), text=""))
        ecc = EccCounts(
            volatile_corrected=corrected,
            volatile_uncorrected=h.ecc.volatile_uncorrected,
            aggregate_corrected=(h.ecc.aggregate_corrected or 0) + corrected - (h.ecc.volatile_corrected or 0),
            aggregate_uncorrected=h.ecc.aggregate_uncorrected,
        )
        return h.model_copy(update={"temperature_c": round(temperature, 1), "ecc": ecc, "xid": xids})
