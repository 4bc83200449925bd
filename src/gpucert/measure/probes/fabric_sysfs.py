"""The fabric as sysfs shows it: RDMA ports, their counters, where GPUs and HCAs sit on PCIe, and the peer-memory
module GPUDirect RDMA needs. Every function is a pure function of a sysfs root (`/sys` on a node, a folder in
tests), so the probe reads the node it runs on and the tests a tree they built; nothing here needs a driver.

The files and their formats are the kernel's (drivers/infiniband/core/sysfs.c): `state` "4: ACTIVE",
`phys_state` "5: LinkUp", `rate` "400 Gb/sec (4X NDR)" ("%d%s Gb/sec (%dX%s)"), `link_layer` InfiniBand or
Ethernet, and a counter the adapter cannot report reads "N/A (no PMA)". The PCIe relation of a GPU and an HCA is
derived from where /sys/bus/pci/devices/<bdf> resolves under /sys/devices (see `relation`). Port sysfs has no
MTU: the RDMA MTU is ibv_devinfo's (fabric_devinfo), merged in by the caller's `mtus`. Imports nothing of the
harness but the evidence models.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpucert.measure.evidence_fabric import (
    CounterWindow,
    GdrFacts,
    GidEntry,
    GpuNic,
    HcaPort,
    NodeFabric,
    PciDevice,
    Relation,
    port_key,
    rate_of,
)
from gpucert.measure.probes.fabric_devinfo import DevinfoPorts

__all__ = [
    "PEERMEM_FILES",
    "CounterSnapshot",
    "bus_id",
    "counter_window",
    "pci_device",
    "read_affinity",
    "read_counters",
    "read_gdr",
    "read_node_fabric",
    "read_ports",
    "relation",
]

# NCCL 2.30 src/transport/net_ib/gdr.cc (ibGdrSupportInitOnce): GDR is on when any of these exists
PEERMEM_FILES = (
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
)
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _read(path: Path, unreadable: dict[str, str], name: str) -> str | None:
    """The file's text without its newline, or None with the reason kept under `name`."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as exc:
        unreadable[name] = exc.strerror or type(exc).__name__
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def bus_id(pci_bus_id: str) -> str:
    """A PCI address as sysfs names it: NVML's `00000000:19:00.0` is `0000:19:00.0`, `19:00.0` is in domain 0."""
    parts = pci_bus_id.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    return f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2]}" if len(parts) == 3 else ":".join(parts)


def _hcas(root: Path) -> list[Path]:
    base = root / "class" / "infiniband"
    return sorted(base.iterdir(), key=lambda p: p.name) if base.is_dir() else []


def _netdev(hca: Path, port: int) -> str | None:
    """The network interface of `port`: the one under the adapter's PCI function whose dev_port is port - 1."""
    net = hca / "device" / "net"
    names = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    if len(names) <= 1:
        return names[0] if names else None
    for name in names:
        if _int(_read(net / name / "dev_port", {}, "")) == port - 1:
            return name
    return None


def _gids(port_dir: Path) -> list[GidEntry]:
    gids = port_dir / "gids"
    found = []
    for entry in sorted(gids.iterdir(), key=lambda p: int(p.name)) if gids.is_dir() else []:
        gid = _read(entry, {}, "")
        if not gid or gid == _ZERO_GID or not entry.name.isdigit():
            continue
        attrs = port_dir / "gid_attrs"
        found.append(
            GidEntry(
                index=int(entry.name),
                gid=gid,
                type=_read(attrs / "types" / entry.name, {}, "") or None,
                netdev=_read(attrs / "ndevs" / entry.name, {}, "") or None,
            )
        )
    return found


