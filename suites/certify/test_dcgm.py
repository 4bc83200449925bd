"""Every test of the DCGM diagnostic level the spec asks for, per GPU."""

import pytest

from gpucert import Finding, GpuSlot, expect


@pytest.mark.check("dcgm.{dcgm_test}")
def test_dcgm(gpu: GpuSlot, dcgm_test: str, decision: Finding) -> None:
    """DCGM ran the test at the spec's level and it passed on this GPU (a warning, printed as Fail, fails it)."""
    expect(decision)
