"""gpucert: certify GPU Kubernetes clusters with a declarative pytest harness.

The names here are what suites, fixtures and other tooling may use; everything else is private.
"""

from __future__ import annotations

__version__ = "0.1.0"

from gpucert.checks import GEMM_DTYPES, CheckStatus, Finding
from gpucert.errors import ClusterAccessError, ConfigError, EvidenceError, GpucertError
from gpucert.evaluation import Evaluation, GpuSlot
from gpucert.plugin import CheckFailed, expect, run_context
from gpucert.spec import ClusterSpec, load_spec

__all__ = [
    "GEMM_DTYPES",
    "CheckFailed",
    "CheckStatus",
    "ClusterAccessError",
    "ClusterSpec",
    "ConfigError",
    "Evaluation",
    "EvidenceError",
    "Finding",
    "GpuSlot",
    "GpucertError",
    "__version__",
    "expect",
    "load_spec",
    "run_context",
]
