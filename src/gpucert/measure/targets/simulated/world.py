"""The simulated fleet's world: the spec, the fleet and its faults indexed per node, and what every part of the
simulation asks of them (a node's SKU and labels, a component's version on a node, the GPUs on its bus, a metric's
slow-down factor, a node's random generator). Deterministic: every node draws from its own generator seeded by
(fleet seed, node number), so the order and parallelism of measuring change nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache

import numpy as np

from gpucert.plan.checks import GPU_METRICS, METRICS
from gpucert.plan.layout import run_id_time
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.simulated_fabric import FABRIC_FAULTS
from gpucert.spec.simulated_fleet import (
    DcgmFault,
    DegradeFault,
    DriftFault,
    EccFault,
    Fault,
    FleetPool,
    IntermittentFault,
    MissingComponentFault,
    MissingGpuFault,
    NvlinkDownFault,
    NvlinkErrorsFault,
    OrderingFault,
    PcieLinkFault,
    PreflightFault,
    RemappedRowsFault,
    SimulatedFleet,
    SlowFault,
    SwappedGpuFault,
    TemperatureFault,
    ThrottleFault,
    UnhealthyGpuFault,
    UnreachableFault,
    VersionFault,
    XidFault,
)
from gpucert.stack.compat import cuda_of_driver

__all__ = ["DEFAULT_NODE_STACK", "T0", "NodeFaults", "World", "cuda_of", "iso", "sig"]

# the streams of the noise keys added after the first fleets: each draws from a generator of its own, so a fleet
# that does not set them measures exactly as it did before they existed
GPU_SPREAD_STREAM, NODE_SPREAD_STREAM, VARYING_STREAM, OUTLIER_STREAM = 0x5B, 0x5C, 0x5D, 0x5E
RUN_STREAM = 0x5F
SHARED_STREAM = 0x60  # the draw a board's (node's, run's) metrics share under noise.metricCorrelation

T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
DEFAULT_NODE_STACK = {
    "kubelet": "v1.31.4",
    "containerRuntime": "containerd://1.7.24",
    "kernel": "5.15.0-131-generic",
    "osImage": "Ubuntu 22.04.5 LTS",
    "dcgm": "4.2.3",
}


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# the CUDA a driver supports, looked up once per driver version (a fleet runs a handful), not once per node
cuda_of = lru_cache(maxsize=64)(cuda_of_driver)


def sig(x: float) -> float:
    return float(f"{x:.5g}")


@dataclass
class NodeFaults:
    """The faults of one node, indexed for the generator."""

    slow: dict[tuple[int | None, str], float] = field(default_factory=dict)
    degrading: dict[tuple[int | None, str], float] = field(default_factory=dict)  # the figure kept per day
    varying: dict[tuple[int | None, str], list[IntermittentFault | DriftFault]] = field(default_factory=dict)
    gpu: dict[int, list[Fault]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    ordering: list[OrderingFault] = field(default_factory=list)
    missing: set[int] = field(default_factory=set)
    swapped: set[int] = field(default_factory=set)
    unhealthy: set[int] = field(default_factory=set)
    missing_components: set[str] = field(default_factory=set)
    unreachable: bool = False
    preflight: PreflightFault | None = None

    def add(self, f: Fault) -> None:
        """Index one fault: by GPU and metric for the figures, by GPU for the readings, by kind for the node's."""
        match f:
            case SlowFault():
                self.slow[(f.gpu, f.metric)] = self.slow.get((f.gpu, f.metric), 1.0) * f.factor
            case DegradeFault():
                self.degrading[(f.gpu, f.metric)] = self.degrading.get((f.gpu, f.metric), 1.0) * (1 - f.per_day)
            case IntermittentFault() | DriftFault():
                self.varying.setdefault((f.gpu, f.metric), []).append(f)
            case MissingGpuFault():
                self.missing.add(f.gpu)
            case SwappedGpuFault():
                self.swapped.add(f.gpu)
            case UnhealthyGpuFault():
                self.unhealthy.add(f.gpu)
            case _:
                self._add_to_node(f)

    def _add_to_node(self, f: Fault) -> None:
        match f:
            case VersionFault():
                self.versions[f.component] = f.version
            case OrderingFault():
                self.ordering.append(f)
            case MissingComponentFault():
                self.missing_components.add(f.component)
            case UnreachableFault():
                self.unreachable = True
            case PreflightFault():
                self.preflight = f
            case (
                EccFault()
                | RemappedRowsFault()
                | PcieLinkFault()
                | ThrottleFault()
                | NvlinkDownFault()
                | NvlinkErrorsFault()
                | DcgmFault()
                | XidFault()
                | TemperatureFault()
            ):  # the GPU's readings: NVML's and DCGM's (nvml.py, dcgm.py)
                self.gpu.setdefault(f.gpu, []).append(f)


