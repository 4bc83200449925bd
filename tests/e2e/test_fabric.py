"""A pool that declares a fabric, certified end to end on simulated fleets: its declaration at configure time,
and (with the simulator's fabric) every fabric fault found by exactly its check."""

from __future__ import annotations

from typing import Any

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
