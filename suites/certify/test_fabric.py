"""A pool's fabric, where the pool declares one: every rail's port up at its rated speed, its error counters clean
under load, its NIC beside its GPUs, GPUDirect RDMA available, RDMA bandwidth per rail between pairs of nodes, and
NCCL across nodes over the RDMA fabric with GDR. A slow link is isolated to a port, a rack link, a node's rail or
the link between two nodes: one fault, one finding."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("fabric.port")
def test_rail_port(node: str, rail: str, decision: Finding) -> None:
    """The rail's HCA port is ACTIVE and LinkUp, of the declared link layer, at the rated speed and MTU."""
    expect(decision)


@pytest.mark.check("fabric.counters")
def test_rail_counters(node: str, rail: str, decision: Finding) -> None:
    """The rail port's error counters grew within their limits while the fabric was loaded."""
    expect(decision)


@pytest.mark.check("fabric.affinity")
def test_rail_affinity(node: str, rail: str, decision: Finding) -> None:
    """The rail's NIC sits under the same PCIe switch as the GPUs it serves (PIX or PXB), not across the CPU."""
    expect(decision)


@pytest.mark.check("fabric.rdma_bw")
def test_rail_rdma_bandwidth(node: str, rail: str, decision: Finding) -> None:
    """RDMA writes from GPU memory on this rail reach the expected bandwidth with every peer; a slow pair is
    reported once, by the port, rack link, node rail or node-to-node link that explains it."""
    expect(decision)


@pytest.mark.check("fabric.rdma_bw")
def test_rack_link(racks: str, decision: Finding) -> None:
    """Pairs across two racks are not slow as a group: the link between the racks carries its load."""
    expect(decision)


@pytest.mark.check("fabric.gdr")
def test_gpudirect_rdma(node: str, decision: Finding) -> None:
    """GPUDirect RDMA is available: nvidia-peermem loaded, or DMA-BUF on every GPU and rail NIC."""
    expect(decision)


@pytest.mark.check("fabric.nccl_transport")
def test_nccl_transport(pool: str, decision: Finding) -> None:
    """NCCL's all-reduce across the pool's nodes ran over NET/IB with GDRDMA on every channel, never NET/Socket."""
    expect(decision)


@pytest.mark.check("fabric.firmware")
def test_hca_firmware(node: str, decision: Finding) -> None:
    """Every rail HCA runs the firmware the stack pins (`hca-firmware`), or, with no pin, the pool's majority."""
    expect(decision)
