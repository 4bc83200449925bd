"""Fabric faults on a RoCE (Ethernet) fabric: each is one finding of exactly its check, as on InfiniBand
(test_fabric.py's test_each_fabric_fault_is_found_by_its_check_alone); one run of three faults on three nodes."""

from __future__ import annotations

from .conftest import fleet_doc
from .test_fabric import FABRIC, fabric_spec


def test_port_rate_gdr_off_and_a_slow_rail_on_roce_are_each_one_finding_of_its_check(certify) -> None:
    faults = [
        {"kind": "port-rate", "node": "gpu-node-1", "rail": 1, "gbps": 200},
        {"kind": "gdr-off", "node": "gpu-node-3"},
        {"kind": "slow-rail", "node": "gpu-node-4", "rail": 0, "peer": "gpu-node-2", "factor": 0.7},
    ]
    fabric = {"rails": 2, "linkLayer": "Ethernet", "racks": {"label": "example.com/rack", "size": 2}}
    rails = {"count": 2, "resource": "rdma/rdma_shared_device_a"}
    spec = fabric_spec(
        dict(FABRIC, linkLayer="Ethernet", rails=rails, rackLabel="example.com/rack"), nodes=4, probes=["health"]
    )
    run = certify(fleet_doc(faults, nodes=4, fabric=fabric), spec=spec, suites=("configure", "certify"))
    assert sorted((c, n) for c, n, _ in run.findings) == [
        ("fabric.gdr", "gpu-node-3"),
        ("fabric.port", "gpu-node-1"),
        ("fabric.rdma_bw", "gpu-node-2"),
    ], run.verdict["findings"]
    assert len(run.verdict["findings"]) == 3
    assert {f["status"] for f in run.verdict["findings"]} == {"fail"}
    [slow] = [f for f in run.verdict["findings"] if f["check"] == "fabric.rdma_bw"]
    assert slow["message"].startswith("gpu-node-2 rail 0 (mlx5_0/1): the link to gpu-node-4 on this rail is slow")
