"""probes/fabric_pair.py: the pair's two processes (threads here, joined by a socket pair as the rendezvous
connection joins the pods) run a fake `ib_write_bw` per rail that answers in perftest 6.29's format (server: no
peer argument; client: the server's host last), and process 0 returns the pair's RDMA per rail."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from gpucert.measure.evidence import FabricEvidence
from gpucert.measure.evidence_fabric import GidEntry, GpuNic, HcaPort, NodeFabric
from gpucert.measure.probes import fabric_collective
from gpucert.measure.probes.fabric_collective import CollectiveFabric
from gpucert.measure.probes.fabric_pair import PairPlan, Rail, command, measure_pair, rails_of
from gpucert.measure.probes.multinode import run_multinode
from gpucert.measure.probes.probe_plan import FabricRails
from gpucert.measure.probes.rendezvous import Rendezvous, recv_msg, send_msg
from gpucert.measure.probes.runner import ProbePlan

from .test_fabric_sysfs import GPU0, NIC0, NIC1, make_hca, make_pci
from .test_multinode_watchdog import free_port

FAKE = """#!/bin/sh
for a; do last=$a; done
if [ "$last" != "server-0.pair" ]; then sleep 0.2; exit 0; fi
case " $* " in *" -d mlx5_1 "*) echo "Couldn't allocate MR with error=14" >&2; exit 1;; esac
echo "Picking device No. 0"
echo " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
echo " 1048576    20000          390.12             389.87\t\t     0.046477"
"""


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    make_hca(root, "mlx5_0", NIC0)
    make_hca(root, "mlx5_1", NIC1)
    make_pci(root, GPU0)
    return root


def test_the_pair_measures_every_rail_from_the_gpu_nearest_its_nic(
    sysfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_write_bw").write_text(FAKE)
    (bin_dir / "ib_write_bw").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    a, b = socket.socketpair()
    plan = PairPlan(reps=3, duration_s=1, timeout_s=20)
    gpus = {0: "0000:18:00.0"}
    results: dict[int, object] = {}

    def process(rank: int, sock: socket.socket) -> None:
        link = (lambda data: send_msg(sock, data), lambda: recv_msg(sock))
        results[rank] = measure_pair(rank, ("server", "client"), link, sysfs, gpus, plan, "server-0.pair")

    threads = [threading.Thread(target=process, args=(r, s)) for r, s in ((0, a), (1, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    a.close()
    b.close()
    assert results[1] is None
    rdma = results[0]
    assert isinstance(rdma, list)
    assert [(r.rail, r.client, r.server, r.client_hca, r.gpu) for r in rdma] == [
        (0, "client", "server", "mlx5_0/1", 0),
        (1, "client", "server", "mlx5_1/1", 0),
    ]
    assert rdma[0].samples == [389.87] * 3
    assert rdma[0].error is None
    assert rdma[1].samples == []
    assert rdma[1].error == "ib_write_bw: Couldn't allocate MR with error=14"


def test_the_command_is_perftests() -> None:
    rail = Rail(index=3, hca="mlx5_3", port=1, gpu=5, gid_index=3)
    plan = PairPlan(duration_s=2, size=1 << 20)
    assert command(rail, plan, None) == [
        *("ib_write_bw", "-d", "mlx5_3", "-i", "1", "-p", "18518", "-s", "1048576", "-D", "2"),
        *("--report_gbits", "-F", "-x", "3", "--use_cuda=5"),
    ]
    assert command(rail, plan, "peer")[-1] == "peer"


def test_a_rails_gpu_is_the_nearest_and_a_roce_rail_uses_its_roce_v2_gid() -> None:
    fabric = NodeFabric(
        ports=[
            HcaPort(hca="mlx5_1", port=1, link_layer="Ethernet", gids=[GidEntry(index=3, gid="x", type="RoCE v2")]),
            HcaPort(hca="mlx5_0", port=1, link_layer="InfiniBand"),
        ],
        affinity=[
            GpuNic(gpu=0, pci_bus_id="a", hca="mlx5_0", relation="PIX"),
            GpuNic(gpu=1, pci_bus_id="b", hca="mlx5_0", relation="SYS"),
            GpuNic(gpu=0, pci_bus_id="a", hca="mlx5_1", relation="SYS"),
            GpuNic(gpu=1, pci_bus_id="b", hca="mlx5_1", relation="PXB"),
        ],
    )
    assert rails_of(fabric) == [Rail(0, "mlx5_0", 1, 0, None), Rail(1, "mlx5_1", 1, 1, 3)]


CLIENT_OR_SERVER = """#!/bin/sh
for a; do last=$a; done
case "$last" in -*) sleep 0.2; exit 0;; esac
echo " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
echo " 1048576    20000          380.00             379.50\t\t     0.046477"
"""


def test_a_pair_of_processes_with_a_fabric_plan_brings_its_rdma_and_both_nodes_counters(
    sysfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_multinode over two processes (the pair's Job): the pair's RDMA per rail at process 0, and each node's
    counters read around the pair's traffic, in the one document."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_write_bw").write_text(CLIENT_OR_SERVER)
    (bin_dir / "ib_write_bw").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("GPUCERT_SYSFS", str(sysfs))
    monkeypatch.setattr(fabric_collective, "PairPlan", lambda: PairPlan(reps=2, duration_s=1, timeout_s=20))
    plan = ProbePlan(
        run_id="r",
        node="x",
        device="numpy",
        gpus=1,
        budget={"min_reps": 2, "warmup_s": 0, "measure_s": 0},
        sizes={"nccl_sizes": [1 << 12]},
        fabric=True,
    )
    port = free_port()
    out: dict[int, object] = {}

    def rank(r: int) -> None:
        node_plan = plan.model_copy(update={"node": f"node-{r}"})
        try:
            out[r] = run_multinode(node_plan, rank=r, processes=2, host="127.0.0.1", port=port, timeout_s=30)
        except Exception as exc:  # the assertion names it
            out[r] = exc

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    doc = out[0]
    assert isinstance(doc, FabricEvidence), doc
    assert out[1] is None, out[1]
    assert doc.errors == []
    assert [(r.rail, r.client, r.server, r.samples) for r in doc.rdma] == [
        (0, "node-1", "node-0", [379.5, 379.5]),
        (1, "node-1", "node-0", [379.5, 379.5]),
    ]
    assert set(doc.counters) == {"node-0", "node-1"}
    assert doc.counters["node-1"].deltas("mlx5_0/1")["symbol_error"] == 0


def _log(rank: int, via: str) -> str:
    return "\n".join(
        [
            f"host{rank}:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.{rank}<0>",
            f"host{rank}:1:1 [0] NCCL INFO Using network {'Socket' if 'Socket' in via else 'IB'}",
            f"host{rank}:1:2 [0] NCCL INFO Channel 00/0 : {rank}[0] -> {(rank + 1) % 3}[0] [send] via {via}",
        ]
    )


def test_each_process_reads_its_own_nccl_log_and_process_0_gathers_every_node(sysfs: Path) -> None:
    """NCCL writes each process's INFO lines to the file NCCL_DEBUG_FILE names (%h host, %p pid: NCCL 2.30
    src/debug.cc); each process parses its own and process 0 holds the collective's whole account, with every
    node's counters window. Three processes: no pair, so no RDMA."""
    port = free_port()
    vias = {0: "NET/IB/0/GDRDMA", 1: "NET/Socket/0", 2: "NET/IB/0/GDRDMA"}
    results: dict[int, object] = {}

    def process(rank: int) -> None:
        env = {"GPUCERT_SYSFS": str(sysfs)}
        fabric = CollectiveFabric(f"node-{rank}", on_gpu=True, env=env)
        assert env["NCCL_DEBUG"] == "INFO"
        assert fabric.logs is not None
        assert env["NCCL_DEBUG_FILE"] == str(fabric.logs / "nccl.%h.%p.log")
        (fabric.logs / f"nccl.host{rank}.4242.log").write_text(_log(rank, vias[rank]))  # as NCCL would name it
        rdzv = Rendezvous(rank, 3, "127.0.0.1", port, 20).join(f"node-{rank}", 1, lambda: None)
        try:
            fabric.start(rdzv, [])
            results[rank] = fabric.finish(rdzv)
        finally:
            rdzv.close()

    threads = [threading.Thread(target=process, args=(r,), daemon=True) for r in (0, 1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results[1] == {}
    assert results[2] == {}
    found = results[0]
    assert isinstance(found, dict)
    assert set(found["counters"]) == {"node-0", "node-1", "node-2"}
    transport = found["transport"]
    assert transport.network == "Socket"  # one process fell back: the collective did
    assert sorted((c.src_rank, c.transport, c.gdr) for c in transport.channels) == [
        (0, "NET/IB", True),
        (1, "NET/Socket", False),
        (2, "NET/IB", True),
    ]
    assert sorted(d.node for d in transport.devices) == ["node-0", "node-1", "node-2"]
    assert found["rdma"] == []


def test_the_rails_are_the_pools_as_the_evaluator_reads_them() -> None:
    """The spec's named HCAs in rail order (a missing one leaves its index empty), else the link layer's ports in
    natural order: mlx5_2 before mlx5_10, a frontend Ethernet port out of an InfiniBand fabric's rails."""
    fabric = NodeFabric(
        ports=[
            HcaPort(hca=name, port=1, link_layer="Ethernet" if name == "mlx5_bond_0" else "InfiniBand")
            for name in ("mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_3")
        ]
    )
    found = rails_of(fabric, FabricRails(link_layer="InfiniBand"))
    assert [(r.index, r.hca) for r in found] == [(0, "mlx5_2"), (1, "mlx5_3"), (2, "mlx5_10")]
    named = rails_of(fabric, FabricRails(hcas=["mlx5_3", "mlx5_7", "mlx5_10"], link_layer="InfiniBand"))
    assert [(r.index, r.hca) for r in named] == [(0, "mlx5_3"), (2, "mlx5_10")]
