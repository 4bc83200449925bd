"""The fabric rules (evaluate/rules/fabric_*.py) over evidence built here: pure, no pytest session."""

from __future__ import annotations

import random

import pytest

from gpucert.evaluate.rules.fabric_isolation import PairFigure, isolate_rail
from gpucert.evaluate.rules.fabric_ports import (
    gpus_of_rail,
    judge_affinity,
    judge_counters,
    judge_gdr,
    judge_port,
    rail_port,
)
from gpucert.evaluate.rules.fabric_transport import Collective, judge_transport
from gpucert.measure.evidence_fabric import (
    CounterWindow,
    GdrFacts,
    GidEntry,
    GpuNic,
    HcaPort,
    NcclChannel,
    NcclTransport,
    NodeFabric,
)
from gpucert.plan.checks import CheckStatus
from gpucert.spec.fabric import FabricSpec, LinkLayer

PASS, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP
SPEC = FabricSpec.model_validate(
    {"rails": {"count": 8, "resource": "rdma/ib"}, "linkLayer": "InfiniBand", "ratedGbps": 400}
)


def port(hca: str = "mlx5_3", **changes: object) -> HcaPort:
    fields: dict[str, object] = {
        "hca": hca,
        "port": 1,
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "rate_gbps": 400.0,
        "link_layer": "InfiniBand",
        "active_mtu": 4096,
    }
    return HcaPort.model_validate(fields | changes)


# ---- fabric.port ---------------------------------------------------------------------------------------------


def test_a_healthy_port_passes_and_the_rail_is_found_by_the_hcas_natural_order() -> None:
    fabric = NodeFabric(ports=[port(f"mlx5_{i}") for i in (10, 2, 0, 1, 3, 4, 5, 6, 7)])
    assert rail_port(fabric, SPEC, 2) == port("mlx5_2")  # mlx5_10 sorts last, not after mlx5_1
    assert judge_port("n1", 3, port(), SPEC).status is PASS


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"state": "1: DOWN", "phys_state": "3: Disabled"}, "the port is DOWN / Disabled"),
        ({"rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0}, "trained down to 200 Gb/sec (4X HDR)"),
        ({"active_mtu": 2048}, "MTU 2048, below the 4096"),
        ({"link_layer": "Ethernet"}, "link layer Ethernet, not InfiniBand"),
    ],
)
def test_a_port_down_trained_down_or_at_a_small_mtu_fails_naming_node_rail_and_port(
    changes: dict[str, object], says: str
) -> None:
    found = judge_port("n1", 3, port(**changes), SPEC)
    assert found.status is FAIL
    assert found.message.startswith("n1 rail 3 (mlx5_3/1): ")
    assert says in found.message


def test_a_port_that_is_not_there_fails_and_one_not_read_is_an_error() -> None:
    assert judge_port("n1", 7, None, SPEC).status is FAIL
    assert judge_port("n1", 3, port(unreadable={"rate": "EIO"}), SPEC).status is ERROR
    assert judge_port("n1", 3, port(active_mtu=None), SPEC).status is ERROR
    # the active MTU comes from ibv_devinfo, not sysfs: the message names what was not read, not where from
    devinfo = judge_port("n1", 3, port(unreadable={"active_mtu": "ibv_devinfo printed no port 1 of mlx5_3"}), SPEC)
    assert (devinfo.status, "sysfs" in devinfo.message) == (ERROR, False)
    assert "active_mtu: ibv_devinfo printed no port 1 of mlx5_3" in devinfo.message


def test_a_roce_port_needs_a_roce_v2_gid_where_its_traffic_goes() -> None:
    roce = SPEC.model_copy(update={"link_layer": LinkLayer.ETHERNET})
    v2 = GidEntry(index=3, gid="0000:0000:0000:0000:0000:ffff:0a00:0001", type="RoCE v2", netdev="eth2")
    v1 = GidEntry(index=2, gid="fe80:0000:0000:0000:0000:0000:0000:0001", type="IB/RoCE v1", netdev="eth2")
    base = {"link_layer": "Ethernet", "netdev_mtu": 9000, "gids": [v1, v2]}
    assert judge_port("n1", 3, port(**base, gid_index=3), roce).status is PASS
    wrong = judge_port("n1", 3, port(**base, gid_index=2), roce)
    assert wrong.status is FAIL
    assert "GID index 2 in use is IB/RoCE v1, not RoCE v2" in wrong.message
    assert "no RoCE v2 GID" in judge_port("n1", 3, port(**(base | {"gids": [v1]})), roce).message


