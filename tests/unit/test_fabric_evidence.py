"""The fabric part of the evidence contract (measure/evidence_fabric.py): raw readings round-trip through the
strict reader, evidence written before it existed still reads, and the window's helpers only subtract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.measure.evidence import (
    CounterWindow,
    FabricEvidence,
    GdrFacts,
    GidEntry,
    GpuNic,
    HcaPort,
    NcclChannel,
    NcclNetDevice,
    NcclTransport,
    NodeEvidence,
    NodeFabric,
    PciDevice,
    RdmaBandwidth,
    read_evidence,
    read_fabric,
    write_document,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z"


def _fabric() -> NodeFabric:
    port = HcaPort(
        hca="mlx5_0",
        port=1,
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate="400 Gb/sec (4X NDR)",
        rate_gbps=400.0,
        link_layer="Ethernet",
        fw_ver="28.39.1002",
        pci_address="0000:1b:00.0",
        numa_node=0,
        netdev="eth2",
        netdev_mtu=9000,
        gids=[GidEntry(index=3, gid="0000:0000:0000:0000:0000:ffff:0a00:0001", type="RoCE v2", netdev="eth2")],
        gid_index=3,
    )
    window = CounterWindow(
        load="rdma_bw",
        started=T0,
        finished=T1,
        before={"mlx5_0/1": {"symbol_error": 5, "link_downed": 1, "port_rcv_errors": 0}},
        after={"mlx5_0/1": {"symbol_error": 25, "link_downed": 1}},
        hw_before={"mlx5_0/1": {"out_of_sequence": 2}},
        hw_after={"mlx5_0/1": {"out_of_sequence": 9}},
    )
    pci = {"0000:1b:00.0": PciDevice(path=["pci0000:17", "0000:17:01.0", "0000:1b:00.0"], numa_node=0)}
    return NodeFabric(
        ports=[port],
        counters=window,
        pci=pci,
        affinity=[GpuNic(gpu=0, pci_bus_id="0000:19:00.0", hca="mlx5_0", relation="PIX")],
        gdr=GdrFacts(peermem=["/sys/module/nvidia_peermem/version"], dmabuf_gpu={0: True}, dmabuf_nic={"mlx5_0": True}),
        tools={"ib_write_bw": "6.29"},
    )


def _node(fabric: NodeFabric | None) -> NodeEvidence:
    return NodeEvidence(node="n1", target="simulated", probe_version="1", started=T0, finished=T1, fabric=fabric)


def test_a_node_fabric_reads_back(tmp_path: Path) -> None:
    ev = _node(_fabric())
    assert read_evidence(write_document(tmp_path / "n1.json", ev)) == ev


def test_evidence_without_a_fabric_still_reads(tmp_path: Path) -> None:
    doc = json.loads(_node(None).model_dump_json(by_alias=True))
    del doc["fabric"]  # as written before the fabric existed
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    assert read_evidence(path).fabric is None


def test_a_counter_given_as_a_string_is_refused(tmp_path: Path) -> None:
    doc = json.loads(_node(_fabric()).model_dump_json(by_alias=True))
    doc["fabric"]["counters"]["after"]["mlx5_0/1"]["symbol_error"] = "25"
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"fabric\.counters\.after\.mlx5_0/1\.symbol_error"):
        read_evidence(path)


def test_an_unknown_relation_is_refused(tmp_path: Path) -> None:
    doc = json.loads(_node(_fabric()).model_dump_json(by_alias=True))
    doc["fabric"]["affinity"][0]["relation"] = "NV12"
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"fabric\.affinity\.0\.relation"):
        read_evidence(path)


def test_the_window_subtracts_counters_read_at_both_ends() -> None:
    window = _fabric().counters
    assert window is not None
    assert window.deltas("mlx5_0/1") == {"symbol_error": 20, "link_downed": 0}  # port_rcv_errors: read once
    assert window.deltas("mlx5_0/1", hw=True) == {"out_of_sequence": 7}
    assert window.deltas("mlx5_1/1") == {}
    assert window.seconds() == 600.0


@pytest.mark.parametrize(("started", "finished"), [(T1, T0), ("yesterday", T1), ("2026-01-01T00:00:00", T1)])
def test_a_window_whose_times_are_not_in_order_has_no_length(started: str, finished: str) -> None:
    assert CounterWindow(load="rdma_bw", started=started, finished=finished).seconds() is None


def test_a_counter_reset_in_the_window_is_a_negative_delta_not_zero() -> None:
    window = CounterWindow(
        load="x", started=T0, finished=T1, before={"p/1": {"link_downed": 3}}, after={"p/1": {"link_downed": 0}}
    )
    assert window.deltas("p/1") == {"link_downed": -3}


def test_a_pair_carries_its_rdma_and_nccl_transport(tmp_path: Path) -> None:
    pair = FabricEvidence(
        run_id="r",
        target="simulated",
        probe_version="1",
        started=T0,
        finished=T1,
        nodes=["a", "b"],
        gpus_per_node=8,
        rdma=[
            RdmaBandwidth(
                rail=0, client="a", server="b", client_hca="mlx5_0/1", server_hca="mlx5_0/1", gpu=0, samples=[390.1]
            )
        ],
        transport=NcclTransport(
            network="IB",
            devices=[NcclNetDevice(index=0, hca="mlx5_0", port=1, link_layer="IB")],
            channels=[
                NcclChannel(
                    channel=0,
                    conn=0,
                    src_rank=0,
                    src_dev=0,
                    dst_rank=8,
                    dst_dev=0,
                    direction="send",
                    transport="NET/IB",
                    net_dev=0,
                    gdr=True,
                )
            ],
            lines=120,
        ),
    )
    assert read_fabric(write_document(tmp_path / "pair.json", pair)) == pair


@pytest.mark.parametrize(
    ("rate", "gbps", "words"),
    [
        ("400 Gb/sec (4X NDR)", float("nan"), "nan is no rate"),
        ("400 Gb/sec (4X NDR)", float("inf"), "inf is no rate"),
        ("200 Gb/sec (4X HDR)", 400.0, "400 is not the number at the head of rate '200 Gb/sec (4X HDR)'"),
        (None, 400.0, "400 is not the number at the head of rate None"),
        ("garbled", 400.0, "not the number at the head of rate 'garbled'"),
    ],
)
def test_a_port_rate_not_read_off_its_text_is_refused(
    tmp_path: Path, rate: str | None, gbps: float, words: str
) -> None:
    """rate_gbps is the number at the head of the kernel's `rate` (Linux drivers/infiniband/core/sysfs.c rate_show:
    "%d%s Gb/sec (%dX%s)"): a NaN passed fabric.port (no comparison with NaN is true), and 400 beside
    "200 Gb/sec (4X HDR)" passed a port trained down to HDR."""
    doc = json.loads(_node(_fabric()).model_dump_json(by_alias=True))
    doc["fabric"]["ports"][0].update(rate=rate, rate_gbps=gbps)
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"fabric\.ports\.0\.rate_gbps") as refused:
        read_evidence(path)
    assert words in str(refused.value)


@pytest.mark.parametrize(("rate", "gbps"), [("2.5 Gb/sec (1X SDR)", 2.5), ("800 Gb/sec (4X XDR)", 800.0), ("x", None)])
def test_a_port_rate_read_off_its_text_reads(tmp_path: Path, rate: str, gbps: float | None) -> None:
    """rate_show writes tenths as ".5" (2.5 Gb/s SDR at 1X); a `rate` that does not read has no rate_gbps (null)."""
    doc = json.loads(_node(_fabric()).model_dump_json(by_alias=True))
    doc["fabric"]["ports"][0].update(rate=rate, rate_gbps=gbps)
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    fabric = read_evidence(path).fabric
    assert fabric is not None
    assert fabric.ports[0].rate_gbps == gbps
