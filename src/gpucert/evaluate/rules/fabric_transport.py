"""`fabric.nccl_transport`: the all-reduce across a pool's nodes went over the RDMA fabric with GPUDirect RDMA, as
NCCL's own debug output says. Pure. A channel over NET/Socket, or over NET/IB without GDRDMA, fails the check even
when the bus bandwidth clears its bar: the next larger job, or the next busier hour, will not.

Ranks are numbered node by node, in the collective's node order (`FabricEvidence.nodes`): rank r runs on node
r // gpus_per_node, as the multi-node launch places them.
"""

from __future__ import annotations

from collections.abc import Collection

from gpucert.measure.evidence_fabric import NcclTransport
from gpucert.plan.checks import CheckStatus, Finding

__all__ = ["TRANSPORT", "judge_transport"]

TRANSPORT = "fabric.nccl_transport"
PASS, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP


def _node_of(rank: int, nodes: list[str], gpus_per_node: int) -> str:
    i = rank // max(gpus_per_node, 1)
    return nodes[i] if 0 <= i < len(nodes) else f"rank {rank}"


def judge_transport(
    pool: str, transport: NcclTransport | None, nodes: list[str], gpus_per_node: int, gdr_off: Collection[str] = ()
) -> Finding:
    """The channels of one collective across `nodes`. `gdr_off`: the nodes whose `fabric.gdr` failed: their
    channels without GDRDMA follow from that finding (the first of them is named as the cause)."""
    where = f"pool {pool}: the all-reduce across {len(nodes)} nodes"
    if transport is None or transport.lines == 0:
        return Finding(TRANSPORT, ERROR, None, None, f"{where} left no NCCL_DEBUG=INFO output to read")
    net = [c for c in transport.channels if c.transport.startswith("NET/")]
    if not net:
        return Finding(TRANSPORT, ERROR, None, None, f"{where}: NCCL's output names no channel over the network")
    socket = sorted({_node_of(c.local_rank, nodes, gpus_per_node) for c in net if c.transport.startswith("NET/Socket")})
    if socket or transport.network == "Socket":
        said = ", ".join(socket) or "every node"
        message = f"{where} fell back to TCP sockets (NET/Socket) on {said}: the RDMA fabric carried none of it"
        return Finding(TRANSPORT, FAIL, None, None, message, observed="NET/Socket", expected="NET/IB")
    no_gdr = sorted({_node_of(c.local_rank, nodes, gpus_per_node) for c in net if not c.gdr})
    unexplained = [n for n in no_gdr if n not in gdr_off]
    if unexplained:
        message = f"{where} ran without GPUDirect RDMA (no GDRDMA on its NET/IB channels) on {', '.join(unexplained)}"
        return Finding(TRANSPORT, FAIL, None, None, message, observed="NET/IB", expected="NET/IB/GDRDMA")
    if no_gdr:
        message = f"{where} ran without GPUDirect RDMA on {', '.join(no_gdr)}, whose GDR is off (see fabric.gdr)"
        return Finding(TRANSPORT, SKIP, None, None, message, cause=f"fabric.gdr@{no_gdr[0]}")
    devices = sorted({f"{d.hca}:{d.port}" for d in transport.devices})
    message = (
        f"{where}: {len(net)} network channels over NET/IB with GDRDMA ({', '.join(devices) or 'devices unnamed'})"
    )
    return Finding(TRANSPORT, PASS, None, None, message)