# ---- fabric.counters -----------------------------------------------------------------------------------------

ZERO = dict.fromkeys(SPEC.counter_limits(), 0)


def window(seconds: int = 60, **after: int) -> CounterWindow:
    return CounterWindow(
        load="rdma_bw",
        started="2026-12-04T10:00:00+00:00",
        finished=f"2026-12-04T10:{seconds // 60:02d}:{seconds % 60:02d}+00:00",
        before={"mlx5_3/1": dict(ZERO)},
        after={"mlx5_3/1": ZERO | after},
    )


def test_clean_counters_pass() -> None:
    assert judge_counters("n1", 3, "mlx5_3/1", window(), SPEC).status is PASS


@pytest.mark.parametrize(
    ("after", "says"),
    [
        ({"link_downed": 1}, "link_downed +1 (at most +0)"),
        ({"local_link_integrity_errors": 1}, "local_link_integrity_errors +1"),
        ({"symbol_error": 3}, "symbol_error +3 in 1 min, 180/h (at most 120/h)"),
    ],
)
def test_a_counter_over_its_limit_fails_with_its_delta_and_rate(after: dict[str, int], says: str) -> None:
    found = judge_counters("n1", 3, "mlx5_3/1", window(**after), SPEC)
    assert found.status is FAIL
    assert says in found.message


def test_symbol_errors_under_the_ibta_rate_pass() -> None:
    assert judge_counters("n1", 3, "mlx5_3/1", window(seconds=120, symbol_error=3), SPEC).status is PASS  # 90/h


def test_counters_not_read_reset_or_saturated_cannot_be_judged() -> None:
    assert judge_counters("n1", 3, "mlx5_3/1", None, SPEC).status is ERROR
    missing = window()
    missing = missing.model_copy(update={"after": {"mlx5_3/1": {"symbol_error": 0}}})
    assert "counters not read at both ends" in judge_counters("n1", 3, "mlx5_3/1", missing, SPEC).message
    reset = window().model_copy(update={"before": {"mlx5_3/1": ZERO | {"port_rcv_errors": 9}}})
    assert judge_counters("n1", 3, "mlx5_3/1", reset, SPEC).status is ERROR
    assert judge_counters("n1", 3, "mlx5_3/1", window(symbol_error=0xFFFF), SPEC).status is ERROR


# ---- fabric.affinity and fabric.gdr --------------------------------------------------------------------------


def test_a_nic_across_the_cpu_from_its_gpu_fails() -> None:
    assert gpus_of_rail(3, 8, 8) == [3]
    assert gpus_of_rail(1, 4, 8) == [2, 3]
    near = [GpuNic(gpu=3, pci_bus_id="0000:3b:00.0", hca="mlx5_3", relation="PIX")]
    assert judge_affinity("n1", 3, "mlx5_3/1", [3], near).status is PASS
    far = [GpuNic(gpu=3, pci_bus_id="0000:3b:00.0", hca="mlx5_3", relation="SYS")]
    found = judge_affinity("n1", 3, "mlx5_3/1", [3], far)
    assert found.status is FAIL
    assert "GPU 3 SYS" in found.message
    assert judge_affinity("n1", 3, "mlx5_3/1", [3], []).status is ERROR
    shared = [GpuNic(gpu=g, pci_bus_id="x", hca="mlx5_1", relation="PIX" if g == 4 else "NODE") for g in (4, 5, 6, 7)]
    assert judge_affinity("n1", 1, "mlx5_1/1", [4, 5, 6, 7], shared).status is PASS  # 2 rails, 8 GPUs
    assert judge_affinity("n1", 1, "mlx5_1/1", [4, 5, 6, 7], shared[1:]).status is ERROR


