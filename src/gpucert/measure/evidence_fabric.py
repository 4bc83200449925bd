"""The fabric part of the evidence contract: what a node's fabric pod reads of its RDMA adapters, and what a pair
of nodes measures between them. Raw observations only, as the kernel, perftest and NCCL give them; deltas, rates
and verdicts are computed at evaluate time (the `deltas`/`seconds` helpers only subtract).

Per node (`NodeEvidence.fabric`, probes/fabric_sysfs.py):
- every port of every HCA under /sys/class/infiniband: state, physical state, rate, link layer, firmware, the
  PCI function and NUMA node, the network interface and its MTU, the active MTU, the RoCE GID table;
- every counter of `ports/<p>/counters` and `ports/<p>/hw_counters`, read before and after the loaded window;
- the PCIe relation of each GPU to each HCA in nvidia-smi topo's words (PIX, PXB, PHB, NODE, SYS), derived from
  the sysfs PCIe paths that are kept beside it;
- the facts GPUDirect RDMA rests on: the peer-memory module NCCL looks for, DMA-BUF on the GPU and the NIC.
Per pair (`FabricEvidence.rdma` and `.transport`, in evidence/multinode/):
- `ib_write_bw --use_cuda` per rail, each repetition's average bandwidth a sample (probes/fabric_perftest.py);
- NCCL's per-channel transport lines (NET/IB or NET/Socket, GDRDMA or not) and its NET device list
  (probes/fabric_nccl.py).
Everything here is optional in the documents that carry it: evidence written before it existed reads as before
(no fabric measured), so the evidence schema stays v1.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from gpucert.measure.evidence_base import GpuKey, Model, SampleArray, Samples

__all__ = [
    "RELATIONS",
    "CounterWindow",
    "GdrFacts",
    "GidEntry",
    "GpuNic",
    "HcaPort",
    "NcclChannel",
    "NcclNetDevice",
    "NcclTransport",
    "NodeFabric",
    "PciDevice",
    "RdmaBandwidth",
    "Relation",
    "merge_windows",
    "port_key",
    "rate_of",
]

# nvidia-smi topo -m's legend, nearest first: PIX at most one PCIe switch, PXB several switches (no host bridge),
# PHB through a PCIe host bridge (the CPU), NODE between host bridges of one NUMA node, SYS across NUMA nodes
Relation = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]
RELATIONS: tuple[Relation, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")


# the kernel's `rate` (Linux drivers/infiniband/core/sysfs.c, rate_show, v6.x): sysfs_emit(buf, "%d%s Gb/sec
# (%dX%s)\n", rate / 10, rate % 10 ? ".5" : "", width, speed) with `rate` in tenths of Gb/s: "400 Gb/sec (4X NDR)",
# "2.5 Gb/sec (1X SDR)"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def rate_of(rate: str | None) -> float | None:
    """The number at the head of the kernel's `rate` (Gb/s), None when it does not read as rate_show writes it."""
    head = _RATE.match(rate or "")
    return float(head.group(1)) if head else None


def port_key(hca: str, port: int) -> str:
    """How a port is named in counters and findings: `mlx5_0/1`."""
    return f"{hca}/{port}"


class GidEntry(Model):
    """One non-zero entry of a port's GID table (RoCE: which address and RoCE version traffic can use)."""

    index: int
    gid: str  # ports/<p>/gids/<index>, e.g. 0000:0000:0000:0000:0000:ffff:0a00:0001
    type: str | None = None  # ports/<p>/gid_attrs/types/<index>: "IB/RoCE v1" or "RoCE v2"
    netdev: str | None = None  # ports/<p>/gid_attrs/ndevs/<index>: the interface the GID belongs to


class HcaPort(Model):
    """One port of one RDMA adapter, as sysfs shows it (drivers/infiniband/core/sysfs.c). Strings are kept as the
    kernel writes them; `rate_gbps` is the number at the head of `rate`. A file that could not be read is None
    and named in `unreadable` with the error."""

    hca: str  # the RDMA device: mlx5_0
    port: int  # 1-based port number
    state: str | None = None  # ports/<p>/state: "4: ACTIVE" (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE)
    phys_state: str | None = None  # ports/<p>/phys_state: "5: LinkUp" (2 Polling, 3 Disabled, ...)
    rate: str | None = None  # ports/<p>/rate: "400 Gb/sec (4X NDR)"
    rate_gbps: float | None = None  # 400.0, read off `rate`
    link_layer: str | None = None  # ports/<p>/link_layer: InfiniBand | Ethernet
    fw_ver: str | None = None  # <hca>/fw_ver: 28.39.1002
    board_id: str | None = None  # <hca>/board_id: MT_0000000838
    pci_address: str | None = None  # the adapter's PCI function (<hca>/device): 0000:1b:00.0
    numa_node: int | None = None  # <hca>/device/numa_node (-1 is kept: the platform did not say)
    netdev: str | None = None  # the port's network interface (RoCE's Ethernet port; IPoIB on InfiniBand)
    netdev_mtu: int | None = None  # /sys/class/net/<netdev>/mtu: bounds RoCE's MTU
    active_mtu: int | None = None  # the port's active MTU in bytes (ibv_devinfo's active_mtu), None: not read
    max_mtu: int | None = None  # the largest MTU the port supports in bytes (ibv_devinfo's max_mtu), None: not read
    gids: list[GidEntry] = Field(default_factory=list)  # non-zero GID table entries (RoCE)
    gid_index: int | None = None  # the GID index the RDMA traffic was told to use (NCCL_IB_GID_INDEX), None: default
    unreadable: dict[str, str] = Field(default_factory=dict)  # sysfs file -> why it could not be read

    @property
    def key(self) -> str:
        return port_key(self.hca, self.port)

    @field_validator("rate_gbps")
    @classmethod
    def _read_off_rate(cls, gbps: float | None, info: ValidationInfo) -> float | None:
        """`rate_gbps` is the number `rate` begins with, finite: a NaN, or 400 beside "200 Gb/sec (4X HDR)", is no
        reading of one port (fabric.port would judge the number and print the text)."""
        if gbps is None:
            return gbps
        if not math.isfinite(gbps):
            raise ValueError(f"{gbps} is no rate: write the finite number at the head of `rate`")
        rate = info.data.get("rate")
        if rate_of(rate) != gbps:
            raise ValueError(
                f"{gbps:g} is not the number at the head of rate {rate!r}: write the number rate begins with "
                "(400 for '400 Gb/sec (4X NDR)'), or null where rate does not read"
            )
        return gbps


