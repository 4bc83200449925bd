"""Per-SKU baselines (`baselines/gpus/<SKU>.yaml`, `kind: GpuBaseline`): what each GPU must measure, and why.

Every figure carries its source. Comparisons are a closed enum, never code.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from gpucert.checks import METRICS
from gpucert.documents import Document, Problem, load_document
from gpucert.errors import ConfigError
from gpucert.spec import ClusterSpec, Pool, Probe

__all__ = [
    "PROBE_METRICS",
    "Comparison",
    "GpuBaseline",
    "HealthPolicy",
    "MetricBaseline",
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


class MetricBaseline(Document):
    expected: Annotated[float, Field(gt=0)]
    unit: str
    comparison: Comparison = Comparison.MIN
    tolerance: Annotated[float, Field(ge=0, lt=1)]
    source: Annotated[str, Field(min_length=10)]

    def threshold(self) -> float:
        if self.comparison is Comparison.MIN:
            return self.expected * (1 - self.tolerance)
        return self.expected * (1 + self.tolerance)


class PcieExpect(Document):
    generation: Annotated[int, Field(ge=1, le=6)]
    width: Literal[1, 2, 4, 8, 16]
    source: str


class HealthPolicy(Document):
    max_volatile_corrected_ecc: Annotated[int, Field(ge=0)] = Field(alias="maxVolatileCorrectedEcc")
    temperature_margin_c: Annotated[float, Field(ge=0)] = Field(alias="temperatureMarginC")
    # XIDs an application can cause on a healthy GPU (illegal address, MMU fault from user code, ...)
    application_xids: list[int] = Field(default_factory=list, alias="applicationXids")
    source: str


class GpuBaseline(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["GpuBaseline"]
    sku: str
    product: str
    memory_mib: Annotated[int, Field(gt=0)] = Field(alias="memoryMiB")
    pcie: PcieExpect
    health: HealthPolicy
    metrics: dict[str, MetricBaseline]


def _known_metrics(b: GpuBaseline) -> list[Problem]:
    return [
        (("metrics", name), f"unknown metric; known metrics are {', '.join(METRICS)}")
        for name in b.metrics
        if name not in METRICS
    ]


def load_baseline(path: Path | str) -> GpuBaseline:
    return load_document(Path(path), GpuBaseline, check=_known_metrics)


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
    if spec.certify.multinode is not None:
        needed.append((Probe.NCCL, "nccl.all_reduce.multinode"))
    missing = [(p, m) for p, m in needed if m not in baseline.metrics]
    if missing:
        names = ", ".join(f"{m} (probe {p.value})" for p, m in missing)
        raise ConfigError(
            f"no figure for {names}, which the spec measures: add the figure with its source, or take the probe "
            "out of certify.probes",
            path=path,
            key="metrics",
        )
