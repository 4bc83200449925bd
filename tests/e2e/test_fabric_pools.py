"""Several pools, each with its own fabric (issue 25): each pool's fabric pods measure that pool's rails (its HCAs),
pairs are of one pool, and a measurement counts for a rail only on the rail's HCA and port."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from gpucert.plan.pairs_files import pairs_files

from .conftest import BASELINES, ROOT

RDMA = "fabric.rdma_bw"
TRAIN_HCAS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
INFER_HCAS = ["mlx5_4", "mlx5_5"]


def two_fabrics_spec() -> dict[str, Any]:
    """examples/pools.yaml (4 x 8 H100 `train`, here 3 x 4 H200 `infer`), health only, each pool its own rails."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "pools.yaml").read_text())
    doc["target"]["fleet"] = "fleet.yaml"
    doc["certify"].update(probes=["health"], multinode={})
    for pool, hcas in zip(doc["pools"], (TRAIN_HCAS, INFER_HCAS), strict=True):
        pool["baseline"] = str(BASELINES / Path(pool["baseline"]).name)
        rails = {"count": len(hcas), "hcas": hcas, "resource": "rdma/rdma_shared_device_a"}
        pool["fabric"] = {"rails": rails, "linkLayer": "InfiniBand", "ratedGbps": 400}
    doc["pools"][1]["expect"]["nodes"] = 3
    return doc


def two_fabrics_fleet(faults: list[dict[str, Any]]) -> dict[str, Any]:
    """examples/fleets/pools.yaml with 3 H200 nodes, each pool its own simulated fabric (HCA names, rail count)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "fleets" / "pools.yaml").read_text())
    doc["faults"] = faults
    doc["pools"][0]["fabric"] = {"rails": 4, "hcas": TRAIN_HCAS}
    doc["pools"][1]["fabric"] = {"rails": 2, "hcas": INFER_HCAS}
    doc["pools"][1]["nodes"]["count"] = 3
    return doc


SLOW = {"kind": "slow-rail", "node": "h200-1", "peer": "h200-2", "rail": 1, "factor": 0.6}


def test_a_slow_link_on_the_second_pools_rail_is_one_finding_naming_its_node_rail_hca_and_port(
    certify, pytester
) -> None:
    """Infer's rail 1 is mlx5_5; train's rail 1 (mlx5_1) is another cable, and its figure never stands for it. And
    the same evidence with a pair's rail 0 measured on train's mlx5_0 (a fine cable): that figure cannot stand for
    infer's rail 0 (mlx5_4), where matched by rail index alone it would pass."""
    run = certify(two_fabrics_fleet([SLOW]), spec=two_fabrics_spec(), suites=("configure", "certify"))
    assert {(c, n) for c, n, _ in run.findings} == {(RDMA, "h200-1")}, run.verdict["findings"]
    [found] = run.verdict["findings"]
    assert found["status"] == "fail"
    assert found["message"].startswith("h200-1 rail 1 (mlx5_5/1): the link to h200-2 on this rail is slow")
    docs = {f.name: json.loads(f.read_text()) for f in pairs_files(run.run_dir / "evidence" / "multinode")}
    ports = {pool: {f"{h}/1" for h in hcas} for pool, hcas in (("h100", TRAIN_HCAS), ("h200", INFER_HCAS))}
    for pair in (p for doc in docs.values() for p in doc["pairs"]):
        [pool] = {n.split("-")[0] for n in pair["nodes"]}  # never a pair across pools
        assert {r["client_hca"] for r in pair["rdma"]} == ports[pool]  # every rail of its own pool's, no other
        assert {r["server_hca"] for r in pair["rdma"]} == ports[pool]

    [(name, doc, pair)] = [
        (f, d, p) for f, d in docs.items() for p in d["pairs"] if sorted(p["nodes"]) == ["h200-1", "h200-3"]
    ]
    [rail0] = [r for r in pair["rdma"] if r["rail"] == 0]
    rail0["client_hca"] = rail0["server_hca"] = "mlx5_0/1"
    edited = pytester.path / "edited"
    shutil.copytree(run.run_dir, edited)
    (edited / "evidence" / "multinode" / name).write_text(json.dumps(doc))  # the round document holding the pair
    shutil.rmtree(pytester.path / "reports")
    again = certify(two_fabrics_fleet([SLOW]), "--evidence", str(edited / "evidence"), spec=two_fabrics_spec())
    found = {f["message"].split(":")[0]: f for f in again.verdict["findings"] if f["check"] == RDMA}
    assert sorted(found) == [
        "h200-1 rail 0 (mlx5_4/1)",
        "h200-1 rail 1 (mlx5_5/1)",
        "h200-3 rail 0 (mlx5_4/1)",
    ], again.verdict["findings"]
    for node in ("h200-1", "h200-3"):  # both ends of the pair: neither has its rail 0 figure with the other
        wrong = found[f"{node} rail 0 (mlx5_4/1)"]
        assert wrong["status"] == "error"
        assert "h200-1 + h200-3 on rail 0: h200-1's end is mlx5_0/1, not the rail's mlx5_4/1" in wrong["message"]
