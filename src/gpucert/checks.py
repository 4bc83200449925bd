"""The check-id vocabulary and the Finding every check produces. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DCGM_TESTS_BY_LEVEL",
    "FABRIC_METRICS",
    "GEMM_DTYPES",
    "NODE_METRICS",
    "CheckStatus",
    "Finding",
    "check_category",
]

GEMM_DTYPES = ("fp16", "bf16", "tf32", "fp32", "fp64")
NODE_METRICS = ("nccl.all_reduce",)  # one figure per node; the other metrics are per GPU
FABRIC_METRICS = ("nccl.all_reduce.multinode",)  # one figure for a set of nodes together

# DCGM 4.x test names by the run level that first includes them (dcgmi diag -r LEVEL); the optional ones depend on
# the DCGM release (nvbandwidth 4.0+, nccl_tests 4.5+) or on an installed package (eud).
DCGM_TESTS_BY_LEVEL: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("pcie", "memory"),
    3: ("diagnostic", "memory_bandwidth", "targeted_stress", "targeted_power"),
    4: ("memtest", "pulse_test"),
}
DCGM_OPTIONAL_TESTS_BY_LEVEL: dict[int, tuple[str, ...]] = {3: ("nvbandwidth", "nccl_tests", "eud")}


class CheckStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Finding:
    """What one check decided about one node (and GPU, where the check is per GPU)."""

    check: str
    status: CheckStatus
    node: str | None = None
    gpu: int | None = None
    message: str = ""
    observed: float | str | None = None
    expected: float | str | None = None
    unit: str | None = None

    @property
    def where(self) -> str:
        if self.node is None:
            return "fleet"
        return self.node if self.gpu is None else f"{self.node}/gpu{self.gpu}"

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return {k: d[k] for k in ("check", "node", "gpu", "status", "observed", "expected", "unit", "message")}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        return cls(
            check=d["check"],
            status=CheckStatus(d["status"]),
            node=d.get("node"),
            gpu=d.get("gpu"),
            message=d.get("message", ""),
            observed=d.get("observed"),
            expected=d.get("expected"),
            unit=d.get("unit"),
        )


_CATEGORIES = (
    ("straggler.", "Stragglers"),
    ("stack.", "Stack"),
    ("inventory.", "Stack"),
    ("node.", "Infrastructure"),
    ("health.", "Health"),
    ("dcgm.", "DCGM"),
    ("handover.", "Handover"),
)


def check_category(check: str) -> str:
    """The report category a check id belongs to: Stack, Health, DCGM, Performance, Stragglers, Infrastructure."""
    for prefix, name in _CATEGORIES:
        if check.startswith(prefix):
            return name
    return "Performance"