def test_gdr_from_peer_memory_or_dma_buf_everywhere_and_off_otherwise() -> None:
    hcas, gpus = ["mlx5_0", "mlx5_1"], [0, 1]
    assert judge_gdr("n1", GdrFacts(peermem=["/sys/kernel/mm/memory_peers/nv_mem/version"]), hcas, gpus).status is PASS
    dmabuf = GdrFacts(dmabuf_gpu={0: True, 1: True}, dmabuf_nic=dict.fromkeys(hcas, True), kernel="6.8.0-45-generic")
    assert judge_gdr("n1", dmabuf, hcas, gpus).status is PASS
    old = dmabuf.model_copy(update={"kernel": "5.4.0-200-generic"})
    assert judge_gdr("n1", old, hcas, gpus).status is FAIL
    off = judge_gdr("n1", dmabuf.model_copy(update={"dmabuf_nic": {"mlx5_0": True, "mlx5_1": False}}), hcas, gpus)
    assert off.status is FAIL
    assert off.message == "n1: GPUDirect RDMA is off: nvidia_peermem is not loaded, nor on mlx5_1"
    assert judge_gdr("n1", None, hcas, gpus).status is ERROR


def test_gdr_never_off_for_an_answer_never_had_but_an_error_naming_why() -> None:
    """Issue 25: a probe pod without the RDMA device (/dev/infiniband) cannot ask a NIC for DMA-BUF; that is not a
    NIC without it. A "no" that was had still fails beside it."""
    hcas, gpus = ["mlx5_0", "mlx5_1"], [0, 1]
    why = {"nics": "libibverbs lists no RDMA device in the pod"}
    unasked = GdrFacts(dmabuf_gpu={0: True, 1: True}, kernel="6.8.0-45-generic", unasked=why)
    found = judge_gdr("n1", unasked, hcas, gpus)
    assert found.status is ERROR
    assert found.message == (
        "n1: GPUDirect RDMA cannot be judged: nvidia_peermem is not loaded, and DMA-BUF support was not read of "
        "mlx5_0, mlx5_1: libibverbs lists no RDMA device in the pod"
    )
    nothing = judge_gdr("n1", GdrFacts(), hcas, gpus)
    assert nothing.status is ERROR
    assert "was not read of GPU [0, 1], mlx5_0, mlx5_1, the kernel release (the probe recorded no reason)" in (
        nothing.message
    )
    refused = unasked.model_copy(update={"dmabuf_gpu": {0: True, 1: False}})
    assert judge_gdr("n1", refused, hcas, gpus).status is FAIL
    old = unasked.model_copy(update={"dmabuf_nic": dict.fromkeys(hcas, True), "kernel": "5.4.0-200-generic"})
    assert judge_gdr("n1", old, hcas, gpus).status is FAIL


# ---- fabric.nccl_transport -----------------------------------------------------------------------------------


def channels(transport: str, gdr: bool, ranks: int = 4) -> list[NcclChannel]:
    return [
        NcclChannel(
            channel=0,
            src_rank=r,
            src_dev=0,
            dst_rank=(r + 2) % ranks,
            dst_dev=0,
            direction="send",
            transport=transport,
            gdr=gdr,
        )
        for r in range(ranks)
    ]


def ring(transport: NcclTransport, nodes: list[str] | None = None) -> list[Collective]:
    return [Collective(nodes or ["n1", "n2"], 2, transport)]


def test_nccl_over_ib_with_gdr_passes_and_a_socket_fallback_fails() -> None:
    nodes = ["n1", "n2"]
    good = NcclTransport(network="IB", channels=channels("NET/IB", True), lines=200)
    assert judge_transport("train", ring(good), nodes).status is PASS
    socket = NcclTransport(network="Socket", channels=channels("NET/Socket", False), lines=200)
    found = judge_transport("train", ring(socket), nodes)
    assert found.status is FAIL
    assert "fell back to TCP sockets (NET/Socket) on n1, n2" in found.message


def test_the_node_that_fell_back_to_sockets_is_the_one_with_no_rdma_collective_at_all() -> None:
    """n3 fell back: both pairs it is in ran over sockets; n1 and n2 ran over IB in their own pair."""
    ib = NcclTransport(network="IB", channels=channels("NET/IB", True), lines=200)
    socket = NcclTransport(network="Socket", channels=channels("NET/Socket", False), lines=200)
    pairs = [Collective(["n1", "n2"], 2, ib), Collective(["n1", "n3"], 2, socket), Collective(["n2", "n3"], 2, socket)]
    found = judge_transport("train", pairs, ["n1", "n2", "n3"])
    assert found.status is FAIL
    assert found.message.endswith("on n3: no RDMA on their channels")