class CounterWindow(Model):
    """Every counter of every port read before and after the window that loaded the fabric (the pairs' RDMA and
    the all-reduce across nodes), with the host clock's times of the two readings. Keys are `hca/port`, then the
    file name under ports/<p>/counters (`before`/`after`) or ports/<p>/hw_counters (`hw_before`/`hw_after`).

    The values are the kernel's: `port_xmit_data`/`port_rcv_data` count 4-octet words (IBTA), and a counter the
    adapter keeps in 16 or 32 bits (symbol_error, link_downed: the PMA's PortCounters) saturates at its maximum
    instead of wrapping, so an `after` at 65535 or 4294967295 hides how many more there were."""

    load: str  # what loaded the fabric in the window: rdma_bw, nccl.all_reduce.multinode
    started: str  # ISO 8601 with zone: the `before` reading
    finished: str  # the `after` reading
    before: dict[str, dict[str, int]] = Field(default_factory=dict)
    after: dict[str, dict[str, int]] = Field(default_factory=dict)
    hw_before: dict[str, dict[str, int]] = Field(default_factory=dict)
    hw_after: dict[str, dict[str, int]] = Field(default_factory=dict)
    unreadable: dict[str, str] = Field(default_factory=dict)  # "hca/port/counter" -> why

    def seconds(self) -> float | None:
        """The window's length on the host clock, or None when its times are not two ISO times in order."""
        try:
            length = (datetime.fromisoformat(self.finished) - datetime.fromisoformat(self.started)).total_seconds()
        except (TypeError, ValueError):  # TypeError: one time with a zone and one without
            return None
        return length if length >= 0 else None

    def deltas(self, port: str, *, hw: bool = False) -> dict[str, int]:
        """Each counter of `port` read at both ends of the window: after minus before (a negative delta is kept:
        the counter was reset in the window, which the evaluator must not read as zero errors)."""
        first, last = (self.hw_before, self.hw_after) if hw else (self.before, self.after)
        a, b = first.get(port, {}), last.get(port, {})
        return {name: b[name] - a[name] for name in a if name in b}


class PciDevice(Model):
    """Where a PCI function sits: its sysfs path from the root complex down, bridges first, itself last
    (/sys/bus/pci/devices/<bdf> resolved: ["pci0000:17", "0000:17:01.0", "0000:18:00.0", "0000:19:00.0", ...])."""

    path: list[str]
    numa_node: int | None = None


class GpuNic(Model):
    """The PCIe relation of one GPU to one HCA, as nvidia-smi topo -m names it (derived from `NodeFabric.pci`)."""

    gpu: int  # the GPU's index (GpuEvidence.index)
    pci_bus_id: str  # the GPU's PCI function
    hca: str
    relation: Relation | None  # None: a path could not be read (named in NodeFabric.unreadable)


class GdrFacts(Model):
    """What GPUDirect RDMA needs on this node, read the way NCCL 2.30 decides (src/transport/net_ib/gdr.cc): a
    peer-memory module (one of its three sysfs files exists), or DMA-BUF on both the GPU (CUDA's
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) and the NIC (ibv_reg_dmabuf_mr with fd -1 fails with EBADF, not with
    EOPNOTSUPP or EPROTONOSUPPORT). None: not asked (no GPU library, no verbs library)."""

    peermem: list[str] = Field(default_factory=list)  # which of NCCL's peer-memory files exist
    peermem_version: str | None = None  # /sys/module/nvidia_peermem/version
    dmabuf_gpu: dict[GpuKey, bool] = Field(default_factory=dict)  # GPU index -> DMA_BUF_SUPPORTED
    dmabuf_nic: dict[str, bool] = Field(default_factory=dict)  # HCA -> ibv_reg_dmabuf_mr supported
    kernel: str | None = None  # uname -r (DMA-BUF for RDMA needs Linux 5.12)
    # why DMA-BUF was not asked of some of them: "gpus" / "nics" -> the reason (a missing answer is never a "no")
    unasked: dict[str, str] = Field(default_factory=dict)


