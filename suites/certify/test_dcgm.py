"""Every test of the DCGM diagnostic level the spec asks for, per GPU."""

import pytest

from gpucert import Evaluation, GpuSlot, expect


@pytest.mark.check("dcgm.{dcgm_test}")
def test_dcgm(evaluation: Evaluation, gpu: GpuSlot, dcgm_test: str) -> None:
    expect(evaluation.dcgm(dcgm_test, gpu))
