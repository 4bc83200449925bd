"""`fabric.nccl_transport`: NCCL's collectives across a pool's nodes went over the RDMA fabric with GPUDirect RDMA,
as NCCL's own debug output says. Pure. A channel over NET/Socket, or over NET/IB without GDRDMA, fails the check
even when the bus bandwidth clears its bar: the next larger job, or the next busier hour, will not.

Every collective that ran across the pool's nodes is read: the all-reduce across all of them (certify.multinode)
and each pair's of the fabric stage. Ranks are numbered node by node, in the collective's node order: rank r runs
on node r // gpus_per_node. A line is the logging rank's (NcclChannel.local_rank: NCCL 2.30 net.cc prints a
receive line from the receiver). A node that fell back to sockets takes its peers' collectives with it, so the
node named is the one with no collective over the RDMA fabric at all.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpucert.measure.evidence_fabric import NcclTransport
from gpucert.plan.checks import CheckStatus, Finding

__all__ = ["TRANSPORT", "Collective", "Seen", "judge_transport"]

TRANSPORT = "fabric.nccl_transport"
PASS, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP


SOCKET, FABRIC, NO_GDR = 1, 2, 4  # what a node's channels in one collective were: sockets, the fabric, no GDRDMA


@dataclass(frozen=True, slots=True)
class Seen:
    """What NCCL's output of one collective says, by node (the logging rank's: NcclChannel.local_rank): each node's
    marks (SOCKET | FABRIC | NO_GDR), its network channels, the NET devices named. What judge_transport reads of a
    collective, kept for every pair of a fleet (plan: a few hundred bytes a pair, not its channel lines)."""

    nodes: tuple[str, ...]
    marks: tuple[tuple[str, int], ...]
    channels: int
    devices: frozenset[str]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective across nodes and what NCCL said about its transport (None: nothing was read)."""

    nodes: list[str]
    gpus_per_node: int
    transport: NcclTransport | None

    def seen(self) -> Seen | None:
        """What its output says (None: no NCCL_DEBUG=INFO output was read)."""
        t = self.transport
        if t is None or t.lines <= 0:
            return None
        marks: dict[str, int] = {}
        channels = 0
        for ch in (ch for ch in t.channels if ch.transport.startswith("NET/")):
            channels += 1
            node = _node_of(ch.local_rank, self.nodes, self.gpus_per_node)
            if ch.transport.startswith("NET/Socket") or t.network == "Socket":
                marks[node] = marks.get(node, 0) | SOCKET
                continue
            marks[node] = marks.get(node, 0) | FABRIC | (0 if ch.gdr else NO_GDR)
        devices = frozenset(f"{d.hca}:{d.port}" for d in t.devices)
        return Seen(tuple(self.nodes), tuple(marks.items()), channels, devices)


def _node_of(rank: int, nodes: list[str], gpus_per_node: int) -> str:
    i = rank // max(gpus_per_node, 1)
    return nodes[i] if 0 <= i < len(nodes) else f"rank {rank}"


@dataclass
class _Seen:
    socket: set[str]
    fabric: set[str]  # a NET/IB (or RoCE) channel of its own
    no_gdr: set[str]
    channels: int = 0


def _read(collectives: Sequence[Seen]) -> _Seen:
    seen = _Seen(set(), set(), set())
    for c in collectives:
        seen.channels += c.channels
        for node, mark in c.marks:
            for bit, into in ((SOCKET, seen.socket), (FABRIC, seen.fabric), (NO_GDR, seen.no_gdr)):
                if mark & bit:
                    into.add(node)
    return seen


def judge_transport(
    pool: str, collectives: Sequence[Collective | Seen], members: Sequence[str], gdr_off: Collection[str] = ()
) -> Finding:
    """The channels of every collective across the pool's nodes (`members`), or what each said (`Seen`, None where
    nothing was read). `gdr_off`: the nodes whose `fabric.gdr` failed: their channels without GDRDMA follow from
    that finding (the first is named as the cause)."""
    read = [s for c in collectives if (s := c.seen() if isinstance(c, Collective) else c) is not None]
    unread = sorted(set(members) - {n for c in read for n in c.nodes}, key=list(members).index)
    if not read or unread:
        more = f" and {len(unread) - 5} more" if len(unread) > 5 else ""
        named = ", ".join(unread[:5]) + more
        who = (f"node {named}" if len(unread) == 1 else f"{len(unread)} nodes ({named})") if read else "its nodes"
        message = f"pool {pool}: no NCCL_DEBUG=INFO output of a collective across nodes was read for {who}"
        return Finding(TRANSPORT, ERROR, None, None, message)
    seen = _read(read)
    where = f"pool {pool}: NCCL across nodes ({len(read)} collectives)"
    if not seen.channels:
        return Finding(TRANSPORT, ERROR, None, None, f"{where}: its output names no channel over the network")
    if seen.socket:
        culprits = sorted(seen.socket - seen.fabric) or sorted(seen.socket)
        message = f"{where} fell back to TCP sockets (NET/Socket) on {', '.join(culprits)}: no RDMA on their channels"
        return Finding(TRANSPORT, FAIL, None, None, message, observed="NET/Socket", expected="NET/IB")
    unexplained = sorted(seen.no_gdr - set(gdr_off))
    if unexplained:
        message = f"{where} ran without GPUDirect RDMA (no GDRDMA on NET/IB channels) on {', '.join(unexplained)}"
        return Finding(TRANSPORT, FAIL, None, None, message, observed="NET/IB", expected="NET/IB/GDRDMA")
    if seen.no_gdr:
        no_gdr = sorted(seen.no_gdr)
        message = f"{where} ran without GPUDirect RDMA on {', '.join(no_gdr)}, whose GDR is off (see fabric.gdr)"
        return Finding(TRANSPORT, SKIP, None, None, message, cause=f"fabric.gdr@{no_gdr[0]}")
    devices = sorted({d for c in read for d in c.devices})
    said = ", ".join(devices) or "devices unnamed"
    message = f"{where}: {seen.channels} network channels over NET/IB with GDRDMA ({said})"
    return Finding(TRANSPORT, PASS, None, None, message)
