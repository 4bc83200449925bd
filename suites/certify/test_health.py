"""NVML health of every GPU: ECC, remapped rows, PCIe link, clock-event reasons, XID, temperature."""

import pytest

from gpucert import Evaluation, GpuSlot, expect


@pytest.mark.check("health.ecc")
def test_ecc(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.health("health.ecc", gpu))


@pytest.mark.check("health.remapped_rows")
def test_remapped_rows(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.health("health.remapped_rows", gpu))


@pytest.mark.check("health.pcie_link")
def test_pcie_link(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.health("health.pcie_link", gpu))


@pytest.mark.check("health.throttle")
def test_throttle(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.health("health.throttle", gpu))


@pytest.mark.check("health.xid")
def test_xid(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.health("health.xid", gpu))


@pytest.mark.check("health.temperature")
def test_temperature(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.health("health.temperature", gpu))
