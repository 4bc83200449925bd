"""gpucert: certify GPU Kubernetes clusters with a declarative pytest harness.

The names here are what suites, fixtures and other tooling may use; everything else is private.
"""

from __future__ import annotations

__version__ = "0.1.0"

from gpucert.checks import GEMM_DTYPES, CheckStatus, Finding  # noqa: E402
from gpucert.errors import ClusterAccessError, ConfigError, EvidenceError, GpucertError  # noqa: E402
from gpucert.evaluation import Evaluation, GpuSlot  # noqa: E402
from gpucert.plugin import CheckFailed, expect, run_context  # noqa: E402
from gpucert.spec import ClusterSpec, load_spec  # noqa: E402

__all__ = [
    "GEMM_DTYPES", "CheckFailed", "CheckStatus", "ClusterAccessError", "ClusterSpec", "ConfigError", "Evaluation",
    "EvidenceError", "Finding", "GpuSlot", "GpucertError", "__version__", "expect", "load_spec", "run_context",
]