def _port(root: Path, hca: Path, port_dir: Path, mtus: DevinfoPorts | None) -> HcaPort:
    bad: dict[str, str] = {}
    port = int(port_dir.name)
    mtu = mtus.of(hca.name, port) if mtus is not None else None
    if mtu is not None and mtu.error is not None:
        bad["active_mtu"] = mtu.error
    rate = _read(port_dir / "rate", bad, "rate")
    netdev = _netdev(hca, port)
    device = hca / "device"
    return HcaPort(
        hca=hca.name,
        port=port,
        state=_read(port_dir / "state", bad, "state"),
        phys_state=_read(port_dir / "phys_state", bad, "phys_state"),
        rate=rate,
        rate_gbps=rate_of(rate),
        link_layer=_read(port_dir / "link_layer", bad, "link_layer"),
        fw_ver=_read(hca / "fw_ver", bad, "fw_ver"),
        board_id=_read(hca / "board_id", {}, "board_id"),
        pci_address=device.resolve().name if device.exists() else None,
        numa_node=_int(_read(device / "numa_node", {}, "numa_node")),
        netdev=netdev,
        netdev_mtu=_int(_read(root / "class" / "net" / netdev / "mtu", bad, "netdev mtu")) if netdev else None,
        active_mtu=mtu.active if mtu is not None else None,
        max_mtu=mtu.maximum if mtu is not None else None,
        gids=_gids(port_dir),
        unreadable=bad,
    )


def read_ports(root: Path, mtus: DevinfoPorts | None = None) -> list[HcaPort]:
    """Every port of every RDMA adapter under `root`/class/infiniband, by adapter then port, with its MTUs from
    `mtus` (ibv_devinfo's; None: not asked, the MTUs stay unread)."""
    ports = []
    for hca in _hcas(root):
        dirs = hca / "ports"
        for port_dir in sorted(dirs.iterdir(), key=lambda p: int(p.name)) if dirs.is_dir() else []:
            if port_dir.name.isdigit():
                ports.append(_port(root, hca, port_dir, mtus))
    return ports


@dataclass(frozen=True, slots=True)
class CounterSnapshot:
    """Every counter of every port at one moment (`time`: ISO 8601, UTC)."""

    time: str
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    hw_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


def _counter_dir(folder: Path, key: str, unreadable: dict[str, str]) -> dict[str, int]:
    values: dict[str, int] = {}
    for f in sorted(folder.iterdir()) if folder.is_dir() else []:
        text = _read(f, unreadable, f"{key}/{f.name}")
        if text is None:
            continue
        if text.isdigit():
            values[f.name] = int(text)
        else:  # "N/A (no PMA)": the adapter does not keep it
            unreadable[f"{key}/{f.name}"] = text
    return values


def read_counters(root: Path, now: str | None = None) -> CounterSnapshot:
    """Every file of ports/<p>/counters and ports/<p>/hw_counters of every adapter, read now."""
    time = now or datetime.now(UTC).isoformat(timespec="milliseconds")
    counters: dict[str, dict[str, int]] = {}
    hw: dict[str, dict[str, int]] = {}
    bad: dict[str, str] = {}
    for hca in _hcas(root):
        dirs = hca / "ports"
        for port_dir in sorted(dirs.iterdir()) if dirs.is_dir() else []:
            key = port_key(hca.name, int(port_dir.name)) if port_dir.name.isdigit() else None
            if key is None:
                continue
            counters[key] = _counter_dir(port_dir / "counters", key, bad)
            if (port_dir / "hw_counters").is_dir():
                hw[key] = _counter_dir(port_dir / "hw_counters", key, bad)
    return CounterSnapshot(time, counters, hw, bad)


def counter_window(load: str, before: CounterSnapshot, after: CounterSnapshot) -> CounterWindow:
    """The two readings around a loaded window, kept whole (the evaluator takes the deltas)."""
    return CounterWindow(
        load=load,
        started=before.time,
        finished=after.time,
        before=before.counters,
        after=after.counters,
        hw_before=before.hw_counters,
        hw_after=after.hw_counters,
        unreadable={**before.unreadable, **after.unreadable},
    )


