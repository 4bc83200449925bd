"""The SimulatedFleet contract (`kind: SimulatedFleet`): a fleet of simulated GPU nodes and the faults injected.

A fleet is one group of nodes (`sku` and `nodes`) or several (`pools`: each its SKU, nodes, extra node labels and
installed versions), so a simulated cluster can mix H100 and H200 nodes, or 8- and 4-GPU nodes. Pure: a model and
its loader. The simulator in targets/simulated/ turns it into raw observations.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, field_validator

from gpucert.plan.checks import FABRIC_METRICS, METRICS, NODE_METRICS, REPEATED_METRICS
from gpucert.spec.cluster import ClusterSpec, Metadata
from gpucert.spec.documents import Document, Problem, load_document
from gpucert.spec.names import NameError_, check_file_stem, check_node_name
from gpucert.spec.simulated_fabric import FabricFault, FleetFabric, fabric_problems
from gpucert.spec.simulated_noise import Noise
from gpucert.spec.soak import SoakSimulation
from gpucert.spec.versions import VersionError, parse_version

__all__ = ["FLEET_METRICS", "Fault", "FleetPool", "SimulatedFleet", "load_fleet"]


def _is_metric(name: str) -> str:
    if name not in METRICS:
        raise ValueError(f"{name!r} is not a metric; metrics are {', '.join(METRICS)}")
    return name


# the metrics a `slow` fault can scale (the nccl ones are per node: a node's slow NIC slows the multi-node ring)
Metric = Annotated[str, AfterValidator(_is_metric), WithJsonSchema({"type": "string", "enum": list(METRICS)})]
FLEET_METRICS = METRICS
NODE_LEVEL_METRICS = (*NODE_METRICS, *FABRIC_METRICS)  # one figure per node: no `gpu` in a fault
# what a node reports beside the spec's components, which a `version` fault may also change (node status.nodeInfo)
NODE_FACTS = ("kubelet", "containerRuntime", "kernel", "osImage")
GpuIndex = Annotated[int, Field(ge=0)]


class Nodes(Document):
    count: Annotated[int, Field(ge=1, le=100_000)]
    name_prefix: str = Field("gpu-node-", alias="namePrefix")
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] = Field(8, alias="gpusPerNode")

    def names(self) -> list[str]:
        return [f"{self.name_prefix}{i}" for i in range(1, self.count + 1)]

    @field_validator("name_prefix")
    @classmethod
    def _makes_node_names(cls, prefix: str) -> str:
        try:
            check_node_name(f"{prefix}1")
        except NameError_:
            raise ValueError(
                f"{prefix!r} + a number is not a Kubernetes node name: use lower-case letters, digits, '-' and '.'"
            ) from None
        return prefix


class SlowFault(Document):
    kind: Literal["slow"]
    node: str
    gpu: GpuIndex | None = None  # every GPU of the node when absent
    metric: Metric
    factor: Annotated[float, Field(gt=0, le=2)]


def _is_repeated(name: str) -> str:
    if name not in REPEATED_METRICS:
        raise ValueError(
            f"{name!r} is not measured by repetitions of one GPU or node; an intermittent or drifting fault applies "
            f"to {', '.join(REPEATED_METRICS)} (use `slow` for the others)"
        )
    return name


RepeatedMetric = Annotated[
    str, AfterValidator(_is_repeated), WithJsonSchema({"type": "string", "enum": list(REPEATED_METRICS)})
]


class IntermittentFault(Document):
    """Slow in a fraction of the samples only: each repetition is slowed by `factor` with probability `fraction`
    (a GPU that throttles now and then, a flaky link). The median of its samples can hide it."""

    kind: Literal["intermittent"]
    node: str
    gpu: GpuIndex | None = None  # every GPU of the node when absent
    metric: RepeatedMetric
    factor: Annotated[float, Field(gt=0, le=2)]
    fraction: Annotated[float, Field(gt=0, le=1)]


class DriftFault(Document):
    """Slowing over the run: a measurement's samples go from full speed at the first repetition to `factor` at
    the last (a GPU heating up, a clock stepping down)."""

    kind: Literal["drift"]
    node: str
    gpu: GpuIndex | None = None  # every GPU of the node when absent
    metric: RepeatedMetric
    factor: Annotated[float, Field(gt=0, le=2)]


class DegradeFault(Document):
    """Slow degradation across runs: the board (every GPU of the node when `gpu` is absent) loses `perDay` of its
    figure per day between the simulator's epoch (2026-11-30T08:00Z) and the time in the run's id, compounded."""

    kind: Literal["degrade"]
    node: str
    gpu: GpuIndex | None = None
    metric: Metric
    per_day: Annotated[float, Field(gt=0, lt=0.1)] = Field(alias="perDay")


class EccFault(Document):
    kind: Literal["ecc"]
    node: str
    gpu: GpuIndex
    uncorrected: Annotated[int, Field(ge=0)] = 0
    corrected: Annotated[int, Field(ge=0)] = 0


class RemappedRowsFault(Document):
    kind: Literal["remapped-rows"]
    node: str
    gpu: GpuIndex
    failure: bool = False
    pending: bool = False
    uncorrectable: Annotated[int, Field(ge=0)] = 0


class PcieLinkFault(Document):
    kind: Literal["pcie-link"]
    node: str
    gpu: GpuIndex
    generation: Annotated[int, Field(ge=1, le=6)]
    width: Literal[1, 2, 4, 8, 16] = 16


class ThrottleFault(Document):
    """A clock-event reason holds the GPU's clocks down for `share` of the time the probes load it (NVML counts
    the nanoseconds; HW slowdown has no counter and shows in the reasons read after the load)."""

    kind: Literal["throttle"]
    node: str
    gpu: GpuIndex
    reason: Literal["hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake", "thermal", "reliability"]
    share: Annotated[float, Field(gt=0, le=1)] = 1.0


class NvlinkDownFault(Document):
    """`links` of the GPU's NVLink links are inactive (the last ones): P2P may still look fine."""

    kind: Literal["nvlink-down"]
    node: str
    gpu: GpuIndex
    links: Annotated[int, Field(ge=1, le=36)] = 1


