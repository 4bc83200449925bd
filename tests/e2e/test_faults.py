"""Each fault kind of the fleet contract, alone in a fleet, fails exactly its checks on its node and GPU."""

from __future__ import annotations

import json

import pytest

from gpucert.plan.pairs_files import pairs_files

from .conftest import fleet_doc

CASES = [
    (
        {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.85},
        {("memory.bandwidth", "gpu-node-2", 3)},
    ),
    (
        {"kind": "slow", "node": "gpu-node-1", "gpu": 0, "metric": "compute.gemm.fp64", "factor": 0.8},
        {("compute.gemm.fp64", "gpu-node-1", 0)},
    ),
    (
        {"kind": "slow", "node": "gpu-node-4", "gpu": 2, "metric": "pcie.d2h", "factor": 0.5},
        {("pcie.d2h", "gpu-node-4", 2)},
    ),
    (
        {"kind": "slow", "node": "gpu-node-1", "gpu": 6, "metric": "p2p.bandwidth", "factor": 0.7},
        {("p2p.bandwidth", "gpu-node-1", 6)},
    ),
    (
        {"kind": "slow", "node": "gpu-node-3", "metric": "nccl.all_reduce", "factor": 0.8},
        {("nccl.all_reduce", "gpu-node-3", None)},
    ),
    (  # one node's slow NIC slows the ring across nodes: one finding for the set, not per node
        {"kind": "slow", "node": "gpu-node-2", "metric": "nccl.all_reduce.multinode", "factor": 0.8},
        {("nccl.all_reduce.multinode", None, None)},
    ),
    (  # slow in 30% of its samples: the median hides it, the count of slow samples does not
        {
            "kind": "intermittent",
            "node": "gpu-node-2",
            "gpu": 6,
            "metric": "memory.bandwidth",
            "factor": 0.7,
            "fraction": 0.3,
        },
        {("stability.memory.bandwidth", "gpu-node-2", 6)},
    ),
    (  # slowing over the run, to -15% at the last sample: its median is behind its peers
        {"kind": "drift", "node": "gpu-node-1", "gpu": 4, "metric": "compute.gemm.tf32", "factor": 0.85},
        {("straggler.compute.gemm.tf32", "gpu-node-1", 4)},
    ),
    (  # every GPU of the node: one finding for the node
        {"kind": "slow", "node": "gpu-node-3", "metric": "compute.gemm.fp32", "factor": 0.93},
        {("straggler.compute.gemm.fp32", "gpu-node-3", None)},
    ),
    ({"kind": "ecc", "node": "gpu-node-1", "gpu": 5, "uncorrected": 2}, {("health.ecc", "gpu-node-1", 5)}),
    ({"kind": "ecc", "node": "gpu-node-1", "gpu": 4, "corrected": 5000}, {("health.ecc", "gpu-node-1", 4)}),
    (
        {"kind": "remapped-rows", "node": "gpu-node-1", "gpu": 1, "failure": True},
        {("health.remapped_rows", "gpu-node-1", 1)},
    ),
    (
        {"kind": "remapped-rows", "node": "gpu-node-2", "gpu": 1, "pending": True},
        {("health.remapped_rows", "gpu-node-2", 1)},
    ),
    (
        {"kind": "pcie-link", "node": "gpu-node-1", "gpu": 2, "generation": 3, "width": 16},
        {("health.pcie_link", "gpu-node-1", 2)},
    ),
    (
        {"kind": "pcie-link", "node": "gpu-node-3", "gpu": 4, "generation": 5, "width": 8},
        {("health.pcie_link", "gpu-node-3", 4)},
    ),
    (
        {"kind": "throttle", "node": "gpu-node-4", "gpu": 7, "reason": "hw_slowdown"},
        {("health.throttle", "gpu-node-4", 7)},
    ),
    (  # 2% of the loaded time in SW thermal slowdown: within the H100 baseline's 5% allowance
        {"kind": "throttle", "node": "gpu-node-1", "gpu": 3, "reason": "sw_thermal", "share": 0.02},
        set(),
    ),
    (  # any HW thermal slowdown under load, seen in NVML's nanosecond counters
        {"kind": "throttle", "node": "gpu-node-2", "gpu": 5, "reason": "hw_thermal", "share": 0.001},
        {("health.throttle", "gpu-node-2", 5)},
    ),
    (  # 17 of 18 links: P2P stays within tolerance, the link count does not
        {"kind": "nvlink-down", "node": "gpu-node-3", "gpu": 2, "links": 1},
        {("health.nvlink", "gpu-node-3", 2)},
    ),
    (
        {"kind": "nvlink-errors", "node": "gpu-node-1", "gpu": 6, "counter": "recovery", "count": 1, "link": 4},
        {("health.nvlink", "gpu-node-1", 6)},
    ),
    (  # a few CRC errors under load, far below DCGM's 100 per second: not a fault
        {"kind": "nvlink-errors", "node": "gpu-node-4", "gpu": 1, "counter": "crc_flit", "count": 20},
        set(),
    ),
    ({"kind": "xid", "node": "gpu-node-2", "gpu": 0, "code": 79}, {("health.xid", "gpu-node-2", 0)}),
    ({"kind": "xid", "node": "gpu-node-2", "gpu": 0, "code": 13}, set()),  # an application's fault, not the GPU's
    ({"kind": "temperature", "node": "gpu-node-3", "gpu": 6, "celsius": 90}, {("health.temperature", "gpu-node-3", 6)}),
    (
        {"kind": "dcgm", "node": "gpu-node-4", "gpu": 0, "test": "memory", "status": "Fail"},
        {("dcgm.memory", "gpu-node-4", 0)},
    ),
    (
        {"kind": "version", "node": "gpu-node-3", "component": "driver", "version": "550.54.14"},
        {("stack.version", "gpu-node-3", None)},
    ),
    (
        {"kind": "version", "node": "gpu-node-2", "component": "dcgm-exporter", "version": "3.3.9-3.6.1"},
        {("stack.version", "gpu-node-2", None)},
    ),
    (
        {"kind": "version", "node": "gpu-node-1", "component": "kubelet", "version": "v1.30.6"},
        {("stack.skew", "gpu-node-1", None)},
    ),
    (
        {"kind": "ordering", "node": "gpu-node-2", "component": "device-plugin", "before": "container-toolkit"},
        {("stack.ordering", "gpu-node-2", None)},
    ),
    ({"kind": "missing-gpu", "node": "gpu-node-3", "gpu": 7}, {("inventory.gpus", "gpu-node-3", None)}),
    ({"kind": "unreachable", "node": "gpu-node-4"}, {("node.reachable", "gpu-node-4", None)}),
]