def pci_device(root: Path, address: str) -> PciDevice | None:
    """Where the PCI function `address` sits: the host bridge, then every bridge down to it (None: not there)."""
    link = root / "bus" / "pci" / "devices" / bus_id(address)
    if not link.exists():
        return None
    parts = link.resolve().parts
    start = next((i for i, p in enumerate(parts) if p.startswith("pci")), None)
    if start is None:
        return None
    path = [parts[start], *(p for p in parts[start + 1 :] if _BDF.match(p))]
    return PciDevice(path=path, numa_node=_int(_read(link / "numa_node", {}, "")))


def _switch(chain: list[str], i: int) -> str:
    """The switch the bridge at depth `i` (>= 1, below the root port) belongs to: named by its upstream port.
    Below a root port, bridges come in pairs, an upstream port then one of its downstream ports."""
    return chain[i] if i % 2 == 1 else chain[i - 1]


def relation(a: PciDevice, b: PciDevice) -> Relation:
    """nvidia-smi topo's word for the path between two PCI functions. Across host bridges: NODE when both sit
    on one NUMA node, SYS otherwise. Through different root ports of one host bridge: PHB. Below one root port,
    the PCIe switches on the path (each an upstream port and its downstream ports): PIX for at most one, PXB for
    more (the path turns at their deepest common bridge)."""
    if a.path[0] != b.path[0]:
        return "NODE" if a.numa_node == b.numa_node and a.numa_node is not None else "SYS"
    ca, cb = a.path[1:-1], b.path[1:-1]  # the bridges above each function, the root port first
    if not ca or not cb or ca[0] != cb[0]:
        return "PHB"
    common = next((i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y), min(len(ca), len(cb)))
    switches = {_switch(ca, i) for i in range(max(common, 1), len(ca))}
    switches |= {_switch(cb, i) for i in range(max(common, 1), len(cb))}
    if common - 1 >= 1:
        switches.add(_switch(ca, common - 1))
    return "PIX" if len(switches) <= 1 else "PXB"


def read_affinity(
    root: Path, gpus: Mapping[int, str], hcas: Mapping[str, str]
) -> tuple[dict[str, PciDevice], list[GpuNic], dict[str, str]]:
    """Each GPU (index -> PCI address) against each HCA (name -> PCI address): where each sits, their relation,
    and what could not be found."""
    pci: dict[str, PciDevice] = {}
    bad: dict[str, str] = {}
    for address in [*gpus.values(), *hcas.values()]:
        found = pci_device(root, address)
        if found is None:
            bad[bus_id(address)] = "no such PCI function under bus/pci/devices"
        else:
            pci[bus_id(address)] = found
    pairs = []
    for gpu, g_addr in sorted(gpus.items()):
        for hca, h_addr in sorted(hcas.items()):
            g, h = pci.get(bus_id(g_addr)), pci.get(bus_id(h_addr))
            rel = relation(g, h) if g is not None and h is not None else None
            pairs.append(GpuNic(gpu=gpu, pci_bus_id=bus_id(g_addr), hca=hca, relation=rel))
    return pci, pairs, bad


def read_gdr(root: Path) -> GdrFacts:
    """Which of NCCL's peer-memory files exist (DMA-BUF needs CUDA and verbs: the caller adds it)."""
    present = [f"/sys/{f}" for f in PEERMEM_FILES if (root / f).exists()]
    version = _read(root / "module" / "nvidia_peermem" / "version", {}, "")
    return GdrFacts(peermem=present, peermem_version=version)


def read_node_fabric(
    root: Path, gpus: Mapping[int, str], window: CounterWindow | None = None, mtus: DevinfoPorts | None = None
) -> NodeFabric:
    """The node's fabric as sysfs shows it: ports (with ibv_devinfo's MTUs where `mtus` is given), the GPU-HCA
    relations, the peer-memory module, and the counters' window the caller read around the load."""
    ports = read_ports(root, mtus)
    hcas = {p.hca: p.pci_address for p in ports if p.pci_address is not None}
    pci, affinity, bad = read_affinity(root, gpus, hcas)
    return NodeFabric(ports=ports, counters=window, pci=pci, affinity=affinity, gdr=read_gdr(root), unreadable=bad)
