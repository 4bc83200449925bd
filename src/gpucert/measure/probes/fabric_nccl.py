"""NCCL_DEBUG=INFO output, read for the transport of every channel of a collective across nodes: NET/IB or
NET/Socket, and whether GPUDirect RDMA (/GDRDMA) was used. A socket fallback or GDR off clears a lax bandwidth
bar and still halves a real job, so the evaluator judges the transport, not only the number.

The formats are NCCL 2.30.7's (NVIDIA/nccl, makefiles/version.mk):
- every line is prefixed "%s:%d:%d [%d] NCCL INFO " (host:pid:tid [cudaDev], src/debug.cc);
- src/transport/net.cc: "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (channel/connIndex,
  rank[nvmlDev] -> rank[nvmlDev], the net plugin's name, the NET device, "/GDRDMA", "(PCI)", "/Shared"); with a
  proxy on another rank "NET/%s/%d(%d)..." (the proxy's rank); "[receive]" lines the same with the peer first;
- src/transport/p2p.cc: "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/..."; shm.cc: "Channel %02d : ... via
  SHM/direct" (no connection index);
- src/transport/net_ib/init.cc: "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...; OOB eth0:..." (a device may
  carry ":rail" or "::plane" after the port); the socket transport says "NET/Socket : Using [0]eth0:...";
- src/init.cc: "Using network IB" / "Using network Socket" names the plugin in use.
Pure: lines in, NcclTransport out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpucert.measure.evidence_fabric import NcclChannel, NcclNetDevice, NcclTransport

__all__ = ["merge_transports", "parse_nccl_transport", "read_nccl_logs"]

_PREFIX = re.compile(r"^(?:.*?\s)?NCCL INFO\s+")
_CHANNEL = re.compile(r"^Channel (\d+)(?:/(\d+))? : (\d+)\[(\d+)\] -> (\d+)\[(\d+)\](?: \[(send|receive)\])? via (\S+)")
_NET = re.compile(r"^(NET/[^/]+)/(\d+)(?:\((\d+)\))?(.*)$")
_USING = re.compile(r"^NET/(\S+) : Using((?: \[\d+\]\S+)+)")
_DEVICE = re.compile(r"\[(\d+)\]([^:\s]+):(\d+)\S*?/(\w+)")
_NETWORK = re.compile(r"^Using network (\S+)")


def _channel(m: re.Match[str]) -> NcclChannel:
    channel, conn, src, src_dev, dst, dst_dev, direction, via = m.groups()
    net = _NET.match(via)
    flags = net.group(4) if net else ""
    return NcclChannel(
        channel=int(channel),
        conn=int(conn) if conn is not None else None,
        src_rank=int(src),
        src_dev=int(src_dev),
        dst_rank=int(dst),
        dst_dev=int(dst_dev),
        direction="send" if direction == "send" else "receive" if direction == "receive" else None,
        # NET/IB, NET/Socket; P2P/CUMEM, SHM/direct: the first two parts of what follows "via"
        transport=net.group(1) if net else "/".join(via.split("/")[:2]),
        net_dev=int(net.group(2)) if net else None,
        proxy_rank=int(net.group(3)) if net and net.group(3) is not None else None,
        gdr="/GDRDMA" in flags,
        shared="/Shared" in flags,
    )


def parse_nccl_transport(lines: Iterable[str], node: str | None = None) -> NcclTransport:
    """The channels, NET devices and network of one NCCL_DEBUG=INFO log (`node`: whose log it is)."""
    channels: list[NcclChannel] = []
    devices: list[NcclNetDevice] = []
    network: str | None = None
    read = 0
    for raw in lines:
        read += 1
        prefix = _PREFIX.match(raw)
        if prefix is None:
            continue
        body = raw[prefix.end() :].rstrip()
        if m := _CHANNEL.match(body):
            channels.append(_channel(m))
        elif m := _USING.match(body):
            devices += [
                NcclNetDevice(node=node, index=int(i), hca=hca, port=int(port), link_layer=link)
                for i, hca, port, link in _DEVICE.findall(m.group(2))
            ]
        elif m := _NETWORK.match(body):
            network = m.group(1)
    return NcclTransport(network=network, devices=devices, channels=channels, lines=read)


def read_nccl_logs(folder: Path, node: str) -> NcclTransport:
    """Every NCCL debug file a process of this node wrote into `folder` (NCCL_DEBUG_FILE), parsed as one log."""
    lines: list[str] = []
    for path in sorted(folder.glob("nccl.*.log")):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return parse_nccl_transport(lines, node=node)


def merge_transports(parts: Sequence[NcclTransport]) -> NcclTransport:
    """The logs of every process of one collective as one account: their channels and devices together, the
    network the socket transport's if any process used it (it carried that process's share)."""
    networks = [p.network for p in parts if p.network is not None]
    return NcclTransport(
        network="Socket" if "Socket" in networks else networks[0] if networks else None,
        devices=[d for p in parts for d in p.devices],
        channels=[c for p in parts for c in p.channels],
        lines=sum(p.lines for p in parts),
    )