@pytest.mark.parametrize(
    ("fault", "expected"),
    CASES,
    ids=[
        f"{c[0]['kind']}-{c[0].get('metric', c[0].get('component', c[0].get('reason', c[0].get('counter', ''))))}-{i}"
        for i, c in enumerate(CASES)
    ],
)
def test_one_fault_one_finding(certify, fault, expected) -> None:
    run = certify(fleet_doc([fault]))
    assert run.findings == expected, [f["message"] for f in run.verdict["findings"]]
    assert run.verdict["result"] == ("fail" if expected else "pass")
    # pytest's outcomes say the verdict, item by item; one fault fails one item (a per-GPU check's: its node's)
    assert run.items_agree().get("failed", 0) == len(expected)


def test_missing_gpu_skips_its_checks_with_the_reason(certify) -> None:
    run = certify(fleet_doc([{"kind": "missing-gpu", "node": "gpu-node-3", "gpu": 7}]))
    run.result.stdout.no_fnmatch_line("*gpu-node-3/gpu7*FAILED*")
    skipped = [line for line in (run.run_dir / "junit.xml").read_text().splitlines() if "gpu-node-3/gpu7" in line]
    assert skipped, "the absent GPU's checks must still be listed, as skipped"
    assert run.verdict["summary"]["gpus"] == 31