def test_nccl_without_gdrdma_fails_unless_the_nodes_gdr_check_explains_it() -> None:
    nodes = ["n1", "n2"]
    mixed = channels("NET/IB", True)[:2] + channels("NET/IB", False)[2:]  # ranks 2, 3: node n2
    transport = NcclTransport(network="IB", channels=mixed, lines=200)
    found = judge_transport("train", ring(transport), nodes)
    assert found.status is FAIL
    assert found.message.endswith("on n2")
    # a [receive] line is the receiver's: n1 receiving from n2 with GDR does not make n2's side GDR
    received = NcclChannel(
        channel=1, src_rank=2, src_dev=0, dst_rank=0, dst_dev=0, direction="receive", transport="NET/IB", gdr=True
    )
    both = transport.model_copy(update={"channels": [*mixed, received]})
    assert judge_transport("train", ring(both), nodes).message.endswith("on n2")
    covered = judge_transport("train", ring(transport), nodes, gdr_off=["n2"])
    assert covered.status is SKIP
    assert covered.cause == "fabric.gdr@n2"


def test_nodes_no_collective_left_nccl_output_for_cannot_be_judged() -> None:
    assert judge_transport("train", ring(NcclTransport(lines=0)), ["n1", "n2"]).status is ERROR
    good = NcclTransport(network="IB", channels=channels("NET/IB", True), lines=200)
    found = judge_transport("train", ring(good), ["n1", "n2", "n3"])
    assert found.status is ERROR
    assert found.message.endswith("was read for node n3")  # a sweep: it said "for 1 nodes"
    some = judge_transport("train", ring(good), ["n1", "n2", *(f"m{i}" for i in range(7))]).message
    assert some.endswith("for 7 nodes (m0, m1, m2, m3, m4 and 2 more)")


# ---- fabric.rdma_bw: isolation by topology -------------------------------------------------------------------

NODES = [f"n{i:02d}" for i in range(1, 17)]
RACKS = {n: "r1" if i < 8 else "r2" for i, n in enumerate(NODES)}


def round_robin(nodes: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]


def figures(rail: int, slow: dict[frozenset[str], float], rack_slow: bool = False) -> list[PairFigure]:
    rng = random.Random(rail)
    out = []
    for a, b in round_robin(NODES):
        gbps = 385 * (1 + rng.gauss(0, 0.01))
        if rack_slow and RACKS[a] != RACKS[b]:
            gbps *= 0.6
        gbps *= slow.get(frozenset((a, b)), 1.0)
        out.append(PairFigure(rail, a, b, gbps))
    return out


def test_three_faults_on_a_16_node_two_rack_fabric_are_three_causes() -> None:
    """A bad cable on rail 3 of n05 (every pair it is in slow), a slow link between the racks (every pair across
    them slow, on every rail) and one slow link between n10 and n14 on rail 5: each is found once, at its level."""
    bad_cable = {frozenset(("n05", n)): 0.5 for n in NODES if n != "n05"}
    bad_link = {frozenset(("n10", "n14")): 0.7}
    found: dict[str, set[object]] = {"racks": set(), "nodes": set(), "links": set()}
    for rail in range(8):
        slow = bad_cable if rail == 3 else bad_link if rail == 5 else {}
        iso = isolate_rail(rail, figures(rail, slow, rack_slow=True), 360.0, NODES, RACKS)
        found["racks"] |= set(iso.racks)
        found["nodes"] |= {(n, rail) for n in iso.nodes}
        found["links"] |= {(n, rail, p.peer(n)) for n, ps in iso.links.items() for p in ps}
        for p in iso.pairs:  # every slow pair is covered by exactly one cause
            assert (p.a, p.b) in iso.cause or not iso.slow(p)
    assert found == {"racks": {("r1", "r2")}, "nodes": {("n05", 3)}, "links": {("n10", 5, "n14")}}