class NvlinkErrorsFault(Document):
    """One NVLink link counts `count` errors of one kind while the probes load the GPU."""

    kind: Literal["nvlink-errors"]
    node: str
    gpu: GpuIndex
    counter: Literal["crc_flit", "crc_data", "replay", "recovery"]
    count: Annotated[int, Field(ge=1)]
    link: Annotated[int, Field(ge=0, le=35)] = 0


class DcgmFault(Document):
    kind: Literal["dcgm"]
    node: str
    gpu: GpuIndex
    test: Annotated[str, Field(pattern=r"^[a-z_]+$")]
    status: Literal["Fail"] = "Fail"


class XidFault(Document):
    kind: Literal["xid"]
    node: str
    gpu: GpuIndex
    code: Annotated[int, Field(ge=1)]


class TemperatureFault(Document):
    kind: Literal["temperature"]
    node: str
    gpu: GpuIndex
    celsius: Annotated[float, Field(ge=0, le=150)]


class VersionFault(Document):
    kind: Literal["version"]
    node: str
    component: str
    version: str

    @field_validator("version")
    @classmethod
    def _is_version(cls, v: str) -> str:
        try:
            parse_version(v)
        except VersionError as exc:
            raise ValueError(str(exc)) from None
        return v


class OrderingFault(Document):
    kind: Literal["ordering"]
    node: str
    component: str
    before: str


class MissingGpuFault(Document):
    kind: Literal["missing-gpu"]
    node: str
    gpu: GpuIndex


class SwappedGpuFault(Document):
    """The GPU in this slot was replaced by another board: a different serial and UUID, same performance."""

    kind: Literal["swapped-gpu"]
    node: str
    gpu: GpuIndex


class UnhealthyGpuFault(Document):
    """The device plugin reports the GPU unhealthy: it is on the bus and labelled, but not allocatable."""

    kind: Literal["unhealthy-gpu"]
    node: str
    gpu: GpuIndex


class MissingComponentFault(Document):
    """A component's DaemonSet has no pod on the node."""

    kind: Literal["missing-component"]
    node: str
    component: str


