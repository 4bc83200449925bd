"""The parsers of the fabric probes against output written in the tools' own formats: perftest 6.29's
ib_write_bw table (linux-rdma/perftest tag 26.04.17, src/perftest_parameters.h RESULT_FMT/RESULT_FMT_G/REPORT_FMT,
src/cuda_memory.c "Picking device No. %d") and NCCL 2.30.7's INFO lines (NVIDIA/nccl src/transport/net.cc
"Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s", src/transport/net_ib/init.cc "NET/IB : Using",
src/init.cc "Using network %s", src/transport/shm.cc and p2p.cc). The fixtures in tests/fixtures/fabric/ are the
project's own, written line for line in those formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.measure.probes.fabric_nccl import parse_nccl_transport
from gpucert.measure.probes.fabric_perftest import MIB_PER_S_IN_GBPS, parse_ib_write_bw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_ib_write_bw_from_gpu_memory_in_gbits() -> None:
    result = parse_ib_write_bw(_text("ib_write_bw-cuda-ndr.txt"))
    assert result.error is None
    assert result.cuda_device == 0  # the buffer was in GPU 0's memory
    assert (result.mtu, result.link_type) == (4096, "IB")
    assert result.largest is not None
    assert (result.largest.size_bytes, result.largest.iterations) == (1048576, 20000)
    assert (result.largest.peak_gbps, result.largest.average_gbps) == (390.12, 389.87)


def test_ib_write_bw_in_mib_is_converted_to_gbits_and_the_largest_message_is_the_figure() -> None:
    result = parse_ib_write_bw(_text("ib_write_bw-host-mib-sweep.txt"))
    assert result.cuda_device is None  # host memory: no GPU was picked
    assert [r.size_bytes for r in result.rows] == [65536, 1048576]
    assert result.largest is not None
    assert result.largest.average_gbps == pytest.approx(11471.55 * 2**20 * 8 / 1e9)
    assert pytest.approx(0.008388608) == MIB_PER_S_IN_GBPS
    assert (result.mtu, result.link_type) == (1024, "Ethernet")


def test_ib_write_bw_that_did_not_run_says_why() -> None:
    result = parse_ib_write_bw(_text("ib_write_bw-no-peer.txt"))
    assert result.rows == []
    assert result.largest is None
    assert result.error is not None
    assert "Unable to init the socket connection" in result.error
    assert parse_ib_write_bw("").error == "ib_write_bw printed nothing"


def test_rows_before_the_header_are_not_results() -> None:
    assert parse_ib_write_bw(" 65536      5000   1.0  1.0  0.1\n").rows == []


def test_nccl_channels_over_infiniband_with_gdr() -> None:
    t = parse_nccl_transport(_text("nccl-info-2x8-ib.txt").splitlines(), node="gpu-node-1")
    assert t.network == "IB"
    assert [(d.index, d.hca, d.port, d.link_layer) for d in t.devices] == [
        (0, "mlx5_0", 1, "IB"),
        (1, "mlx5_1", 1, "IB"),
        (2, "mlx5_2", 1, "IB"),
        (3, "mlx5_3", 1, "IB"),
        (4, "mlx5_4", 1, "IB"),  # ":2" a rail id
        (5, "mlx5_5", 1, "RoCE"),  # "::1" a plane id
    ]
    assert {d.node for d in t.devices} == {"gpu-node-1"}
    net = [c for c in t.channels if c.transport.startswith("NET/")]
    assert [(c.channel, c.src_rank, c.dst_rank, c.direction, c.net_dev, c.gdr) for c in net] == [
        (0, 7, 8, "send", 0, True),
        (0, 15, 0, "receive", 0, True),
        (1, 7, 8, "send", 3, True),
    ]
    assert (net[2].proxy_rank, net[2].shared) == (6, True)
    others = {c.transport: c.conn for c in t.channels if not c.transport.startswith("NET/")}
    assert others == {"P2P/CUMEM": 0, "SHM/direct": None}
    assert t.lines == 11


def test_a_channel_line_belongs_to_the_rank_that_logged_it() -> None:
    """net.cc prints the peer first on a receive line: "15[7] -> 0[0] [receive]" is rank 0's line, and its
    /GDRDMA says whether rank 0 receives into GPU memory directly."""
    t = parse_nccl_transport(_text("nccl-info-2x8-ib.txt").splitlines())
    net = [c for c in t.channels if c.transport.startswith("NET/")]
    assert [(c.direction, c.src_rank, c.dst_rank, c.local_rank) for c in net[:2]] == [
        ("send", 7, 8, 7),
        ("receive", 15, 0, 0),
    ]


def test_nccl_falling_back_to_sockets_is_seen() -> None:
    t = parse_nccl_transport(_text("nccl-info-2x8-socket.txt").splitlines())
    assert t.network == "Socket"
    assert t.devices == []  # the socket transport's interfaces are no RDMA devices
    assert {(c.transport, c.gdr) for c in t.channels} == {("NET/Socket", False)}


def test_a_log_without_nccl_info_lines_reads_nothing() -> None:
    t = parse_nccl_transport(["hello", "Channel 00/0 : 0[0] -> 1[0] via NET/IB/0"])  # no NCCL INFO prefix
    assert (t.channels, t.network, t.lines) == ([], None, 2)


def test_gdr_off_on_a_receiving_node_is_charged_to_that_node() -> None:
    """Two nodes of 8 ranks: node b's receive lines carry no GDRDMA (its GDR is off), a's sends do. The finding
    names b, whose log the lines are from, not a, whose rank is printed first."""
    from gpucert.evaluate.rules.fabric_transport import Collective, judge_transport
    from gpucert.measure.evidence_fabric import NcclChannel, NcclTransport

    lines = [
        NcclChannel(channel=0, conn=0, src_rank=7, src_dev=7, dst_rank=8, dst_dev=0, direction="send",
                    transport="NET/IB", net_dev=0, gdr=True),
        NcclChannel(channel=0, conn=0, src_rank=7, src_dev=7, dst_rank=8, dst_dev=0, direction="receive",
                    transport="NET/IB", net_dev=0, gdr=False),
    ]  # fmt: skip
    ring = [Collective(["a", "b"], 8, NcclTransport(network="IB", channels=lines, lines=2))]
    found = judge_transport("p", ring, ["a", "b"])
    assert found.message.endswith("on b")
    skipped = judge_transport("p", ring, ["a", "b"], gdr_off=["b"])
    assert skipped.cause == "fabric.gdr@b"
