"""A pool that declares a fabric, certified end to end on simulated fleets: its declaration at configure time,
and (with the simulator's fabric) every fabric fault found by exactly its check."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .conftest import fleet_doc, spec_doc

FABRIC: dict[str, Any] = {
    "rails": {"count": 8, "resource": "rdma/rdma_shared_device_a"},
    "linkLayer": "InfiniBand",
    "ratedGbps": 400,
}


def fabric_spec(fabric: dict[str, Any], nodes: int = 4, **certify: Any) -> dict[str, Any]:
    """The demo spec as one v1alpha2 pool of every node, with a fabric section."""
    doc = spec_doc(**certify)
    doc["apiVersion"] = "gpucert.io/v1alpha2"
    pool = {"name": "train", "expect": dict(doc.pop("expect"), nodes=nodes), "fabric": fabric}
    pool["baseline"] = doc["certify"].pop("baseline")
    doc["pools"] = [pool]
    return doc


def test_a_fabric_on_nodes_without_an_rdma_resource_is_one_configure_finding_naming_the_pool(certify) -> None:
    run = certify(fleet_doc(nodes=2), spec=fabric_spec(FABRIC, nodes=2), suites=("configure",))
    assert run.findings == {("pool.fabric", None, None)}
    [finding] = run.verdict["findings"]
    assert finding["message"].startswith("pool train: no node of the pool offers an RDMA device plugin resource")


def test_the_pools_own_multinode_figure_holds_the_all_reduce_across_its_nodes(certify) -> None:
    """fabric.ncclBusbw is the pool's all-reduce figure across its nodes, in place of the SKU baseline's."""
    busbw = {"expected": 5000.0, "tolerance": 0.1, "source": "our fabric's acceptance contract, 2026"}
    spec = fabric_spec(dict(FABRIC, ncclBusbw=busbw), nodes=2, probes=["health"], multinode={})
    run = certify(fleet_doc(nodes=2), spec=spec, suites=("certify",))
    [found] = [f for f in run.verdict["findings"] if f["check"] == "nccl.all_reduce.multinode"]
    assert found["status"] == "fail"
    assert found["expected"] == 5000.0
    assert found["limit"] == 4500.0


SIX = [f"gpu-node-{i}" for i in range(1, 7)]  # two racks of three: gpu-node-1..3, gpu-node-4..6
FAULTS = [
    ({"kind": "port-down", "node": "gpu-node-2", "rail": 1}, ("fabric.port", "gpu-node-2")),
    ({"kind": "port-rate", "node": "gpu-node-2", "rail": 1, "gbps": 200}, ("fabric.port", "gpu-node-2")),
    ({"kind": "symbol-errors", "node": "gpu-node-2", "rail": 0, "perHour": 1000}, ("fabric.counters", "gpu-node-2")),
    ({"kind": "link-downed", "node": "gpu-node-5", "rail": 1}, ("fabric.counters", "gpu-node-5")),
    ({"kind": "gdr-off", "node": "gpu-node-2"}, ("fabric.gdr", "gpu-node-2")),
    ({"kind": "nccl-socket", "node": "gpu-node-3"}, ("fabric.nccl_transport", None)),
    ({"kind": "nic-placement", "node": "gpu-node-4", "rail": 0}, ("fabric.affinity", "gpu-node-4")),
    (
        {"kind": "slow-rail", "node": "gpu-node-5", "rail": 1, "peer": "gpu-node-2", "factor": 0.7},
        ("fabric.rdma_bw", "gpu-node-2"),
    ),
    ({"kind": "rack-link", "node": "gpu-node-1", "peer": "gpu-node-4", "factor": 0.6}, ("fabric.rdma_bw", None)),
]


@pytest.mark.parametrize(("fault", "finding"), FAULTS, ids=[f["kind"] for f, _ in FAULTS])
def test_each_fabric_fault_is_found_by_its_check_alone(
    certify, fault: dict[str, Any], finding: tuple[str, str | None]
) -> None:
    """Issue 25: each simulated fabric fault is one finding of exactly its check, and nothing else fails. A slow
    link between two nodes is reported by the first of them in inventory order (gpu-node-2), naming the other."""
    fabric = {"rails": 2, "racks": {"label": "example.com/rack", "size": 3}}
    spec = fabric_spec(
        dict(FABRIC, rails={"count": 2, "resource": "rdma/rdma_shared_device_a"}, rackLabel="example.com/rack"),
        nodes=6,
        probes=["health"],
        multinode={},
    )
    run = certify(fleet_doc([fault], nodes=6, fabric=fabric), spec=spec, suites=("configure", "certify"))
    assert {(c, n) for c, n, _ in run.findings} == {finding}, run.verdict["findings"]
    [found] = run.verdict["findings"]
    assert found["status"] == "fail"
    if fault["kind"] == "nccl-socket":  # the ring and gpu-node-3's pairs fell back; the node named is gpu-node-3
        assert "(NET/Socket) on gpu-node-3:" in found["message"]
    if fault["kind"] == "slow-rail":
        assert found["message"].startswith("gpu-node-2 rail 1 (mlx5_1/1): the link to gpu-node-5 on this rail is slow")


def test_reports_punch_list_and_metrics_name_the_rail_hca_port_and_peer(certify) -> None:
    """A port trained down on gpu-node-2's rail 1 and a slow link from it to gpu-node-5 on rail 0: the punch list
    names each link (the peer where there is one), report.html draws the rail x node matrix and a heatmap per
    rail, and the exporter gives the port's rate and the rail's last RDMA bandwidth."""
    from gpucert.acceptance.punchlist import punch_list
    from gpucert.fleet.metrics import FleetCollector
    from gpucert.plan.runfolder import RunFolder
    from gpucert.spec.cluster import load_spec

    faults = [
        {"kind": "port-rate", "node": "gpu-node-2", "rail": 1, "gbps": 200},
        {"kind": "slow-rail", "node": "gpu-node-2", "rail": 0, "peer": "gpu-node-5", "factor": 0.7},
    ]
    fabric = {"rails": 2, "racks": {"label": "example.com/rack", "size": 3}}
    rails = {"count": 2, "resource": "rdma/rdma_shared_device_a"}
    spec = fabric_spec(dict(FABRIC, rails=rails, rackLabel="example.com/rack"), nodes=6, probes=["health"])
    run = certify(fleet_doc(faults, nodes=6, fabric=fabric), spec=spec)
    assert run.findings == {("fabric.port", "gpu-node-2", None), ("fabric.rdma_bw", "gpu-node-2", None)}
    [row] = punch_list(RunFolder(run.run_dir))
    assert row.node == "gpu-node-2"
    assert row.links == ["rail 1 mlx5_1 port 1", "rail 0 mlx5_0 port 1 (peer gpu-node-5)"]
    html = (run.run_dir / "report.html").read_text()
    assert "Fabric of pool train: rails x nodes" in html
    assert html.count('class="gpucert-pairs"') == 2  # a heatmap per rail
    series = {
        (m.name, tuple(sorted(s.labels.items()))): s.value
        for m in FleetCollector(run.run_dir.parent, spec=load_spec(run.run_dir.parent.parent / "spec.yaml")).collect()
        for s in m.samples
        if m.name.startswith("gpucert_fabric_")
    }
    port = (("hca", "mlx5_1"), ("node", "gpu-node-2"), ("port", "1"), ("rail", "1"))
    assert series[("gpucert_fabric_port_rate_gbps", port)] == 200
    assert series[("gpucert_fabric_port_active", port)] == 1
    rdma = series[
        ("gpucert_fabric_rail_rdma_gbps", (("hca", "mlx5_0"), ("node", "gpu-node-3"), ("port", "1"), ("rail", "0")))
    ]
    assert 370 < rdma < 400  # 96% of 400 Gb/s


def test_the_hca_firmware_pin_holds_every_rail_hca(certify) -> None:
    """`hca-firmware` in the stack is read by the fabric probe, not from a pod: each node on other firmware is a
    finding of its own (like stack.version), and the pin adds no configure check that nothing could decide."""
    fabric = {"rails": 2, "racks": {"label": "example.com/rack", "size": 1}}
    spec = fabric_spec(
        dict(FABRIC, rails={"count": 2, "resource": "rdma/rdma_shared_device_a"}), nodes=2, probes=["health"]
    )
    spec["stack"]["components"].append({"name": "hca-firmware", "version": "28.40.1000"})
    run = certify(fleet_doc(nodes=2, fabric=fabric), spec=spec)
    assert run.findings == {("fabric.firmware", "gpu-node-1", None), ("fabric.firmware", "gpu-node-2", None)}
    assert run.verdict["findings"][0]["message"].endswith(
        "mlx5_0 28.39.1002, mlx5_1 28.39.1002: not the pinned hca-firmware 28.40.1000"
    )


@pytest.mark.parametrize("layer", ["InfiniBand", "Ethernet"])
def test_a_clean_fabric_passes_every_fabric_check(certify, layer: str) -> None:
    """No fault, no finding: 10 nodes in two racks, 8 rails of InfiniBand or RoCE, every fabric check required ran;
    report.html lists the nodes in natural order (gpu-node-2 before gpu-node-10)."""
    fabric = {"rails": 8, "linkLayer": layer, "racks": {"label": "example.com/rack", "size": 5}}
    spec = fabric_spec(
        dict(FABRIC, linkLayer=layer, rackLabel="example.com/rack"), nodes=10, probes=["health"], multinode={}
    )
    run = certify(fleet_doc(nodes=10, fabric=fabric), spec=spec)
    assert run.findings == set(), run.verdict["findings"]
    assert run.verdict["result"] == "pass"
    assert run.verdict["coverage"]["complete"]
    fabric_keys = 10 * (4 * 8 + 2) + 2  # 4 per rail and 2 per node on 10 nodes; pool.fabric, the transport
    assert run.verdict["summary"]["checks"] >= fabric_keys
    html = (run.run_dir / "report.html").read_text()
    section = html[html.index("gpucert-fabric") :]
    assert section.index(">gpu-node-2<") < section.index(">gpu-node-10<")


def test_a_rated_speed_no_port_of_the_pool_reaches_is_one_pool_finding_not_one_per_port(certify) -> None:
    """Every rail port of every node at 200 Gb/s where the spec rates 400: the HCAs cannot run at the rated speed
    (pool.fabric, naming the pool), and the ports and RDMA figures follow from it rather than failing 4 x 2 times."""
    fabric = {"rails": 2, "rateGbps": 200, "racks": {"label": "example.com/rack", "size": 2}}
    rails = {"count": 2, "resource": "rdma/rdma_shared_device_a"}
    spec = fabric_spec(dict(FABRIC, rails=rails, rackLabel="example.com/rack"), nodes=4, probes=["health"])
    run = certify(fleet_doc(nodes=4, fabric=fabric), spec=spec)
    assert run.findings == {("pool.fabric", None, None)}, run.verdict["findings"]
    [found] = run.verdict["findings"]
    assert "pool train: every rail port of its nodes runs at 200 Gb/s: ratedGbps 400" in found["message"]
    assert run.verdict["summary"]["skipped"] == 4 * 2 * 2 + 1  # each port and its RDMA figure, the rack link


def test_a_waiver_selects_one_rail_of_a_node(certify, pytester) -> None:
    """A waiver `select: {node: X, rail: N}` covers that rail's fabric.rdma_bw finding and no other rail's: one
    on the slow rail waives it; one on another rail of the same node matches no failure (waiver.unmatched)."""
    slow = {"kind": "slow-rail", "node": "gpu-node-5", "rail": 1, "peer": "gpu-node-2", "factor": 0.7}
    terms = {"accept": "as-is", "reason": "cable swap booked", "approvedBy": "buyer: j.doe", "expires": "2099-01-01"}
    waivers = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "Waivers",
        "metadata": {"name": "rails"},
        "waivers": [
            {"check": "fabric.rdma_bw", "select": {"node": "gpu-node-2", "rail": 1}, **terms},
            {"check": "fabric.rdma_bw", "select": {"node": "gpu-node-2", "rail": 0}, **terms},
        ],
    }
    (pytester.path / "waivers.yaml").write_text(yaml.safe_dump(waivers))
    fabric = {"rails": 2, "racks": {"label": "example.com/rack", "size": 3}}
    rails = {"count": 2, "resource": "rdma/rdma_shared_device_a"}
    spec = fabric_spec(dict(FABRIC, rails=rails, rackLabel="example.com/rack"), nodes=6, probes=["health"])
    spec["acceptance"] = {"waivers": str(pytester.path / "waivers.yaml")}
    run = certify(fleet_doc([slow], nodes=6, fabric=fabric), spec=spec, suites=("configure", "certify", "waivers"))
    found = {(f["check"], f["node"], f["status"], f.get("waiver", {}).get("id")) for f in run.verdict["findings"]}
    assert found == {
        ("fabric.rdma_bw", "gpu-node-2", "waived", "waivers[0]"),
        ("waiver.unmatched", None, "fail", "waivers[1]"),
    }
