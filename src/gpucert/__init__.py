"""gpucert: certify GPU Kubernetes clusters with a declarative pytest harness.

The names here are what suites, fixtures and other tooling may use; everything else is private. They load on
first use (PEP 562), so `import gpucert.probes.runner` in a probe pod pulls in neither pytest nor the reports nor
the Kubernetes client: the package root is light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpucert._version import __version__

if TYPE_CHECKING:
    from gpucert.checks import GEMM_DTYPES, GPU_METRICS, CheckKey, CheckStatus, Finding
    from gpucert.errors import ClusterAccessError, ConfigError, EvidenceError, GpucertError
    from gpucert.evaluation import Evaluation, GpuSlot
    from gpucert.plugin import CheckFailed, check_key, expect, run_context
    from gpucert.spec import ClusterSpec, load_spec

__all__ = [
    "GEMM_DTYPES",
    "GPU_METRICS",
    "CheckFailed",
    "CheckKey",
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
    "check_key",
    "expect",
    "load_spec",
    "run_context",
]

_WHERE = {
    "GEMM_DTYPES": "gpucert.checks",
    "GPU_METRICS": "gpucert.checks",
    "CheckKey": "gpucert.checks",
    "CheckStatus": "gpucert.checks",
    "Finding": "gpucert.checks",
    "ClusterAccessError": "gpucert.errors",
    "ConfigError": "gpucert.errors",
    "EvidenceError": "gpucert.errors",
    "GpucertError": "gpucert.errors",
    "Evaluation": "gpucert.evaluation",
    "GpuSlot": "gpucert.evaluation",
    "CheckFailed": "gpucert.plugin",
    "check_key": "gpucert.plugin",
    "expect": "gpucert.plugin",
    "run_context": "gpucert.plugin",
    "ClusterSpec": "gpucert.spec",
    "load_spec": "gpucert.spec",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'gpucert' has no attribute {name!r}")