class UnreachableFault(Document):
    kind: Literal["unreachable"]
    node: str


PreflightStepName = Literal["home", "cache", "nvml", "cupy", "kernel", "cublas", "nccl", "dcgmi", "rdma"]


class PreflightFault(Document):
    """The probe pod's preflight fails at `step` (an image without the CUDA headers, a pod without NVML, no
    dcgmi, ...): no probe runs on the node, and the preflight's finding is the node's one finding."""

    kind: Literal["preflight"]
    node: str
    step: PreflightStepName
    message: str | None = None  # what the step reports; by default what the real step reports for that cause


Fault = Annotated[
    SlowFault
    | IntermittentFault
    | DriftFault
    | DegradeFault
    | EccFault
    | RemappedRowsFault
    | PcieLinkFault
    | ThrottleFault
    | NvlinkDownFault
    | NvlinkErrorsFault
    | DcgmFault
    | XidFault
    | TemperatureFault
    | VersionFault
    | OrderingFault
    | MissingGpuFault
    | SwappedGpuFault
    | UnhealthyGpuFault
    | MissingComponentFault
    | UnreachableFault
    | PreflightFault
    | FabricFault,
    Field(discriminator="kind"),
]


def _sku_file_name(sku: str | None) -> str | None:
    try:
        return check_file_stem(sku, "SKU name") if sku is not None else None
    except NameError_ as exc:
        raise ValueError(str(exc)) from None


class FleetPool(Document):
    """One group of alike nodes in a simulated cluster: what a node pool of a real cluster is made of."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    sku: str  # names baselines/gpus/<sku>.yaml beside the spec's baselines
    nodes: Nodes
    labels: dict[str, str] = Field(default_factory=dict)  # node labels beside GFD's (e.g. an instance type)
    stack: dict[str, str] = Field(default_factory=dict)  # installed versions on these nodes (over the fleet's)
    fabric: FleetFabric | None = None  # these nodes' own RDMA rails, in place of the fleet's `fabric`

    _sku = field_validator("sku")(_sku_file_name)


class SimulatedFleet(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SimulatedFleet"]
    metadata: Metadata
    sku: str | None = None  # names baselines/gpus/<sku>.yaml beside the spec's baseline (one group of nodes)

    _sku = field_validator("sku")(_sku_file_name)

    nodes: Nodes | None = None
    pools: list[FleetPool] = Field(default_factory=list)  # several groups of nodes instead of `sku` and `nodes`
    stack: dict[str, str] = Field(default_factory=dict)
    noise: Noise = Field(default_factory=Noise)
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0  # numpy seeds are non-negative (SeedSequence)
    faults: list[Fault] = Field(default_factory=list)
    soak: SoakSimulation | None = None  # compressed time and faults that come with it (`gpucert soak`)
    fabric: FleetFabric | None = None  # every node's RDMA rails (spec/simulated_fabric.py)

    def groups(self) -> list[FleetPool]:
        """The fleet's groups of nodes: its `pools`, or the one group `sku` and `nodes` declare."""
        if self.pools:
            return list(self.pools)
        assert self.sku is not None  # load_fleet checked that one form is given
        assert self.nodes is not None
        return [FleetPool(name="fleet", sku=self.sku, nodes=self.nodes)]

    def node_names(self) -> list[str]:
        return list(self.pool_of)

    @cached_property  # frozen: built once, not every node's name per question (7,175 lists at 1,024 nodes)
    def pool_of(self) -> dict[str, FleetPool]:
        return {n: g for g in self.groups() for n in g.nodes.names()}

    def fabric_of(self, node: str) -> FleetFabric | None:
        """The node's RDMA rails: its pool's own `fabric`, else the fleet's."""
        own = self.pool_of[node].fabric
        return own if own is not None else self.fabric


