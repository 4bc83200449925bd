"""Per-SKU baselines (`baselines/gpus/<SKU>.yaml`, `kind: GpuBaseline`): what each GPU must measure, and why.

Every figure carries its source. Comparisons are a closed enum, never code.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field

from gpucert.errors import ConfigError
from gpucert.evaluate.xids import HARDWARE_XIDS, XID_SOURCE
from gpucert.plan.checks import HIGHER_IS_BETTER, MAX_TOLERANCE, METRICS
from gpucert.spec.cluster import ClusterSpec, Pool, Probe
from gpucert.spec.documents import Document, Problem, load_document

__all__ = [
    "DEFAULT_THROTTLE_ALLOWANCE",
    "PROBE_METRICS",
    "THROTTLE_REASONS",
    "Comparison",
    "GpuBaseline",
    "HealthPolicy",
    "Loosened",
    "MetricBaseline",
    "NvlinkExpect",
    "check_baseline_for",
    "load_baseline",
]

# the figures each probe is judged by: a baseline must hold every one the spec's probes measure
PROBE_METRICS: dict[Probe, tuple[str, ...]] = {
    Probe(prefix): tuple(m for m in METRICS if m.split(".")[0] == prefix and m != "nccl.all_reduce.multinode")
    for prefix in ("memory", "compute", "pcie", "p2p", "nccl")
}


class Comparison(StrEnum):
    MIN = "min"  # observed must be at least expected x (1 - tolerance): higher is better
    MAX = "max"  # observed must be at most expected x (1 + tolerance): lower is better


class Loosened(Document):
    """A tolerance wider than the check vocabulary allows (checks.MAX_TOLERANCE), on purpose: why, and who agreed.
    The baseline is copied into the run's inputs/ and signed with it, so the loosening is recorded with the run."""

    reason: Annotated[str, Field(min_length=10)]
    approved_by: Annotated[str, Field(min_length=1)] = Field(alias="approvedBy")


class MetricBaseline(Document):
    expected: Annotated[float, Field(gt=0)]
    unit: str
    comparison: Comparison = Comparison.MIN
    tolerance: Annotated[float, Field(ge=0, lt=1)]
    source: Annotated[str, Field(min_length=10)]
    loosened: Loosened | None = None

    def threshold(self) -> float:
        if self.comparison is Comparison.MIN:
            return self.expected * (1 - self.tolerance)
        return self.expected * (1 + self.tolerance)


class PcieExpect(Document):
    generation: Annotated[int, Field(ge=1, le=6)]
    width: Literal[1, 2, 4, 8, 16]
    source: str


# the clock-event reasons that hold a GPU's clocks below what it asked for, by the names the probes record them
# (NVML's nvmlClocksEventReason* bits and its cumulative NVML_FI_DEV_PERF_POLICY_* / CLOCKS_EVENT_REASON_* counters)
ThrottleReason = Literal[
    "hw_slowdown",
    "hw_thermal",
    "hw_power_brake",
    "sw_thermal",
    "thermal",
    "reliability",
    "sw_power_cap",
    "sync_boost",
    "board_limit",
]
THROTTLE_REASONS: tuple[str, ...] = get_args(ThrottleReason)
# what each reason may hold the clocks down, as a fraction of the time the probes loaded the GPU, where the baseline
# says nothing: a hardware slowdown, hardware thermal slowdown or power brake is a fault however short; a software
# thermal or reliability slowdown now and then is the GPU protecting itself. Reasons not listed here (power cap,
# sync boost, board limit) are the GPU working as designed under a full load and are reported, not judged, unless
# the baseline gives them an allowance.
DEFAULT_THROTTLE_ALLOWANCE: dict[str, float] = {
    "hw_slowdown": 0.0,
    "hw_thermal": 0.0,
    "hw_power_brake": 0.0,
    "sw_thermal": 0.05,
    "thermal": 0.05,
    "reliability": 0.10,
}


class HealthPolicy(Document):
    max_volatile_corrected_ecc: Annotated[int, Field(ge=0)] = Field(alias="maxVolatileCorrectedEcc")
    temperature_margin_c: Annotated[float, Field(ge=0)] = Field(alias="temperatureMarginC")
    # XIDs an application can cause on a healthy GPU (illegal address, MMU fault from user code, ...)
    application_xids: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, alias="applicationXids")
    # per clock-event reason, the fraction of the loaded time it may hold the clocks down (merged over the defaults)
    throttle_allowance: dict[ThrottleReason, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict, alias="throttleAllowance"
    )
    source: str

    def allowances(self) -> dict[str, float]:
        """Every judged reason's allowance: the baseline's over the defaults."""
        return {**DEFAULT_THROTTLE_ALLOWANCE, **{str(r): a for r, a in self.throttle_allowance.items()}}


