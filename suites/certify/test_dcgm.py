"""Every test of the DCGM diagnostic level the spec asks for, per GPU."""

import pytest

from gpucert import GpuChecks, NodeGpus, expect


@pytest.mark.check("dcgm.{dcgm_test}")
def test_dcgm(gpus: NodeGpus, dcgm_test: str, decision: GpuChecks) -> None:
    """DCGM ran the test at the spec's level and it passed on this GPU (a warning, printed as Fail, fails it)."""
    expect(decision)