def test_unreachable_node_skips_everything_else_on_it(certify) -> None:
    run = certify(fleet_doc([{"kind": "unreachable", "node": "gpu-node-4"}]))
    node = run.verdict["nodes"]["gpu-node-4"]
    assert node["failed"] == 1
    assert node["passed"] == 0
    assert node["skipped"] > 100
    (finding,) = run.verdict["findings"]
    assert "NodeStatusUnknown" in finding["message"]


def test_demo_fleet_finds_exactly_its_faults(certify) -> None:
    import yaml

    from .conftest import ROOT

    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-4x8-faulty.yaml").read_text())
    run = certify(fleet)
    assert run.findings == {
        ("memory.bandwidth", "gpu-node-2", 3),
        ("straggler.compute.gemm.bf16", "gpu-node-1", 6),
        ("health.ecc", "gpu-node-1", 5),
        ("health.pcie_link", "gpu-node-1", 2),
        ("health.throttle", "gpu-node-4", 7),
        ("dcgm.memory", "gpu-node-4", 0),
        ("stack.version", "gpu-node-3", None),
        ("stack.ordering", "gpu-node-2", None),
        ("stability.compute.gemm.fp16", "gpu-node-3", 5),
        ("straggler.pcie.h2d", "gpu-node-4", None),
    }


def test_the_all_reduce_across_nodes_runs_over_the_measured_nodes_only(certify) -> None:
    from .conftest import spec_doc

    run = certify(
        fleet_doc([{"kind": "unreachable", "node": "gpu-node-2"}], nodes=5),
        "-v",
        spec=spec_doc(multinode={"maxNodes": 3}),
    )
    fabric = json.loads((run.run_dir / "evidence" / "multinode" / "default" / "nccl.json").read_text())
    assert fabric["nodes"] == ["gpu-node-1", "gpu-node-3", "gpu-node-4"]
    assert fabric["nccl"]["ranks"] == 24
    run.result.stdout.fnmatch_lines(["*test_nccl_all_reduce_multinode PASSED*"])


def test_without_multinode_in_the_spec_the_check_skips_and_says_why(certify) -> None:
    from .conftest import spec_doc

    spec = spec_doc()
    del spec["certify"]["multinode"]
    run = certify(fleet_doc(), "-rs", spec=spec)
    assert not (run.run_dir / "evidence" / "multinode").exists()
    run.result.stdout.fnmatch_lines(["*certify.multinode is not set*"])


def test_pairs_of_neighbours_say_which_node_slows_the_ring(certify) -> None:
    from .conftest import spec_doc

    slow = {"kind": "slow", "node": "gpu-node-3", "metric": "nccl.all_reduce.multinode", "factor": 0.8}
    run = certify(fleet_doc([slow], nodes=6), spec=spec_doc(multinode={"pairs": True}))
    assert run.findings >= {
        ("nccl.all_reduce.multinode", None, None),
        ("straggler.nccl.all_reduce.multinode", "gpu-node-3", None),
    }
    assert not {f for f in run.findings if f[0].startswith("straggler.nccl") and f[1] != "gpu-node-3"}
    pairs = [p for f in pairs_files(run.run_dir / "evidence" / "multinode") for p in json.loads(f.read_text())["pairs"]]
    assert [p["nodes"] for p in pairs] == [
        ["gpu-node-1", "gpu-node-2"],
        ["gpu-node-3", "gpu-node-4"],
        ["gpu-node-5", "gpu-node-6"],
        ["gpu-node-2", "gpu-node-3"],
        ["gpu-node-4", "gpu-node-5"],
        ["gpu-node-6", "gpu-node-1"],
    ]
    message = next(f["message"] for f in run.verdict["findings"] if f["node"] == "gpu-node-3" and "nccl" in f["check"])
    assert "gpu-node-2 + gpu-node-3" in message
    assert "gpu-node-3 + gpu-node-4" in message
