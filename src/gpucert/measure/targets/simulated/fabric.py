"""The simulated fabric: what a node's fabric pod would read of its RDMA rails, and what a pair of nodes would
measure between them, as raw observations (spec/simulated_fabric.py says what each fault changes). Never says
what is wrong: the sysfs strings, counters, PCIe paths, perftest samples and NCCL channel lines are what the real
probes would record, and the evaluation must find each fault from them.

Topology (DGX-like): slot k's GPU and its rail NIC(s) sit under one PCIe switch below their own root port; the
first half of the slots hang off NUMA node 0, the rest off node 1. The GPU-NIC relation is derived from those
paths by the probes' own `relation`, as on a real node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal, TypeVar

import numpy as np

from gpucert.measure.evidence import (
    CounterWindow,
    GdrFacts,
    GidEntry,
    GpuNic,
    HcaPort,
    NcclChannel,
    NcclNetDevice,
    NcclTransport,
    NodeFabric,
    PciDevice,
    RdmaBandwidth,
)
from gpucert.measure.evidence_fabric import port_key, rate_of
from gpucert.measure.probes.fabric_sysfs import PEERMEM_FILES, relation
from gpucert.measure.probes.probe_plan import FabricRails
from gpucert.measure.targets.simulated.world import World
from gpucert.spec.simulated_fabric import (
    FabricFault,
    FleetFabric,
    GdrOffFault,
    LinkDownedFault,
    NcclSocketFault,
    NicPlacementFault,
    PortDownFault,
    PortRateFault,
    RackLinkFault,
    SlowRailFault,
    SymbolErrorsFault,
)

__all__ = ["WINDOW_S", "node_fabric", "pair_rdma", "transport"]

WINDOW_S = 1800.0  # the loaded window the counters are read around (the fabric stage's pairs and all-reduce)
RDMA_SAMPLES = 5
RDMA_BYTES = 1 << 20
PCI_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]  # as the simulated GPUs' pci_bus_id
IB_LANES = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR", 25.0: "EDR", 50.0: "HDR", 100.0: "NDR", 200.0: "XDR"}
ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)
DATA_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets")
HW_COUNTERS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err")
FABRIC_STREAM = 0x464142
F = TypeVar("F", bound=FabricFault)
R = TypeVar("R", PortDownFault, PortRateFault, SymbolErrorsFault, LinkDownedFault, NicPlacementFault)


def _faults(world: World, kind: type[F], node: str | None = None) -> list[F]:
    return [f for f in world.fleet.faults if isinstance(f, kind) and (node is None or f.node == node)]


def _on_rail(world: World, kind: type[R], node: str, rail: int) -> list[R]:
    return [f for f in _faults(world, kind, node) if f.rail == rail]


def _fabric(world: World, node: str) -> FleetFabric:
    """The node's rails: its pool's own fabric, else the fleet's."""
    fabric = world.fleet.fabric_of(node)
    assert fabric is not None
    return fabric


def _rate_text(gbps: float) -> str:
    """The kernel's `rate` (drivers/infiniband/core/sysfs.c rate_show): "<n> Gb/sec (4X <speed>)"."""
    speed = IB_LANES.get(gbps / 4)
    return f"{gbps:g} Gb/sec (4X{f' {speed}' if speed else ''})"


def _rate(world: World, node: str, rail: int) -> float | None:
    """The speed the rail's port trained to, None when it is down."""
    if _on_rail(world, PortDownFault, node, rail):
        return None
    trained = _on_rail(world, PortRateFault, node, rail)
    return trained[-1].gbps if trained else _fabric(world, node).rate_gbps


def _slot_of_rail(rail: int, rails: int, gpus: int) -> int:
    return rail * gpus // rails


