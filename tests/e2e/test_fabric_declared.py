"""A fabric section its nodes contradict as a whole is one pool.fabric finding naming the pool, the key and what
was found, and the checks it explains skip with it as their cause (issue 25: one root cause, one finding); a node
short of a rail the others have is that node's fabric.port finding alone."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from .conftest import fleet_doc
from .test_fabric import FABRIC, fabric_spec

TWO = {"count": 2, "resource": "rdma/rdma_shared_device_a"}


@pytest.mark.parametrize(
    ("fleet", "declared", "says", "skipped"),
    [
        # every port and its counters, affinity and RDMA figure on both rails, each node's gdr and firmware, and
        # the link between the two racks (no pair was measured: no port is a rail)
        ({}, {"linkLayer": "Ethernet"}, "every rail port of its 2 measured nodes is InfiniBand, none Ethernet", 21),
        # rail 2's four checks on each node, and the affinity of rails 0 and 1 (GPU g's rail is g * 3 // 8)
        ({}, {"rails": dict(TWO, count=3)}, "no measured node has rail(s) 2 (at most 2 InfiniBand ports on a", 12),
        ({"mtu": 2048}, {}, "every rail port of its nodes is active at MTU 2048: mtu 4096 is not what", 4),
        # 3 ports for 2 rails found by the resource: which are rails is not known; every check of the rails skips
        ({"rails": 3}, {}, "every measured node has 3 or more InfiniBand ports for the 2 rails declared", 21),
    ],
    ids=["link-layer", "rail-count", "mtu", "more-ports"],
)
def test_a_declaration_its_nodes_contradict_as_a_whole_is_one_pool_finding(
    certify, fleet: dict[str, Any], declared: dict[str, Any], says: str, skipped: int
) -> None:
    spec = fabric_spec(
        {**FABRIC, "rails": TWO, "rackLabel": "example.com/rack", **declared}, nodes=2, probes=["health"]
    )
    racks = {"label": "example.com/rack", "size": 1}  # two racks of one node: one rack-pair check
    run = certify(fleet_doc(nodes=2, fabric={"rails": 2, "racks": racks} | fleet), spec=spec)
    assert run.findings == {("pool.fabric", None, None)}, run.verdict["findings"]
    [found] = run.verdict["findings"]
    assert found["message"].startswith("pool train: ")
    assert says in found["message"]
    assert run.verdict["summary"]["skipped"] == skipped


def test_a_node_short_of_a_rail_the_others_have_is_that_nodes_port_finding_alone(certify, pytester) -> None:
    """gpu-node-2 without mlx5_1 (its evidence re-evaluated): its rail 1 port fails; its affinity, counters and RDMA
    figure on that rail skip with that port as their cause, and its peers' pairs on the rail follow from it."""
    spec = fabric_spec(dict(FABRIC, rails=TWO), nodes=3, probes=["health"])
    run = certify(fleet_doc(nodes=3, fabric={"rails": 2}), spec=spec)
    assert run.findings == set(), run.verdict["findings"]
    old = pytester.path / "old"
    shutil.copytree(run.run_dir, old)
    shutil.rmtree(pytester.path / "reports")
    path = old / "evidence" / "gpu-node-2.json"
    doc = json.loads(path.read_text())
    doc["fabric"]["ports"] = [p for p in doc["fabric"]["ports"] if p["hca"] != "mlx5_1"]
    path.write_text(json.dumps(doc))
    again = certify(fleet_doc(nodes=3, fabric={"rails": 2}), "--evidence", str(path.parent), spec=spec)
    assert again.findings == {("fabric.port", "gpu-node-2", None)}, again.verdict["findings"]
    [found] = again.verdict["findings"]
    assert found["message"] == "gpu-node-2 rail 1: the node has fewer than 2 InfiniBand HCAs"
    assert again.verdict["summary"]["skipped"] == 3  # its rail 1's affinity, counters and RDMA figure