class World:
    """The spec, the fleet and its faults: what the cluster objects and the probe evidence are drawn from."""

    def __init__(self, spec: ClusterSpec, fleet: SimulatedFleet, baselines: dict[str, GpuBaseline]) -> None:
        """`baselines` by SKU name: every SKU the fleet's groups name (the nominal figures of their GPUs)."""
        self.spec = spec
        self.fleet = fleet
        self.skus = baselines
        self.names = fleet.node_names()
        self._numbers = {n: i for i, n in enumerate(self.names)}  # each node's place in the fleet, looked up once
        self._group = fleet.pool_of  # each node's group of the fleet, built once
        self.faults: dict[str, NodeFaults] = {n: NodeFaults() for n in self.names}
        # what each node runs, unless a fault says otherwise: its group's versions over the fleet's, over the pins
        # of the spec's pool the node is in (else the spec's recipe), over a default node
        self.installed = {n: self._installed(n) for n in self.names}
        # the fabric's faults are its own (targets/simulated/fabric.py reads them)
        for f in fleet.faults:
            if not isinstance(f, FABRIC_FAULTS):
                self.faults[f.node].add(f)

    def number(self, node: str) -> int:
        """The node's place in the fleet's order (0-based), what its generators are seeded by: `names.index`, in
        one look-up instead of a scan of the fleet (asked for every node and pair measured)."""
        try:
            return self._numbers[node]
        except KeyError:
            raise ValueError(f"{node!r} is not a node of the fleet") from None

    def group(self, node: str) -> FleetPool:
        return self._group[node]

    def baseline_of(self, node: str) -> GpuBaseline:
        """The SKU of the node's GPUs: their product name, memory, PCIe link and nominal figures."""
        return self.skus[self._group[node].sku]

    def labels(self, node: str) -> dict[str, str]:
        """The node's labels as the cluster has them before GFD's count (hostname, product, its group's own)."""
        return {
            "kubernetes.io/hostname": node,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.baseline_of(node).product,
            **self._rack_label(node),
            **self._group[node].labels,
        }

    def _rack_label(self, node: str) -> dict[str, str]:
        fabric = self.fleet.fabric_of(node)
        racks = fabric.racks if fabric is not None else None
        return {racks.label: racks.of(self.number(node))} if racks is not None else {}

    def _installed(self, node: str) -> dict[str, str]:
        labels = {**self.labels(node), "nvidia.com/gpu.count": str(self._group[node].nodes.gpus_per_node)}
        pools = [p.name for p in self.spec.pools if p.selects(labels)]
        stack = self.spec.stack_for(pools[0]) if len(pools) == 1 else self.spec.stack
        pins = {c.name: c.version for c in stack.components}
        return {**DEFAULT_NODE_STACK, **pins, **self.fleet.stack, **self._group[node].stack}

    def _version(self, node: str, component: str) -> str:
        return self.faults[node].versions.get(component, self.installed[node].get(component, "0.0.0"))

    def _present(self, node: str) -> list[int]:
        """Physical GPU slots that answer on the bus; NVML numbers them 0.. in bus order."""
        slots = self._group[node].nodes.gpus_per_node
        return [s for s in range(slots) if s not in self.faults[node].missing]

    def board_identity(self, node: str, slot: int) -> tuple[str, str]:
        """The UUID and serial NVML reads of the board in `slot`: one board, one identity, in every run and soak of
        the fleet; a swapped (replacement) board is another one."""
        board = "/replacement" if slot in self.faults[node].swapped else ""
        d = hashlib.sha256(f"{self.fleet.seed}/{node}/{slot}{board}".encode()).hexdigest()
        # str(uuid.UUID(d[:32])), spelled out: its 32 lower-case hex digits in groups (no version bits are set), at a
        # third of the cost (8,192 boards read in a re-test of 1,024 nodes)
        return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}", str(int(d[:12], 16) % 10**13).zfill(13)

    def _rng(self, node: str) -> np.random.Generator:
        return np.random.default_rng([self.fleet.seed, self.number(node) + 1])

    def _factor(self, node: str, slot: int | None, metric: str) -> float:
        slow = self.faults[node].slow
        f = slow.get((None, metric), 1.0)
        return f * slow.get((slot, metric), 1.0) if slot is not None else f

    def _stream(self, node: str, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.fleet.seed, self.number(node) + 1, *key])

    def _offset(self, node: str, slot: int | None, metric: str) -> float:
        """What this node (and board, for a GPU's own measurement) measures of `metric` beside the SKU's nominal
        figure, healthy: the fleet's `noise.nodeSpread` and `noise.gpuSpread`, drawn once per node and board."""
        noise = self.fleet.noise
        offset = 1.0
        m = METRICS.index(metric)
        if noise.node_spread:
            z = self._stream(node, NODE_SPREAD_STREAM).standard_normal(len(METRICS))[m]
            offset *= 1 + noise.node_spread * self._shared(float(z), node, NODE_SPREAD_STREAM)
        if noise.gpu_spread and slot is not None and metric in GPU_METRICS and not metric.startswith("p2p."):
            board = int(slot in self.faults[node].swapped)  # a replacement board is another draw
            z = self._stream(node, GPU_SPREAD_STREAM, slot, board).standard_normal(len(METRICS))[m]
            offset *= 1 + noise.gpu_spread * self._shared(float(z), node, GPU_SPREAD_STREAM, slot, board)
        return max(offset, 0.05)

    def _shared(self, z: float, node: str, *key: int) -> float:
        """`z` (one metric's own draw) mixed with a draw every metric of the same board, node or run shares, so
        that two metrics' offsets correlate by noise.metricCorrelation; `z` itself where it is 0 (as before)."""
        rho = self.fleet.noise.metric_correlation
        if not rho:
            return z
        common = float(self._stream(node, SHARED_STREAM, *key).standard_normal())
        return float((1 - rho) ** 0.5 * z + rho**0.5 * common)

    def _run_factor(self, node: str, slot: int | None, metric: str, run_id: str) -> float:
        """What this run of the board (or node) measures beside its fixed offset: the fleet's `noise.runToRun`,
        drawn per run id, and the `degrade` faults compounded over the days from T0 to the run's time. 1.0 for a
        fleet with neither, so its figures stay as they were."""
        factor = 1.0
        run_to_run = self.fleet.noise.run_to_run
        if run_to_run is not None and run_to_run.cv:
            board = int(slot is not None and slot in self.faults[node].swapped)
            run = int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big")
            where = 999 if slot is None else slot
            z = self._stream(node, RUN_STREAM, where, board, run).standard_normal(len(METRICS))[METRICS.index(metric)]
            factor *= 1 + run_to_run.cv * self._shared(float(z), node, RUN_STREAM, where, board, run)
        degrading = self.faults[node].degrading
        kept = degrading.get((None, metric), 1.0) * (degrading.get((slot, metric), 1.0) if slot is not None else 1.0)
        if kept != 1.0:
            at = run_id_time(run_id)
            days = max((at - T0).total_seconds() / 86400, 0.0) if at is not None else 0.0
            factor *= kept**days
        return max(factor, 0.05)

    def _varying(self, node: str, slot: int | None, metric: str, n: int, salt: int = 0) -> np.ndarray | None:
        """Per-sample factors of the faults that come and go or drift on this GPU (or node), None when none do."""
        nf = self.faults[node]
        faults = [
            *nf.varying.get((None, metric), []),
            *(nf.varying.get((slot, metric), []) if slot is not None else []),
        ]
        if not faults:
            return None
        out = np.ones(n)
        for i, f in enumerate(faults):
            if isinstance(f, IntermittentFault):
                where = 999 if slot is None else slot
                hit = self._stream(node, VARYING_STREAM, where, METRICS.index(metric), i, salt).random(n) < f.fraction
                out *= np.where(hit, f.factor, 1.0)
            else:
                out *= np.linspace(1.0, f.factor, n) if n > 1 else f.factor
        return out
