"""gpucert: certify GPU Kubernetes clusters with a declarative pytest harness.

The names here are what suites, fixtures and other tooling may use; everything else is private. They load on
first use (PEP 562), so `import gpucert.measure.probes.runner` in a probe pod pulls in neither pytest nor the
reports nor the Kubernetes client: the package root is light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpucert._version import __version__

if TYPE_CHECKING:
    from gpucert.errors import ClusterAccessError, ConfigError, EvidenceError, GpucertError
    from gpucert.evaluate.evaluation import Evaluation, GpuSlot
    from gpucert.plan.checks import GEMM_DTYPES, GPU_METRICS, CheckKey, CheckStatus, Finding
    from gpucert.pytest.collection import NodeGpus, check_key, check_keys, decision_of
    from gpucert.pytest.context import run_context
    from gpucert.pytest.gpus import GpuChecks
    from gpucert.pytest.outcomes import CheckFailed, expect
    from gpucert.spec.cluster import ClusterSpec, load_spec

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
    "GpuChecks",
    "GpuSlot",
    "GpucertError",
    "NodeGpus",
    "__version__",
    "check_key",
    "check_keys",
    "decision_of",
    "expect",
    "load_spec",
    "run_context",
]

_WHERE = {
    "GEMM_DTYPES": "gpucert.plan.checks",
    "GPU_METRICS": "gpucert.plan.checks",
    "CheckKey": "gpucert.plan.checks",
    "CheckStatus": "gpucert.plan.checks",
    "Finding": "gpucert.plan.checks",
    "ClusterAccessError": "gpucert.errors",
    "ConfigError": "gpucert.errors",
    "EvidenceError": "gpucert.errors",
    "GpucertError": "gpucert.errors",
    "Evaluation": "gpucert.evaluate.evaluation",
    "GpuSlot": "gpucert.evaluate.evaluation",
    "CheckFailed": "gpucert.pytest.outcomes",
    "check_key": "gpucert.pytest.collection",
    "check_keys": "gpucert.pytest.collection",
    "decision_of": "gpucert.pytest.collection",
    "NodeGpus": "gpucert.pytest.collection",
    "GpuChecks": "gpucert.pytest.gpus",
    "expect": "gpucert.pytest.outcomes",
    "run_context": "gpucert.pytest.context",
    "ClusterSpec": "gpucert.spec.cluster",
    "load_spec": "gpucert.spec.cluster",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'gpucert' has no attribute {name!r}")
