"""Fabric rules of one node: a rail's port (`fabric.port`), its error counters under load (`fabric.counters`), the
PCIe place of its NIC (`fabric.affinity`), and GPUDirect RDMA (`fabric.gdr`). Pure: evidence and spec in,
Findings out.

Which HCA is a rail: the one the spec names (`rails.hcas[r]`), else, found through the RDMA resource, the node's
r-th HCA (natural order) whose port is of the fabric's link layer. Which GPUs a rail serves: GPU g of G goes to
rail g * R // G (rail r = GPU r when there are as many rails as GPUs, the usual one NIC per GPU).
"""

from __future__ import annotations

import re

from gpucert.measure.evidence_fabric import CounterWindow, GdrFacts, GpuNic, HcaPort, NodeFabric
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.fabric import IB_MTUS, CounterLimit, FabricSpec

__all__ = [
    "SATURATED",
    "gpus_of_rail",
    "judge_affinity",
    "judge_counters",
    "judge_firmware",
    "judge_gdr",
    "judge_port",
    "link_of",
    "port_mtu",
    "rail_port",
    "rail_where",
]

PASS, FAIL, ERROR = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR
# the PMA's PortCounters are 16- or 32-bit and saturate at their maximum (IBTA; CounterWindow's docstring)
SATURATED = (0xFFFF, 0xFFFFFFFF)
NEAR = ("PIX", "PXB")  # nvidia-smi topo: at most PCIe switches between them, never the CPU


# how every node-rail finding begins: "gpu-node-5 rail 3 (mlx5_3/1)"; the punch list reads the rail, HCA and port
# back from it (a finding has no field for them), and the peer from a slow link's "the link to PEER on this rail"
_WHERE = re.compile(r"^\S+ rail (?P<rail>\d+) \((?P<hca>[^/)]+)/(?P<port>\d+)\)")
_PEER = re.compile(r"the link to (?P<peers>[^:]+?) on this rail")


def rail_where(node: str, rail: int, port: str) -> str:
    return f"{node} rail {rail} ({port})"


def link_of(message: str) -> tuple[int, str, int, list[str]] | None:
    """(rail, HCA, port, peers) of a node-rail finding's message, None for any other message."""
    m = _WHERE.match(message)
    if m is None:
        return None
    peer = _PEER.search(message)
    peers = peer["peers"].split(", ") if peer else []
    return int(m["rail"]), m["hca"], int(m["port"]), peers