class NvlinkExpect(Document):
    """NVLink per GPU: the links that must be active, and the link errors allowed while the probes load the GPU."""

    links: Annotated[int, Field(ge=0, le=36)]  # 0: a GPU without NVLink (a PCIe card)
    max_crc_errors_per_second: Annotated[float, Field(ge=0)] = Field(100.0, alias="maxCrcErrorsPerSecond")
    max_replay_errors: Annotated[int, Field(ge=0)] = Field(0, alias="maxReplayErrors")
    max_recovery_errors: Annotated[int, Field(ge=0)] = Field(0, alias="maxRecoveryErrors")
    source: Annotated[str, Field(min_length=10)]


class DriftLimit(Document):
    """How far a GPU may fall against its own history before it is a finding (`drift.<metric>`)."""

    limit: Annotated[float, Field(gt=0, lt=0.5)] = 0.02


class GpuBaseline(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["GpuBaseline"]
    sku: str
    product: str
    memory_mib: Annotated[int, Field(gt=0)] = Field(alias="memoryMiB")
    pcie: PcieExpect
    health: HealthPolicy
    nvlink: NvlinkExpect | None = None  # None: health.nvlink cannot be judged (an error naming this key)
    metrics: dict[str, MetricBaseline]
    drift: DriftLimit = Field(default_factory=DriftLimit)


def _known_metrics(b: GpuBaseline) -> list[Problem]:
    return [
        (("metrics", name), f"unknown metric; known metrics are {', '.join(METRICS)}")
        for name in b.metrics
        if name not in METRICS
    ]


def _would_pass_anything(b: GpuBaseline) -> list[Problem]:
    """Figures that would pass a broken GPU: a comparison against the metric's own direction (more is better
    for every measured figure), a tolerance past the metric's sanity limit that was not loosened on purpose, and a
    hardware-fault XID excused as an application's."""
    problems: list[Problem] = []
    for name, m in b.metrics.items():
        if name not in METRICS:
            continue
        better = Comparison.MIN if name in HIGHER_IS_BETTER else Comparison.MAX
        if m.comparison is not better:
            problems.append(
                (
                    ("metrics", name, "comparison"),
                    f"{m.comparison.value} would pass any GPU {'slower' if better is Comparison.MIN else 'faster'} "
                    f"than the figure: more {name} is {'better' if better is Comparison.MIN else 'worse'}; write "
                    f"comparison: {better.value}",
                )
            )
        limit = MAX_TOLERANCE[name]
        if m.tolerance > limit and m.loosened is None:
            problems.append(
                (
                    ("metrics", name, "tolerance"),
                    f"{m.tolerance:g} passes a GPU at {1 - m.tolerance:.0%} of the figure; at most {limit:g} for "
                    f"{name}: narrow it, or loosen it on purpose with `loosened: {{reason: ..., approvedBy: ...}}`",
                )
            )
    for i, code in enumerate(b.health.application_xids):
        if code in HARDWARE_XIDS:
            problems.append(
                (
                    ("health", "applicationXids", i),
                    f"XID {code} is a fault of the GPU ({HARDWARE_XIDS[code]}; {XID_SOURCE}), not of an "
                    "application: remove it",
                )
            )
    return problems


def _check(b: GpuBaseline) -> list[Problem]:
    return _known_metrics(b) + _would_pass_anything(b)


def load_baseline(path: Path | str) -> GpuBaseline:
    return load_document(Path(path), GpuBaseline, check=_check)


def check_baseline_for(spec: ClusterSpec, pool: Pool, baseline: GpuBaseline, path: Path) -> None:
    """The baseline is for the GPUs the pool expects and holds a figure for everything the spec measures."""
    if baseline.product != pool.expect.gpu_product:
        where = (
            "expect.gpuProduct" if spec.api_version.endswith("v1alpha1") else f"pool {pool.name}'s expect.gpuProduct"
        )
        names = "certify.baseline" if spec.api_version.endswith("v1alpha1") else f"pool {pool.name}'s baseline"
        raise ConfigError(
            f"this baseline is for {baseline.product} ({baseline.sku}), but the spec expects "
            f"{pool.expect.gpu_product} ({where}): point {names} at the baseline of the GPUs you certify",
            path=path,
            key="product",
        )
    several = pool.expect.gpus_per_node >= 2
    needed = [
        (probe, m)
        for probe in spec.certify.probes
        for m in PROBE_METRICS.get(probe, ())
        if several or probe not in (Probe.P2P, Probe.NCCL)
    ]
    multinode = spec.certify.multinode
    rings = dict(multinode.rings(spec.pool_names)) if multinode is not None else {}
    if pool.name in rings and (pool.fabric is None or pool.fabric.nccl_busbw is None):
        needed.append((Probe.NCCL, "nccl.all_reduce.multinode"))  # unless the pool's fabric gives the figure
    missing = [(p, m) for p, m in needed if m not in baseline.metrics]
    if missing:
        names = ", ".join(f"{m} (probe {p.value})" for p, m in missing)
        raise ConfigError(
            f"no figure for {names}, which the spec measures: add the figure with its source, or take the probe "
            "out of certify.probes",
            path=path,
            key="metrics",
        )