def _switch_port(slot: int, gpus: int, leaf: int, endpoint: int, function: int = 0) -> PciDevice:
    """A function under slot `slot`'s PCIe switch: host bridge, root port, the switch's upstream port, its
    downstream port `leaf`, then the endpoint on bus `endpoint` past the upstream port's. Slots past the eighth
    take another PCI domain; the first half of the slots sit on NUMA node 0."""
    domain, hb = slot // len(PCI_BUSES), PCI_BUSES[slot % len(PCI_BUSES)] - 4
    at = f"{domain:04x}"
    return PciDevice(
        path=[
            f"pci{at}:{hb:02x}",
            f"{at}:{hb:02x}:01.0",
            f"{at}:{hb + 1:02x}:00.0",
            f"{at}:{hb + 2:02x}:{leaf:02x}.0",
            f"{at}:{hb + 1 + endpoint:02x}:00.{function}",
        ],
        numa_node=int(slot >= (gpus + 1) // 2),
    )


def _pci(world: World, node: str, slots: Sequence[int]) -> tuple[dict[int, PciDevice], dict[str, PciDevice]]:
    """Where each present GPU (by slot) and each rail's NIC (by HCA) sits: the GPU behind the switch's first
    downstream port (on the bus of its pci_bus_id), the NIC behind the second."""
    fabric = _fabric(world, node)
    gpus = world.group(node).nodes.gpus_per_node
    by_slot = {slot: _switch_port(slot, gpus, leaf=0, endpoint=3) for slot in slots}
    nics = {}
    for rail in range(fabric.rails):
        slot = _slot_of_rail(rail, fabric.rails, gpus)
        if _on_rail(world, NicPlacementFault, node, rail):
            slot = (slot + gpus // 2) % gpus if gpus > 1 else slot
        nics[fabric.hca(rail)] = _switch_port(slot, gpus, leaf=1, endpoint=2, function=rail % 8)
    return by_slot, nics


def _counters(world: World, node: str, rail: int) -> tuple[dict[str, int], dict[str, int]]:
    """One port's counters before and after the loaded window: a healthy link carries data and counts no errors
    (a congested one the odd discard); the faults add theirs. A stream per port: a fault on one port leaves the
    others' counters as they were."""
    rng = np.random.default_rng([world.fleet.seed, world.number(node) + 1, FABRIC_STREAM, rail])
    before = {c: int(rng.integers(0, 4)) for c in ERROR_COUNTERS} | {"link_downed": 1}
    before |= {c: int(rng.integers(10**9, 10**10)) for c in DATA_COUNTERS}
    after = dict(before)
    if _rate(world, node, rail) is not None:
        for c in DATA_COUNTERS:
            after[c] += int(rng.integers(10**10, 2 * 10**10))
        after["port_xmit_discards"] += int(rng.integers(0, 3))
    for f in _on_rail(world, SymbolErrorsFault, node, rail):
        after["symbol_error"] += round(f.per_hour * WINDOW_S / 3600)
    for down in _on_rail(world, LinkDownedFault, node, rail):
        after["link_downed"] += down.count
    return before, after


def _port(world: World, node: str, rail: int, pci: PciDevice) -> HcaPort:
    fabric = _fabric(world, node)
    rate = _rate(world, node, rail)
    roce = fabric.link_layer == "Ethernet"
    netdev = f"eth{rail + 2}" if roce else f"ib{rail}"
    gids = (
        [
            GidEntry(
                index=3,
                gid=f"0000:0000:0000:0000:0000:ffff:0a{rail:02x}:{world.number(node) + 1:04x}",
                type="RoCE v2",
                netdev=netdev,
            )
        ]
        if roce
        else []
    )
    return HcaPort(
        hca=fabric.hca(rail),
        port=1,
        state="4: ACTIVE" if rate is not None else "1: DOWN",
        phys_state="5: LinkUp" if rate is not None else "3: Disabled",
        rate=_rate_text(rate if rate is not None else 10.0),
        rate_gbps=rate_of(_rate_text(rate if rate is not None else 10.0)),  # as the probe reads it off the text
        link_layer=fabric.link_layer,
        fw_ver=fabric.fw_ver,
        board_id="MT_0000000838",
        pci_address=pci.path[-1],
        numa_node=pci.numa_node,
        netdev=netdev,
        netdev_mtu=9000 if roce else 4092,
        active_mtu=fabric.mtu,
        max_mtu=4096,  # ibv_devinfo's max_mtu, beside active_mtu as the probe now puts it
        gids=gids,
        gid_index=3 if roce else None,
    )


def node_fabric(world: World, node: str, slots: Sequence[int], started: str) -> NodeFabric | None:
    """The node's fabric pod's reading (None when the fleet has no fabric): `slots` are the present GPUs' slots,
    NVML's index being the position in it."""
    if world.fleet.fabric_of(node) is None:
        return None
    fabric = _fabric(world, node)
    gpu_pci, nic_pci = _pci(world, node, slots)
    rng = np.random.default_rng([world.fleet.seed, world.number(node) + 1, FABRIC_STREAM])
    ports = [_port(world, node, r, nic_pci[fabric.hca(r)]) for r in range(fabric.rails)]
    before, after, hw_before, hw_after = {}, {}, {}, {}
    for r, port in enumerate(ports):
        before[port.key], after[port.key] = _counters(world, node, r)
        hw_before[port.key] = {c: int(rng.integers(0, 50)) for c in HW_COUNTERS}
        hw_after[port.key] = dict(hw_before[port.key])
    start = datetime.fromisoformat(started.replace("Z", "+00:00"))
    window = CounterWindow(
        load="fabric",
        started=start.isoformat(),
        finished=(start + timedelta(seconds=WINDOW_S)).isoformat(),
        before=before,
        after=after,
        hw_before=hw_before,
        hw_after=hw_after,
    )
    affinity = [
        GpuNic(gpu=i, pci_bus_id=gpu_pci[s].path[-1], hca=hca, relation=relation(gpu_pci[s], nic))
        for i, s in enumerate(slots)
        for hca, nic in nic_pci.items()
    ]
    gdr_off = bool(_faults(world, GdrOffFault, node))
    gdr = GdrFacts(
        peermem=[] if gdr_off else [f"/sys/{PEERMEM_FILES[2]}"],
        peermem_version=None if gdr_off else world._version(node, "driver"),
        dmabuf_gpu={i: not gdr_off for i in range(len(slots))},
        dmabuf_nic={fabric.hca(r): not gdr_off for r in range(fabric.rails)},
        kernel=world._version(node, "kernel"),
    )
    pci = {d.path[-1]: d for d in [*gpu_pci.values(), *nic_pci.values()]}
    tools = {"ib_write_bw": "6.29", "ibv_devinfo": "rdma-core 50.0"}
    return NodeFabric(ports=ports, counters=window, pci=pci, affinity=affinity, gdr=gdr, tools=tools)


def _rack(world: World, node: str) -> str | None:
    racks = _fabric(world, node).racks
    return racks.of(world.number(node)) if racks is not None else None


def _link_factor(world: World, a: str, b: str, rail: int) -> float:
    """What slows the link between `a` and `b` on `rail`: a bad cable between them, a bad uplink between racks."""
    factor = 1.0
    for f in _faults(world, SlowRailFault):
        if f.rail == rail and {f.node, f.peer} == {a, b}:
            factor *= f.factor
    for uplink in _faults(world, RackLinkFault):
        if {_rack(world, uplink.node), _rack(world, uplink.peer)} == {_rack(world, a), _rack(world, b)}:
            factor *= uplink.factor
    return factor


def _selected(fabric: FleetFabric, select: FabricRails | None) -> list[tuple[int, str]]:
    """(rail index in the pool's order, HCA) of the ports a pair pod measures as rails, as the real probe's
    rails_of picks them (measure/probes/fabric_pair.py): the pool's named HCAs the node has, else every port of
    its link layer in natural order (every port without `select`)."""
    hcas = [fabric.hca(r) for r in range(fabric.rails)]
    if select is not None and select.hcas is not None:
        return [(i, h) for i, h in enumerate(select.hcas) if h in hcas and select.port == 1]
    if select is not None and (select.port != 1 or select.link_layer not in (None, fabric.link_layer)):
        return []
    return list(enumerate(sorted(hcas, key=lambda h: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", h)])))


def pair_rdma(world: World, a: str, b: str, gpus: int, select: FabricRails | None = None) -> list[RdmaBandwidth]:
    """`ib_write_bw --use_cuda` on every rail `select` names (the pool's) from `a` (client) to `b` (server), or
    what stopped it; a rail is a port the two nodes both have."""
    fabric_a, fabric_b = world.fleet.fabric_of(a), world.fleet.fabric_of(b)
    if fabric_a is None or fabric_b is None:
        return []
    theirs = dict(_selected(fabric_b, select))
    hcas_a = [fabric_a.hca(r) for r in range(fabric_a.rails)]
    out = []
    for index, hca in _selected(fabric_a, select):
        if theirs.get(index) != hca:
            continue  # the peer has no such rail: its fabric.port says so
        out.append(_rail_rdma(world, (a, b), index, hcas_a.index(hca), gpus))
    return out


def _rail_rdma(world: World, pair: tuple[str, str], index: int, rail: int, gpus: int) -> RdmaBandwidth:
    """One rail's measurement: `index` is the rail in the pool's order, `rail` the port in the fleet's (which the
    faults name)."""
    a, b = pair
    fabric = _fabric(world, a)
    hca = port_key(fabric.hca(rail), 1)
    rates = [_rate(world, n, rail) for n in (a, b)]
    samples: list[float] = []
    error = None
    if None in rates:
        error = "Failed to modify QP to RTR; Unable to Connect the HCA's through the link"
    elif _faults(world, GdrOffFault, a) or _faults(world, GdrOffFault, b):
        error = "Couldn't allocate MR with error=14"  # ibv_reg_mr on GPU memory without peer memory: EFAULT
    else:
        nominal = min(r for r in rates if r is not None) * fabric.efficiency * _link_factor(world, a, b, rail)
        # a stream per pair and rail: a fault on one rail leaves the others' samples as they were
        seed = [world.fleet.seed, FABRIC_STREAM, world.number(a), world.number(b), rail]
        noise = 1 + world.fleet.noise.cv * np.random.default_rng(seed).standard_normal(RDMA_SAMPLES)
        samples = [round(float(v), 2) for v in nominal * noise]
    return RdmaBandwidth(
        rail=index,
        client=a,
        server=b,
        client_hca=hca,
        server_hca=hca,
        gpu=_slot_of_rail(rail, fabric.rails, gpus) if gpus else None,
        samples=samples,
        peak=[round(v * 1.002, 2) for v in samples],
        params={"size": RDMA_BYTES, "simulated": True, "perftest": "6.29"},
        error=f"ib_write_bw: {error}" if error else None,
    )


def transport(world: World, nodes: Sequence[str], gpus: int) -> NcclTransport | None:
    """NCCL_DEBUG=INFO of a ring over `nodes` (`gpus` ranks each): every node's NET devices, and per channel the
    send and receive line where the ring crosses from one node to the next."""
    if len(nodes) < 2 or gpus < 1 or world.fleet.fabric_of(nodes[0]) is None:
        return None
    fabric = _fabric(world, nodes[0])
    socket = any(_faults(world, NcclSocketFault, n) for n in nodes)
    layer = "RoCE" if fabric.link_layer == "Ethernet" else "IB"
    active = {n: [r for r in range(fabric.rails) if _rate(world, n, r) is not None] for n in nodes}
    devices = (
        []
        if socket
        else [
            NcclNetDevice(node=n, index=i, hca=fabric.hca(r), port=1, link_layer=layer)
            for n in nodes
            for i, r in enumerate(active[n])
        ]
    )
    channels = []
    for c in range(2 * fabric.rails):
        for i, n in enumerate(nodes):
            peer = nodes[(i + 1) % len(nodes)]
            src, dst = i * gpus + gpus - 1, ((i + 1) % len(nodes)) * gpus
            ends: tuple[tuple[Literal["send", "receive"], str], ...] = (("send", n), ("receive", peer))
            for direction, local in ends:
                devs = active[local] or [0]
                gdr = not socket and not _faults(world, GdrOffFault, local)
                channels.append(
                    NcclChannel(
                        channel=c,
                        conn=0,
                        src_rank=src,
                        src_dev=gpus - 1,
                        dst_rank=dst,
                        dst_dev=0,
                        direction=direction,
                        transport="NET/Socket" if socket else "NET/IB",
                        net_dev=0 if socket else c % len(devs),
                        gdr=gdr,
                    )
                )
    return NcclTransport(
        network="Socket" if socket else "IB",
        devices=devices,
        channels=channels,
        lines=len(channels) + len(devices) + len(nodes),
    )