def _one_form(fleet: SimulatedFleet) -> list[Problem]:
    """Either `sku` and `nodes` (one group of nodes) or `pools` (several), and node names that do not repeat."""
    if fleet.pools and (fleet.sku is not None or fleet.nodes is not None):
        key = "sku" if fleet.sku is not None else "nodes"
        return [((key,), "give either `sku` and `nodes` (one group of nodes) or `pools` (several), not both")]
    if not fleet.pools:
        return [
            ((k,), "required key is missing; add it (or declare `pools`)")
            for k in ("sku", "nodes")
            if getattr(fleet, k) is None
        ]
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    names: set[str] = set()
    for i, group in enumerate(fleet.pools):
        if group.name in names:
            problems.append((("pools", i, "name"), f"pool {group.name!r} is declared twice; name each pool once"))
        names.add(group.name)
        for node in group.nodes.names():
            if node in seen:
                message = f"node {node} would be in pools {seen[node]} and {group.name}: give each its own namePrefix"
                problems.append((("pools", i, "nodes", "namePrefix"), message))
                break
            seen[node] = group.name
    return problems


def _cross_check(fleet: SimulatedFleet) -> list[Problem]:
    problems = _one_form(fleet)
    if problems:
        return problems
    problems += fabric_problems(fleet.fabric, list(fleet.faults), fleet.node_names(), fleet.fabric_of)
    problems += [
        (("pools", i, "fabric", *key[1:]), message)
        for i, group in enumerate(fleet.pools)
        if group.fabric is not None
        for key, message in fabric_problems(group.fabric, [], [], lambda _: None)
    ]
    first, last = fleet.node_names()[0], fleet.node_names()[-1]
    for i, group in enumerate(fleet.pools or [None]):
        try:
            check_node_name((group.nodes if group else fleet.nodes).names()[-1])  # type: ignore[union-attr]
        except NameError_ as exc:  # the longest name the prefix makes
            problems.append(((("pools", i, "nodes", "namePrefix") if group else ("nodes", "namePrefix")), str(exc)))
    for i, fault in enumerate(fleet.faults):
        if fault.node not in fleet.pool_of:
            problems.append((("faults", i, "node"), f"no node {fault.node!r} in this fleet; nodes are {first}..{last}"))
            continue
        gpus = fleet.pool_of[fault.node].nodes.gpus_per_node
        gpu = getattr(fault, "gpu", None)
        if (
            isinstance(fault, SlowFault | IntermittentFault | DriftFault | DegradeFault)
            and gpu is not None
            and fault.metric in NODE_LEVEL_METRICS
        ):
            problems.append(
                (("faults", i, "gpu"), f"{fault.metric} is one figure per node: remove `gpu` to slow the node's")
            )
        if gpu is not None and gpu >= gpus:
            problems.append((("faults", i, "gpu"), f"GPU {gpu} does not exist on {fault.node}; GPUs are 0..{gpus - 1}"))
    return problems


def _components(fleet: SimulatedFleet, spec: ClusterSpec) -> list[Problem]:
    """A fault that names a component the spec does not declare would change nothing: an error, not a no-op."""
    declared = [c.name for c in spec.stack.components]
    with_pods = [c for c, src in spec.stack.sources().items() if src.label is None]
    problems: list[Problem] = []
    for i, fault in enumerate(fleet.faults):
        names: list[tuple[str, str, list[str]]] = []
        if isinstance(fault, VersionFault):
            names.append(("component", fault.component, [*declared, *NODE_FACTS]))
        elif isinstance(fault, OrderingFault):
            names += [("component", fault.component, declared), ("before", fault.before, declared)]
        elif isinstance(fault, MissingComponentFault):
            names.append(("component", fault.component, with_pods))
        problems += [
            (
                ("faults", i, key),
                f"{name!r} is not a component of spec {spec.metadata.name} that this fault can change; "
                f"known: {', '.join(known) or 'none'}",
            )
            for key, name, known in names
            if name not in known
        ]
    return problems


def load_fleet(path: Path | str, spec: ClusterSpec | None = None) -> SimulatedFleet:
    """Read and validate a SimulatedFleet (against the spec it simulates, when given); raises ConfigError naming
    file, key path and line."""

    def check(fleet: SimulatedFleet) -> list[Problem]:
        return _cross_check(fleet) + (_components(fleet, spec) if spec is not None else [])

    return load_document(Path(path), SimulatedFleet, check=check)
