"""probes/fabric_sysfs.py against a sysfs tree built the way the kernel lays it out (drivers/infiniband/core/
sysfs.c for the port files and counters, drivers/pci for /sys/bus/pci/devices -> /sys/devices/pci<dom>:<bus>/...).
The values are those an NDR InfiniBand and a RoCE adapter show; the topology is a DGX-like one: each GPU and its
rail NIC under one PCIe switch, the NICs of the other socket across the CPUs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucert.measure.evidence_fabric import PciDevice
from gpucert.measure.probes.fabric_sysfs import (
    bus_id,
    counter_window,
    read_affinity,
    read_counters,
    read_gdr,
    read_node_fabric,
    read_ports,
    relation,
)
from gpucert.measure.probes.framing import parts
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.measure.probes.stream import framer, rebuild

# host bridge -> root port -> switch upstream port -> downstream port -> endpoint
GPU0 = ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
NIC0 = ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0")
GPU1 = ("pci0000:15", "0000:15:02.0", "0000:1a:00.0")  # another root port of the same host bridge
NIC1 = ("pci0000:95", "0000:95:01.0", "0000:96:00.0", "0000:97:00.0", "0000:98:00.0")  # the other socket
NUMA = {"pci0000:15": 0, "pci0000:95": 1}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_pci(root: Path, chain: tuple[str, ...]) -> Path:
    device = root.joinpath("devices", *chain)
    _write(device / "numa_node", str(NUMA[chain[0]]))
    link = root / "bus" / "pci" / "devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(device, link.parent))
    return device


def make_hca(root: Path, name: str, chain: tuple[str, ...], *, roce: bool = False, **files: str) -> Path:
    device = make_pci(root, chain)
    hca = root / "class" / "infiniband" / name
    hca.mkdir(parents=True)
    (hca / "device").symlink_to(device)
    _write(hca / "fw_ver", "28.39.1002")
    _write(hca / "board_id", "MT_0000000838")
    port = hca / "ports" / "1"
    defaults = {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "Ethernet" if roce else "InfiniBand",
    }
    for f, text in {**defaults, **files}.items():
        _write(port / f, text)
    counters = {"symbol_error": "0", "link_downed": "1", "port_xmit_data": "123456789", "VL15_dropped": "N/A (no PMA)"}
    for f, text in counters.items():
        _write(port / "counters" / f, text)
    _write(port / "hw_counters" / "out_of_sequence", "7")
    if roce:
        netdev = f"eth{name[-1]}"
        _write(device / "net" / netdev / "dev_port", "0")
        _write(root / "class" / "net" / netdev / "mtu", "9000")
        _write(port / "gids" / "0", "fe80:0000:0000:0000:0000:0000:0000:0001")
        _write(port / "gids" / "1", "0000:0000:0000:0000:0000:0000:0000:0000")
        _write(port / "gids" / "3", "0000:0000:0000:0000:0000:ffff:0a00:0001")
        _write(port / "gid_attrs" / "types" / "3", "RoCE v2")
        _write(port / "gid_attrs" / "ndevs" / "3", netdev)
    return port


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    make_hca(tmp_path, "mlx5_0", NIC0)
    make_hca(tmp_path, "mlx5_1", NIC1, roce=True, rate="200 Gb/sec (4X HDR)", state="1: DOWN", phys_state="3: Disabled")
    make_pci(tmp_path, GPU0)
    make_pci(tmp_path, GPU1)
    _write(tmp_path / "module" / "nvidia_peermem" / "version", "570.124.06")
    return tmp_path


def test_every_port_is_read_as_the_kernel_writes_it(sysfs: Path) -> None:
    ib, roce = read_ports(sysfs)
    assert (ib.key, ib.state, ib.phys_state, ib.rate, ib.rate_gbps) == (
        "mlx5_0/1",
        "4: ACTIVE",
        "5: LinkUp",
        "400 Gb/sec (4X NDR)",
        400.0,
    )
    assert (ib.link_layer, ib.fw_ver, ib.pci_address, ib.numa_node, ib.netdev) == (
        "InfiniBand",
        "28.39.1002",
        "0000:19:00.0",
        0,
        None,
    )
    assert (roce.state, roce.phys_state, roce.rate_gbps, roce.link_layer) == (
        "1: DOWN",
        "3: Disabled",
        200.0,
        "Ethernet",
    )
    assert (roce.netdev, roce.netdev_mtu) == ("eth1", 9000)
    # the zero GID is an empty slot; the RoCE v2 entry carries its type and interface
    assert [(g.index, g.type, g.netdev) for g in roce.gids] == [(0, None, None), (3, "RoCE v2", "eth1")]


def test_a_port_file_that_cannot_be_read_is_named_not_guessed(sysfs: Path) -> None:
    (sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "rate").unlink()
    ib = read_ports(sysfs)[0]
    assert ib.rate is None
    assert ib.rate_gbps is None
    assert "rate" in ib.unreadable


def test_no_rdma_adapter_is_no_port(tmp_path: Path) -> None:
    assert read_ports(tmp_path) == []


def test_counters_around_a_window_keep_both_readings_and_what_the_adapter_does_not_keep(sysfs: Path) -> None:
    before = read_counters(sysfs, now="2026-01-01T00:00:00+00:00")
    _write(sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error", "42")
    after = read_counters(sysfs, now="2026-01-01T00:01:00+00:00")
    window = counter_window("rdma_bw", before, after)
    assert window.deltas("mlx5_0/1") == {"link_downed": 0, "port_xmit_data": 0, "symbol_error": 42}
    assert window.deltas("mlx5_1/1", hw=True) == {"out_of_sequence": 0}
    assert window.unreadable["mlx5_0/1/VL15_dropped"] == "N/A (no PMA)"
    assert window.seconds() == 60.0


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (GPU0, NIC0, "PIX"),  # one switch: down, up, down
        (GPU0, GPU0, "PIX"),
        (GPU1, NIC0, "PHB"),  # two root ports of one host bridge
        (GPU0, NIC1, "SYS"),  # across the sockets
        (
            (
                "pci0000:15",
                "0000:15:01.0",
                "0000:16:00.0",
                "0000:17:00.0",
                "0000:20:00.0",
                "0000:21:00.0",
                "0000:22:00.0",
            ),
            NIC0,
            "PXB",  # a second switch below the first
        ),
        (
            (
                "pci0000:15",
                "0000:15:01.0",
                "0000:16:00.0",
                "0000:17:00.0",
                "0000:20:00.0",
                "0000:21:00.0",
                "0000:22:00.0",
            ),
            (
                "pci0000:15",
                "0000:15:01.0",
                "0000:16:00.0",
                "0000:17:00.0",
                "0000:20:00.0",
                "0000:21:01.0",
                "0000:23:00.0",
            ),
            "PIX",  # both under the second switch
        ),
    ],
)
def test_relation_names_the_path_as_nvidia_smi_topo_does(a: tuple[str, ...], b: tuple[str, ...], expected: str) -> None:
    assert (
        relation(PciDevice(path=list(a), numa_node=NUMA[a[0]]), PciDevice(path=list(b), numa_node=NUMA[b[0]]))
        == expected
    )


def test_two_host_bridges_of_one_numa_node_are_node() -> None:
    a = PciDevice(path=["pci0000:15", "0000:15:01.0", "0000:16:00.0"], numa_node=0)
    b = PciDevice(path=["pci0000:37", "0000:37:01.0", "0000:38:00.0"], numa_node=0)
    assert relation(a, b) == "NODE"


def test_affinity_reads_every_gpu_against_every_hca_from_nvml_addresses(sysfs: Path) -> None:
    gpus = {0: "00000000:18:00.0", 1: "00000000:1A:00.0", 2: "00000000:CC:00.0"}
    pci, pairs, bad = read_affinity(sysfs, gpus, {"mlx5_0": "0000:19:00.0", "mlx5_1": "0000:98:00.0"})
    assert pci["0000:18:00.0"].path == list(GPU0)
    assert [(p.gpu, p.hca, p.relation) for p in pairs] == [
        (0, "mlx5_0", "PIX"),
        (0, "mlx5_1", "SYS"),
        (1, "mlx5_0", "PHB"),
        (1, "mlx5_1", "SYS"),
        (2, "mlx5_0", None),  # a GPU sysfs does not have: no relation, and said why
        (2, "mlx5_1", None),
    ]
    assert "0000:cc:00.0" in bad


def test_bus_id_is_sysfs_spelling() -> None:
    assert bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert bus_id("1a:00.0") == "0000:1a:00.0"


def test_gdr_is_the_peer_memory_file_nccl_looks_for(sysfs: Path, tmp_path: Path) -> None:
    facts = read_gdr(sysfs)
    assert facts.peermem == ["/sys/module/nvidia_peermem/version"]
    assert facts.peermem_version == "570.124.06"
    legacy = tmp_path / "legacy"
    _write(legacy / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version", "1.3")
    assert read_gdr(legacy).peermem == ["/sys/kernel/mm/memory_peers/nv_mem/version"]
    assert read_gdr(tmp_path / "none").peermem == []


def test_the_node_fabric_puts_it_together(sysfs: Path) -> None:
    fabric = read_node_fabric(sysfs, {0: "00000000:18:00.0"})
    assert [p.key for p in fabric.ports] == ["mlx5_0/1", "mlx5_1/1"]
    assert [(a.hca, a.relation) for a in fabric.affinity] == [("mlx5_0", "PIX"), ("mlx5_1", "SYS")]
    assert fabric.gdr is not None
    assert fabric.gdr.peermem
    assert fabric.counters is None


def test_a_fabric_plan_reads_the_node_fabric_into_its_evidence_and_its_stream(
    sysfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {"ib_write_bw": 'echo "--use_cuda=<id>"; echo "Version: 6.29"', "ibv_devinfo": "true"}.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("GPUCERT_SYSFS", str(sysfs))
    monkeypatch.setenv("HOME", str(tmp_path))
    plan = ProbePlan.model_validate({"run_id": "r", "node": "n1", "probes": [], "device": "numpy", "fabric": True})
    out: list[str] = []
    ev = run_plan(plan, emit=framer(out.append))
    assert [s.step for s in ev.preflight] == ["home", "rdma"]
    assert ev.fabric is not None
    assert [p.key for p in ev.fabric.ports] == ["mlx5_0/1", "mlx5_1/1"]
    rebuilt = rebuild(parts("".join(out)), "killed")
    assert rebuilt is not None
    assert rebuilt.fabric == ev.fabric  # a pod killed after the reading still hands it over
    plain = run_plan(plan.model_copy(update={"fabric": False}))
    assert plain.fabric is None