def test_a_port_that_is_down_covers_its_pairs_and_a_clean_rail_has_no_cause() -> None:
    slow = {frozenset(("n05", n)): 0.01 for n in NODES if n != "n05"}
    iso = isolate_rail(0, figures(0, slow), 360.0, NODES, RACKS, down={"n05": "fabric.port@n05[rail0]"})
    assert not iso.nodes
    assert not iso.links
    assert not iso.racks
    assert set(iso.cause.values()) == {"fabric.port@n05[rail0]"}
    clean = isolate_rail(1, figures(1, {}), 360.0, NODES, RACKS)
    assert not clean.cause


def test_a_pair_that_did_not_run_is_reported_by_its_first_node_naming_the_peer() -> None:
    pairs = [
        p if {p.a, p.b} != {"n02", "n09"} else PairFigure(0, "n02", "n09", None, "did not run") for p in figures(0, {})
    ]
    iso = isolate_rail(0, pairs, 360.0, NODES, RACKS)
    assert {n: [p.peer(n) for p in ps] for n, ps in iso.links.items()} == {"n02": ["n09"]}


# ---- what the punch list reads back of a finding ------------------------------------------------------------


def test_the_punch_list_names_rail_hca_port_and_peer_of_a_fabric_finding() -> None:
    from gpucert.acceptance.punchlist import _links, severity_of

    port_found = judge_port("gpu-node-5", 3, port(state="1: DOWN"), SPEC)
    link = {"check": "fabric.rdma_bw", "message": "gpu-node-5 rail 5 (mlx5_5/1): the link to gpu-node-9 on this rail"}
    found = [{"check": "fabric.port", "message": port_found.message}, link]
    assert _links(found) == ["rail 3 mlx5_3 port 1", "rail 5 mlx5_5 port 1 (peer gpu-node-9)"]
    assert severity_of("fabric.counters") == "hardware"
    assert severity_of("fabric.gdr") == "configuration"
    assert severity_of("pool.fabric") == "configuration"


def test_hca_firmware_against_its_pin_or_else_the_pools_majority() -> None:
    from gpucert.evaluate.rules.fabric_ports import judge_firmware

    fw = {"mlx5_0": "28.39.1002", "mlx5_1": "28.36.1010"}
    pinned = judge_firmware("n1", fw, "28.39.1002", "28.36.1010")
    assert pinned.status is FAIL
    assert pinned.message == "n1: HCA firmware mlx5_1 28.36.1010: not the pinned hca-firmware 28.39.1002"
    skewed = judge_firmware("n1", fw, None, "28.39.1002")
    assert skewed.status is FAIL
    assert skewed.message.endswith("mlx5_1 28.36.1010: where most of the pool's rail HCAs run 28.39.1002")
    assert judge_firmware("n1", dict.fromkeys(fw, "28.39.1002"), None, "28.39.1002").status is PASS
    assert judge_firmware("n1", {"mlx5_0": None}, None, None).status is ERROR


def test_nvidia_peermem_is_read_from_the_driver_daemonsets_own_container() -> None:
    from gpucert.stack.components import DEFAULT_SOURCES
    from gpucert.stack.observe import observe_stack

    node = {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    pod = {
        "metadata": {
            "name": "nvidia-driver-daemonset-x",
            "namespace": "gpu-operator",
            "labels": {"app": "nvidia-driver-daemonset"},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:570.124.06-ubuntu22.04"},
                {"name": "nvidia-peermem-ctr", "image": "nvcr.io/nvidia/driver:570.124.06-ubuntu22.04"},
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    seen = observe_stack([node], [pod], DEFAULT_SOURCES).nodes["n1"].components
    assert seen["nvidia-peermem"].version == "570.124.06"
    assert seen["driver"].version == "570.124.06"


def test_a_description_of_pairs_on_several_rails_names_each_pairs_rail() -> None:
    from gpucert.evaluate.rules.fabric_isolation import describe

    pairs = [PairFigure(0, "n1", "n9", 230.0), PairFigure(1, "n1", "n9", 232.0)]
    assert describe(pairs) == "n1 + n9 (rail 0) 230 Gb/s, n1 + n9 (rail 1) 232 Gb/s; median 231 Gb/s"
    assert describe(pairs[:1]) == "n1 + n9 230 Gb/s; median 230 Gb/s"