def _natural(name: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def rail_port(fabric: NodeFabric, spec: FabricSpec, rail: int) -> HcaPort | None:
    """The port rail `rail` uses on this node (None: the node has no such HCA or port)."""
    if spec.rails.hcas is not None:
        return fabric.port(spec.rails.hcas[rail], spec.rails.port)
    found = sorted(
        (p for p in fabric.ports if p.port == spec.rails.port and p.link_layer == spec.link_layer.value),
        key=lambda p: _natural(p.hca),
    )
    return found[rail] if rail < len(found) else None


def gpus_of_rail(rail: int, rails: int, gpus: int) -> list[int]:
    return [g for g in range(gpus) if g * rails // gpus == rail]


def _state(text: str | None) -> str:
    """`4: ACTIVE` -> ACTIVE; `5: LinkUp` -> LinkUp."""
    return (text or "").partition(":")[2].strip() or (text or "").strip()


def _missing(node: str, rail: int, spec: FabricSpec) -> Finding:
    if spec.rails.hcas:
        where = rail_where(node, rail, f"{spec.rails.hcas[rail]}/{spec.rails.port}")
        return Finding("fabric.port", FAIL, node, None, f"{where}: the node has no such HCA port")
    message = f"{node} rail {rail}: the node has fewer than {rail + 1} {spec.link_layer.value} HCAs"
    return Finding("fabric.port", FAIL, node, None, message)


def _unread(port: HcaPort, spec: FabricSpec) -> str | None:
    """What of the port could not be read, so that it cannot be judged (None: everything needed was read)."""
    if port.unreadable:
        return "could not be read: " + "; ".join(f"{k}: {v}" for k, v in sorted(port.unreadable.items()))
    if port.rate_gbps is None:
        return f"the port's rate was not read ({port.rate!r})"
    if port_mtu(port, spec) is None:
        return "the port's MTU was not read"
    return None


# what RoCE's headers take of the Ethernet MTU before the RDMA MTU is chosen (iboe_get_mtu, include/rdma/ib_addr.h,
# Linux 6.8: GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 bytes)
ROCE_HEADERS = 96


def roce_mtu(netdev_mtu: int) -> int:
    """The RDMA MTU the kernel gives a RoCE port over an interface of this Ethernet MTU (0: none fits)."""
    return max((m for m in IB_MTUS if m <= netdev_mtu - ROCE_HEADERS), default=0)


def port_mtu(port: HcaPort, spec: FabricSpec) -> int | None:
    """The port's active RDMA MTU (an IB MTU: what `mtu` in the spec means), None where it was not read. RoCE: the
    one read, else the one the kernel derives from the interface's Ethernet MTU."""
    if port.active_mtu is not None or spec.link_layer.value == "InfiniBand":
        return port.active_mtu
    return roce_mtu(port.netdev_mtu) if port.netdev_mtu is not None else None


def _port_problems(port: HcaPort, spec: FabricSpec) -> list[str]:
    problems = []
    if _state(port.state) != "ACTIVE" or _state(port.phys_state) != "LinkUp":
        state, phys = _state(port.state) or "?", _state(port.phys_state) or "?"
        problems.append(f"the port is {state} / {phys}, not ACTIVE / LinkUp")
    if port.link_layer != spec.link_layer.value:
        problems.append(f"link layer {port.link_layer}, not {spec.link_layer.value}")
    if port.rate_gbps is not None and port.rate_gbps < spec.rated_gbps:
        problems.append(f"trained down to {port.rate} where {spec.rated_gbps:g} Gb/s is rated")
    mtu = port_mtu(port, spec)
    if mtu is not None and mtu < spec.mtu:
        problems.append(f"MTU {mtu}, below the {spec.mtu} declared")
    gid = _roce_gid_problem(port) if spec.link_layer.value == "Ethernet" else None
    return [*problems, gid] if gid else problems


def judge_port(node: str, rail: int, port: HcaPort | None, spec: FabricSpec) -> Finding:
    """`fabric.port`: the rail's port is up (ACTIVE, LinkUp), of the declared link layer, at the rated speed and
    MTU, and (RoCE) with a RoCE v2 GID where its traffic goes."""
    if port is None:
        return _missing(node, rail, spec)
    where = rail_where(node, rail, port.key)
    unread = _unread(port, spec)
    if unread:
        return Finding("fabric.port", ERROR, node, None, f"{where}: {unread}")
    problems = _port_problems(port, spec)
    status = FAIL if problems else PASS
    said = "; ".join(problems) or f"ACTIVE at {port.rate}, MTU {port_mtu(port, spec)}"
    return Finding(
        "fabric.port",
        status,
        node,
        None,
        f"{where}: {said}",
        observed=port.rate_gbps,
        expected=spec.rated_gbps,
        unit="Gb/s",
    )


def _roce_gid_problem(port: HcaPort) -> str | None:
    """RoCE needs a RoCE v2 GID to route: the one the traffic was told to use (NCCL_IB_GID_INDEX), else any.
    The GID type is the kernel's gid_attrs/types string ("RoCE v2"; drivers/infiniband/core/sysfs.c)."""
    v2 = [g for g in port.gids if (g.type or "").lower() == "roce v2"]
    if port.gid_index is not None:
        used = next((g for g in port.gids if g.index == port.gid_index), None)
        if used is None:
            return f"GID index {port.gid_index} (the one in use) is empty"
        if used not in v2:
            return f"GID index {port.gid_index} in use is {used.type or 'of no type'}, not RoCE v2"
        return None
    return None if v2 else "no RoCE v2 GID on the port"


def _over(name: str, delta: int, hours: float, limit: CounterLimit) -> str | None:
    if limit.max_increase is not None and delta > limit.max_increase:
        return f"{name} +{delta} (at most +{limit.max_increase})"
    rate = delta / hours
    if limit.max_per_hour is not None and rate > limit.max_per_hour:
        return f"{name} +{delta} in {hours * 60:.3g} min, {rate:.4g}/h (at most {limit.max_per_hour:g}/h)"
    return None


def judge_counters(node: str, rail: int, port: str, window: CounterWindow | None, spec: FabricSpec) -> Finding:
    """`fabric.counters`: each limited counter's growth over the loaded window within its limit (a counter that
    was not read, went backwards or sits saturated cannot be judged: an error, never a pass)."""
    check, where = "fabric.counters", rail_where(node, rail, port)
    seconds = window.seconds() if window is not None else None
    if window is None or not seconds:
        why = "no loaded window was read" if window is None else "the window's times are not two times in order"
        return Finding(check, ERROR, node, None, f"{where}: {why}")
    deltas = window.deltas(port)
    limits = spec.counter_limits()
    unread = sorted(n for n in limits if n not in deltas)
    if unread:
        return Finding(check, ERROR, node, None, f"{where}: counters not read at both ends: {', '.join(unread)}")
    odd = [n for n in limits if deltas[n] < 0 or window.after[port][n] in SATURATED]
    if odd:
        detail = ", ".join(f"{n} {window.before[port][n]} -> {window.after[port][n]}" for n in odd)
        return Finding(check, ERROR, node, None, f"{where}: counters reset or saturated in the window: {detail}")
    hours = seconds / 3600
    over = [o for n, lim in limits.items() if (o := _over(n, deltas[n], hours, lim))]
    grew = {n: d for n, d in deltas.items() if n in limits and d}
    if over:
        message = f"{where}: under {window.load}: {'; '.join(over)}"
        return Finding(check, FAIL, node, None, message, observed=max(grew.values()), expected=0, unit="count")
    said = ", ".join(f"{n} +{d}" for n, d in grew.items()) or "no error counter grew"
    return Finding(check, PASS, node, None, f"{where}: {seconds:.0f} s under {window.load}: {said}")


def judge_affinity(node: str, rail: int, port: str, gpus: list[int], affinity: list[GpuNic]) -> Finding:
    """`fabric.affinity`: the rail's NIC (`port`: hca/port) sits under the PCIe switch of the GPUs it serves (PIX
    or PXB), not across the CPU (PHB, NODE, SYS). With fewer rails than GPUs, a rail's GPUs sit under switches of
    their own on many boards: one of them beside the NIC is enough (NCCL sends through the nearest GPU)."""
    check, where, hca = "fabric.affinity", rail_where(node, rail, port), port.partition("/")[0]
    seen = {a.gpu: a.relation for a in affinity if a.hca == hca}
    missing = [g for g in gpus if seen.get(g) is None]
    if missing:
        return Finding(check, ERROR, node, None, f"{where}: no PCIe relation read for GPU {missing}")
    far = {g: seen[g] for g in gpus if seen[g] not in NEAR}
    if far and len(far) == len(gpus):
        said = ", ".join(f"GPU {g} {r}" for g, r in far.items())
        message = f"{where}: the NIC is not under the PCIe switch of its GPUs: {said} (want PIX or PXB)"
        return Finding(check, FAIL, node, None, message, observed=next(iter(far.values())), expected="PIX|PXB")
    return Finding(check, PASS, node, None, f"{where}: " + ", ".join(f"GPU {g} {seen[g]}" for g in gpus))


def _kernel_at_least(release: str | None, want: tuple[int, int]) -> bool:
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return m is not None and (int(m[1]), int(m[2])) >= want


def judge_gdr(node: str, gdr: GdrFacts | None, hcas: list[str], gpus: list[int]) -> Finding:
    """`fabric.gdr`: GPUDirect RDMA is available as NCCL decides it: a peer-memory module, or DMA-BUF on every GPU
    and every rail's NIC (Linux 5.12 or later). A DMA-BUF answer that was never had (not asked, as in a pod without
    the RDMA device) is an error naming why, never "off"; a "no" that was had, or an old kernel, is off."""
    check = "fabric.gdr"
    if gdr is None:
        return Finding(check, ERROR, node, None, f"{node}: the GPUDirect RDMA facts were not read")
    if gdr.peermem:
        version = f" {gdr.peermem_version}" if gdr.peermem_version else ""
        return Finding(check, PASS, node, None, f"{node}: peer memory{version} ({', '.join(gdr.peermem)})")
    no_gpu = [g for g in gpus if gdr.dmabuf_gpu.get(g) is False]
    no_nic = [h for h in hcas if gdr.dmabuf_nic.get(h) is False]
    kernel = _kernel_at_least(gdr.kernel, (5, 12))
    old = gdr.kernel is not None and not kernel and re.match(r"\d+\.\d+", gdr.kernel) is not None
    if not no_gpu and not no_nic and not old:
        unasked = _gdr_unasked(gdr, hcas, gpus)
        if unasked:
            message = f"{node}: GPUDirect RDMA cannot be judged: nvidia_peermem is not loaded, and {unasked}"
            return Finding(check, ERROR, node, None, message)
        return Finding(check, PASS, node, None, f"{node}: DMA-BUF on every GPU and NIC (kernel {gdr.kernel})")
    why = [f"no DMA-BUF on GPU {no_gpu}" if no_gpu else "", f"nor on {', '.join(no_nic)}" if no_nic else ""]
    why.append("" if kernel else f"kernel {gdr.kernel} (DMA-BUF needs 5.12)")
    message = f"{node}: GPUDirect RDMA is off: nvidia_peermem is not loaded, {'; '.join(w for w in why if w)}"
    return Finding(check, FAIL, node, None, message, observed="off", expected="peermem or DMA-BUF")


def _gdr_unasked(gdr: GdrFacts, hcas: list[str], gpus: list[int]) -> str:
    """What of DMA-BUF was never answered (GPUs, rail NICs, the kernel), with the probe's reasons; "" if all was."""
    gpu = [g for g in gpus if g not in gdr.dmabuf_gpu]
    nic = [h for h in hcas if h not in gdr.dmabuf_nic]
    kernel = "" if re.match(r"\d+\.\d+", gdr.kernel or "") else "the kernel release"
    said = [f"GPU {gpu}" if gpu else "", ", ".join(nic), kernel]
    if not any(said):
        return ""
    whys = [gdr.unasked[k] for k in ("gpus" if gpu else "", "nics" if nic else "") if k in gdr.unasked]
    because = f": {'; '.join(whys)}" if whys else " (the probe recorded no reason)"
    return f"DMA-BUF support was not read of {', '.join(s for s in said if s)}{because}"


def judge_firmware(node: str, firmware: dict[str, str | None], pin: str | None, majority: str | None) -> Finding:
    """`fabric.firmware`: every rail HCA's firmware (`firmware`: HCA -> fw_ver) is the version the stack pins as
    `hca-firmware`, or, with no pin, the version most of the pool's rail HCAs run (skew, as for kernel and OS)."""
    check = "fabric.firmware"
    unread = sorted(h for h, v in firmware.items() if not v)
    if unread or not firmware:
        return Finding(
            check, ERROR, node, None, f"{node}: no firmware version read for {', '.join(unread) or 'any rail HCA'}"
        )
    want = pin or majority
    odd = {h: v for h, v in firmware.items() if want is not None and v != want}
    if odd:
        said = ", ".join(f"{h} {v}" for h, v in sorted(odd.items()))
        why = f"not the pinned hca-firmware {pin}" if pin else f"where most of the pool's rail HCAs run {majority}"
        message = f"{node}: HCA firmware {said}: {why}"
        return Finding(check, FAIL, node, None, message, observed=next(iter(odd.values())), expected=want)
    return Finding(check, PASS, node, None, f"{node}: every rail HCA runs firmware {want or '(no majority)'}")
