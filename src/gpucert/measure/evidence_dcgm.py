"""The DCGM part of the evidence contract (`NodeEvidence.dcgm`): `dcgmi diag -j`'s results as DCGM reports them, per
test and per GPU, with its DCGM_FR_* errors. Raw readings only; imported and named by evidence.py."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpucert.measure.evidence_base import GpuKey
from gpucert.measure.evidence_base import Model as _Model

__all__ = ["DcgmError", "DcgmEvidence", "DcgmGpuResult", "DcgmTestResult"]


class DcgmError(_Model):
    """One DCGM_FR_* error as `dcgmi diag -j` reports it: id, category and severity with DCGM's names."""

    id: int
    name: str  # DCGM_FR_PERSISTENCE_MODE
    category: int | None = None
    category_name: str | None = None  # SOFTWARE_OTHER
    severity: int | None = None
    severity_name: str | None = None  # CONFIG
    message: str = ""

    def describe(self) -> str:
        """The message with the id, category and severity a vendor looks up in DCGM's error table."""
        tags = [f"{self.name} (id {self.id})"]
        if self.category is not None:
            tags.append(f"category {self.category_name or '?'} ({self.category})")
        if self.severity is not None:
            tags.append(f"severity {self.severity_name or '?'} ({self.severity})")
        return f"{self.message} [{', '.join(tags)}]"


class DcgmGpuResult(_Model):
    status: str  # Pass | Fail | Skip, as DCGM writes it
    warnings: list[str] = Field(default_factory=list)
    serial: str | None = None
    errors: list[DcgmError] = Field(default_factory=list)  # the warnings that carried a DCGM_FR_* id
    dcgm_id: int | None = None  # DCGM's own GPU id for the entry; the key it is filed under is the board's index

    def describe(self) -> str:
        """Every warning, those with an error id in DCGM's terms."""
        coded = {e.message for e in self.errors}
        texts = [e.describe() for e in self.errors] + [w for w in self.warnings if w not in coded]
        return "; ".join(texts) or "no warning text"


class DcgmTestResult(_Model):
    summary: str | None = None  # test_summary.status (4.x); None in 3.x
    # by the board's index (gpus[].index); JSON keys are strings
    gpus: dict[GpuKey, DcgmGpuResult] = Field(default_factory=dict)
    info: list[str] = Field(default_factory=list)
    # by DCGM's GPU id: entries nothing in dcgmi's output ties to a board (no serial); charged to no GPU
    untied: dict[GpuKey, DcgmGpuResult] = Field(default_factory=dict)

    def entries(self) -> list[DcgmGpuResult]:
        """Every GPU result of the test, charged to a board or not."""
        return [*self.gpus.values(), *self.untied.values()]


class DcgmEvidence(_Model):
    level: int
    version: str | None = None
    exit_code: int | None = None
    results: dict[str, DcgmTestResult] = Field(default_factory=dict)
    runtime_error: str | None = None
    raw: dict[str, Any] | None = None
    plugins: str | None = None  # the DCGM plugin set the node's driver made the diagnostic load: cuda12, cuda13
