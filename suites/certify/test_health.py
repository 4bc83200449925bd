"""NVML health of every GPU: ECC, remapped rows, PCIe link, clock-event reasons, XID, temperature, NVLink."""

import pytest

from gpucert import GpuChecks, NodeGpus, expect


@pytest.mark.check("health.ecc")
def test_ecc(gpus: NodeGpus, decision: GpuChecks) -> None:
    """No uncorrected ECC error; corrected (volatile) errors within the baseline's limit; ECC reported at all."""
    expect(decision)


@pytest.mark.check("health.remapped_rows")
def test_remapped_rows(gpus: NodeGpus, decision: GpuChecks) -> None:
    """No failed row remapping (the bank has spare rows left) and none pending a reset."""
    expect(decision)


@pytest.mark.check("health.pcie_link")
def test_pcie_link(gpus: NodeGpus, decision: GpuChecks) -> None:
    """The PCIe link, read under load, runs at the baseline's generation and width."""
    expect(decision)


@pytest.mark.check("health.throttle")
def test_throttle(gpus: NodeGpus, decision: GpuChecks) -> None:
    """Each clock-event reason holds the clocks down for no more of the loaded time than the baseline allows
    (none for HW slowdown, HW thermal and power brake by default)."""
    expect(decision)


@pytest.mark.check("health.xid")
def test_xid(gpus: NodeGpus, decision: GpuChecks) -> None:
    """No XID event that points at the GPU or its links (application XIDs excepted)."""
    expect(decision)


@pytest.mark.check("health.temperature")
def test_temperature(gpus: NodeGpus, decision: GpuChecks) -> None:
    """The temperature stays the baseline's margin below the GPU's slowdown threshold."""
    expect(decision)


@pytest.mark.check("health.nvlink")
def test_nvlink(gpus: NodeGpus, decision: GpuChecks) -> None:
    """Every NVLink link the SKU has is active, and the links counted no more errors under load than allowed."""
    expect(decision)
