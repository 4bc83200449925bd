"""probes/fabric_devinfo.py against output written in rdma-core's `ibv_devinfo` format: libibverbs/examples/
devinfo.c, print_hca_cap (linux-rdma/rdma-core v64.0-61-g691953d8d, commit 691953d8d502f54088f776c5ba2aeed0a5ac945d):
"hca_id:\\t%s", "\\t\\tport:\\t%u", "\\t\\t\\tmax_mtu:\\t\\t%s (%d)", "\\t\\t\\tactive_mtu:\\t\\t%s (%d)"
with mtu_str()'s "256".."4096" or "invalid MTU" and enum ibv_mtu's number (IBV_MTU_256 = 1 .. IBV_MTU_4096 = 5).
The fixture tests/fixtures/fabric/ibv_devinfo-mixed.txt is the project's own, written in that format:
an active InfiniBand port,
a DOWN RoCE port, an active RoCE port, and junk (an "invalid MTU", a name that disagrees with its number, a missing
active_mtu line, an MTU that is no MTU). The kernel's port sysfs has no MTU file (drivers/infiniband/core/sysfs.c),
so without ibv_devinfo an InfiniBand port's MTU is unread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucert.measure.probes.fabric_devinfo import DevinfoPorts, PortMtu, parse_devinfo, read_devinfo
from gpucert.measure.probes.fabric_sysfs import read_node_fabric, read_ports
from gpucert.measure.probes.runner import ProbePlan, run_plan
from tests.unit.test_fabric_sysfs import GPU0, NIC0, NIC1, make_hca, make_pci

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "fabric" / "ibv_devinfo-mixed.txt"


def test_every_port_block_gives_its_active_and_largest_mtu() -> None:
    found = parse_devinfo(FIXTURE.read_text())
    assert found.of("mlx5_0", 1) == PortMtu(active=4096, maximum=4096)  # InfiniBand, ACTIVE
    assert found.of("mlx5_1", 1) == PortMtu(active=1024, maximum=4096)  # RoCE, DOWN: still what the verbs say
    assert found.of("mlx5_2", 1) == PortMtu(active=4096, maximum=4096)  # RoCE, ACTIVE


@pytest.mark.parametrize(
    ("hca", "port", "why"),
    [
        ("mlx5_3", 1, "ibv_devinfo's active_mtu for mlx5_3 port 1 does not read as an MTU: 'invalid MTU (0)'"),
        ("mlx5_3", 2, "ibv_devinfo's active_mtu for mlx5_3 port 2 does not read as an MTU: '2048 (5)'"),
        ("mlx5_4", 1, "ibv_devinfo printed no active_mtu for mlx5_4 port 1"),
        ("mlx5_4", 2, "ibv_devinfo's active_mtu for mlx5_4 port 2 does not read as an MTU: '4k'"),
        ("mlx5_9", 1, "ibv_devinfo printed no port 1 of mlx5_9 (not in its output)"),
    ],
)
def test_a_port_whose_mtu_does_not_read_is_an_error_naming_the_hca_never_a_guess(hca: str, port: int, why: str) -> None:
    assert parse_devinfo(FIXTURE.read_text()).of(hca, port) == PortMtu(error=why)


def _tool(tmp_path: Path, body: str) -> tuple[str, ...]:
    tool = tmp_path / "ibv_devinfo"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)
    return (str(tool),)


def test_ibv_devinfo_failing_or_missing_is_each_ports_error(tmp_path: Path) -> None:
    gone = read_devinfo((str(tmp_path / "nowhere"),))
    assert gone.of("mlx5_0", 1).error == (
        "ibv_devinfo printed no port 1 of mlx5_0 (ibv_devinfo is not installed: install rdma-core's ibverbs-utils)"
    )
    failed = read_devinfo(_tool(tmp_path, "echo 'No IB devices found' >&2; exit 255"))
    assert (
        failed.of("mlx5_0", 1).error
        == "ibv_devinfo printed no port 1 of mlx5_0 (ibv_devinfo exited 255: No IB devices found)"
    )
    partial = read_devinfo(_tool(tmp_path, f"cat {FIXTURE}; echo 'Failed to query port 1 props' >&2; exit 1"))
    assert partial.of("mlx5_0", 1) == PortMtu(active=4096, maximum=4096)  # what it printed is still read
    assert "Failed to query port 1 props" in (partial.of("mlx5_5", 1).error or "")


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    make_hca(tmp_path, "mlx5_0", NIC0)
    make_hca(tmp_path, "mlx5_1", NIC1, roce=True, state="1: DOWN", phys_state="3: Disabled")
    make_pci(tmp_path, GPU0)
    return tmp_path


def test_the_ports_carry_ibv_devinfos_mtu_and_roce_keeps_its_ethernet_mtu(sysfs: Path) -> None:
    ib, roce = read_ports(sysfs, parse_devinfo(FIXTURE.read_text()))
    assert (ib.active_mtu, ib.max_mtu, ib.unreadable) == (4096, 4096, {})
    assert (roce.active_mtu, roce.max_mtu, roce.netdev_mtu, roce.unreadable) == (1024, 4096, 9000, {})
    unasked = read_ports(sysfs)  # sysfs alone has no MTU: unread, not guessed
    assert [(p.active_mtu, p.max_mtu, p.unreadable) for p in unasked] == [(None, None, {}), (None, None, {})]
    broken = read_ports(sysfs, DevinfoPorts({}, "ibv_devinfo exited 255: No IB devices found"))
    assert broken[0].active_mtu is None
    assert broken[0].unreadable == {
        "active_mtu": "ibv_devinfo printed no port 1 of mlx5_0 (ibv_devinfo exited 255: No IB devices found)"
    }


def test_a_fabric_plan_reads_the_mtus_with_ibv_devinfo(
    sysfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {
        "ib_write_bw": 'echo "--use_cuda=<id>"; echo "Version: 6.29"',
        "ibv_devinfo": f"cat {FIXTURE}",
    }.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("GPUCERT_SYSFS", str(sysfs))
    monkeypatch.setenv("HOME", str(tmp_path))
    plan = ProbePlan.model_validate({"run_id": "r", "node": "n1", "probes": [], "device": "numpy", "fabric": True})
    ev = run_plan(plan)
    assert ev.fabric is not None
    assert [(p.key, p.active_mtu, p.max_mtu) for p in ev.fabric.ports] == [
        ("mlx5_0/1", 4096, 4096),
        ("mlx5_1/1", 1024, 4096),
    ]
    assert read_node_fabric(sysfs, {}).ports[0].active_mtu is None  # the pairs' rail reading asks no MTU
