"""Per-SKU baselines (`baselines/gpus/<SKU>.yaml`, `kind: GpuBaseline`): what each GPU must measure, and why.

Every figure carries its source. Comparisons are a closed enum, never code.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from gpucert.documents import Document, Problem, load_document
from gpucert.fleet import FLEET_METRICS

__all__ = ["Comparison", "GpuBaseline", "HealthPolicy", "MetricBaseline", "load_baseline"]


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
        (("metrics", name), f"unknown metric; known metrics are {', '.join(FLEET_METRICS)}")
        for name in b.metrics
        if name not in FLEET_METRICS
    ]


def load_baseline(path: Path | str) -> GpuBaseline:
    return load_document(Path(path), GpuBaseline, check=_known_metrics)
