"""The probe pod could run the probes at all: CuPy, a compiled kernel, cuBLAS, NCCL, NVML, dcgmi, a writable
home and kernel cache. A node whose preflight fails has this one finding, naming the cause and the fix; its
measured checks skip with it as their cause."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("probe.preflight")
def test_preflight(node: str, decision: Finding) -> None:
    """Every step of the in-pod preflight passed before any probe ran."""
    expect(decision)