class NodeFabric(Model):
    """A node's fabric, as its fabric pod read it (`NodeEvidence.fabric`; None when no fabric was measured)."""

    ports: list[HcaPort] = Field(default_factory=list)
    counters: CounterWindow | None = None  # None: no loaded window ran on this node
    pci: dict[str, PciDevice] = Field(default_factory=dict)  # PCI function (GPUs' and HCAs') -> where it sits
    affinity: list[GpuNic] = Field(default_factory=list)  # every GPU x every HCA
    gdr: GdrFacts | None = None
    tools: dict[str, str] = Field(default_factory=dict)  # RDMA tool -> version found (ib_write_bw, ibv_devinfo)
    unreadable: dict[str, str] = Field(default_factory=dict)  # what could not be read beside the ports -> why

    def port(self, hca: str, port: int = 1) -> HcaPort | None:
        return next((p for p in self.ports if p.hca == hca and p.port == port), None)


class RdmaBandwidth(Model):
    """RDMA write bandwidth on one rail between two nodes, from GPU memory: perftest's `ib_write_bw --use_cuda`
    (the server on `server`, the client on `client`), each repetition's `BW average` one sample."""

    rail: int  # the rail's index (0-based, the spec's order of HCAs), the same rail on both nodes
    client: str
    server: str
    client_hca: str  # port_key: mlx5_0/1
    server_hca: str
    gpu: int | None = None  # the --use_cuda device on both ends; None: host memory
    unit: str = "Gb/s"
    samples: Samples = Field(default_factory=SampleArray)  # BW average of each repetition
    peak: Samples = Field(default_factory=SampleArray)  # BW peak of each repetition
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)  # size, qps, duration, perftest version
    error: str | None = None  # the pair did not run on this rail (the other rails stand)


class NcclChannel(Model):
    """One `Channel cc/n : r[d] -> r[d] ... via T` line of NCCL_DEBUG=INFO (NCCL 2.30: src/transport/net.cc,
    p2p.cc, shm.cc). `transport` is the part after `via` up to its device: NET/IB, NET/Socket, P2P/IPC, SHM/direct."""

    channel: int
    conn: int | None = None  # the connection index after the slash (None for SHM lines, which have none)
    src_rank: int
    src_dev: int
    dst_rank: int
    dst_dev: int
    direction: Literal["send", "receive"] | None = None  # NET lines only
    transport: str
    net_dev: int | None = None  # NET: the device index of NcclNetDevice
    proxy_rank: int | None = None  # NET: the rank whose proxy runs the transfer, when not the sender's
    gdr: bool = False  # NET: "/GDRDMA" (GPUDirect RDMA in use on this channel)
    shared: bool = False  # NET: "/Shared"

    @property
    def local_rank(self) -> int:
        """The rank whose process logged the line and whose side `gdr` describes: the sender of a send line, the
        receiver of a receive line (net.cc prints the peer first in both: "%d[%d] -> %d[%d] [receive]" is
        peerInfo->rank then myInfo->rank)."""
        return self.dst_rank if self.direction == "receive" else self.src_rank


class NcclNetDevice(Model):
    """One device of NCCL's `NET/IB : Using [0]mlx5_0:1/IB ...` line (src/transport/net_ib/init.cc)."""

    node: str | None = None  # the node whose log it came from (None: one log for every node)
    index: int
    hca: str
    port: int
    link_layer: str  # IB | RoCE


class NcclTransport(Model):
    """What NCCL's debug output says about the transport of one collective across nodes."""

    network: str | None = None  # the NET plugin in use: IB, Socket (NCCL's "Using network X")
    devices: list[NcclNetDevice] = Field(default_factory=list)
    channels: list[NcclChannel] = Field(default_factory=list)
    lines: int = 0  # how many lines of the log were read (0: no NCCL_DEBUG output reached the probe)


def merge_windows(windows: list[CounterWindow]) -> CounterWindow | None:
    """One window over several readings of a node's counters (the pairs it was in, one after another): the
    earliest `before` and the latest `after` of each port, so every increment in between is counted once.
    Times compare as ISO 8601 instants; a window whose times do not read is left out."""
    timed = [
        (w, datetime.fromisoformat(w.started), datetime.fromisoformat(w.finished))
        for w in windows
        if w.seconds() is not None
    ]
    if not timed:
        return None
    first = min(timed, key=lambda t: t[1])[0]
    last = max(timed, key=lambda t: t[2])[0]
    unreadable = {k: v for w, _, _ in timed for k, v in w.unreadable.items()}
    return CounterWindow(
        load=", ".join(dict.fromkeys(w.load for w, _, _ in timed)),
        started=first.started,
        finished=last.finished,
        before=first.before,
        after=last.after,
        hw_before=first.hw_before,
        hw_after=last.hw_after,
        unreadable=unreadable,
    )
