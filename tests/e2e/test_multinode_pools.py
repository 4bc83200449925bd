"""certify.multinode on a spec with several pools (issue 25: "the multi-node all-reduce per pool"): one collective
per pool, over its own nodes, judged against its own figure; a slow fabric in one pool is one finding naming it.
And a run folder of the one-pool layout from before (evidence/multinode/nccl.json) still evaluates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from gpucert.plan.pairs_files import pairs_files

from .conftest import BASELINES, ROOT, fleet_doc, spec_doc

MULTINODE = "nccl.all_reduce.multinode"


def pools_spec(**multinode: Any) -> dict[str, Any]:
    """examples/pools.yaml (4 x 8 H100 `train`, 2 x 4 H200 `infer`), health only, with certify.multinode."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "pools.yaml").read_text())
    doc["target"]["fleet"] = "fleet.yaml"
    for pool in doc["pools"]:
        pool["baseline"] = str(BASELINES / Path(pool["baseline"]).name)
    doc["certify"].update(probes=["nccl"], multinode=multinode)
    return doc


def pools_fleet(faults: list[dict[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "fleets" / "pools.yaml").read_text())
    doc["faults"] = faults
    return doc


def test_one_slow_pool_fabric_is_one_finding_naming_that_pool(certify) -> None:
    slow = {"kind": "slow", "node": "h200-2", "metric": MULTINODE, "factor": 0.7}
    run = certify(pools_fleet([slow]), "-v", spec=pools_spec(), suites=("certify",))
    assert run.findings == {(MULTINODE, None, None)}
    [found] = run.verdict["findings"]
    assert found["status"] == "fail"
    assert found["message"].startswith("pool infer: 2 nodes x 4 GPUs (h200-1, h200-2)")
    rings = {
        p: json.loads((run.run_dir / "evidence" / "multinode" / p / "nccl.json").read_text())
        for p in ("train", "infer")
    }
    assert rings["train"]["nodes"] == ["h100-1", "h100-2", "h100-3", "h100-4"]  # each ring its own pool's nodes
    assert rings["infer"]["nodes"] == ["h200-1", "h200-2"]
    assert (rings["train"]["nccl"]["ranks"], rings["infer"]["nccl"]["ranks"]) == (32, 8)
    html = (run.run_dir / "report.html").read_text()
    assert "NCCL all-reduce across nodes (pool train)" in html  # each pool's ring its own curve
    assert "NCCL all-reduce across nodes (pool infer)" in html
    run.result.stdout.fnmatch_lines(
        ["*test_pool_nccl_all_reduce_multinode?infer? FAILED*", "*test_pool_nccl_all_reduce_multinode?train? PASSED*"]
    )


def test_a_pool_left_out_of_multinode_pools_runs_no_ring_and_its_own_max_nodes_holds(certify) -> None:
    slow = {"kind": "slow", "node": "h200-2", "metric": MULTINODE, "factor": 0.7}
    run = certify(pools_fleet([slow]), spec=pools_spec(pools={"train": {"maxNodes": 3}}), suites=("certify",))
    assert run.findings == set()  # the slow pool has no ring asked of it
    assert sorted(p.name for p in (run.run_dir / "evidence" / "multinode").iterdir()) == ["train"]
    ring = json.loads((run.run_dir / "evidence" / "multinode" / "train" / "nccl.json").read_text())
    assert ring["nodes"] == ["h100-1", "h100-2", "h100-3"]
    assert {"check": MULTINODE, "why": "pools not in certify.multinode.pools: infer"} in run.verdict["coverage"][
        "notRequired"
    ]


def test_a_run_of_the_one_pool_layout_before_pools_still_evaluates(certify, pytester) -> None:
    """Runs written before each pool had its ring kept the one ring at evidence/multinode/nccl.json."""
    slow = {"kind": "slow", "node": "gpu-node-2", "metric": MULTINODE, "factor": 0.8}
    spec = spec_doc(probes=["nccl"], multinode={})
    first = certify(fleet_doc([slow]), spec=spec, suites=("certify",))
    assert first.findings == {(MULTINODE, None, None)}
    old = pytester.path / "old"
    shutil.copytree(first.run_dir, old)
    shutil.move(old / "evidence" / "multinode" / "default" / "nccl.json", old / "evidence" / "multinode" / "nccl.json")
    (old / "evidence" / "multinode" / "default").rmdir()
    shutil.rmtree(pytester.path / "reports")
    again = certify(fleet_doc([slow]), "--evidence", str(old / "evidence"), spec=spec, suites=("certify",))
    assert again.verdict["findings"] == first.verdict["findings"]
    assert again.verdict["result"] == "fail"


def test_a_node_that_slows_its_pools_ring_is_found_among_its_pools_pairs_alone(certify) -> None:
    """With pairs, each pool's neighbours run in pairs of that pool, and a node is held to its own pool's pairs:
    train's fabric is 20% slow throughout (its ring fails, none of its nodes stands out of its pairs), and h200-2
    slows infer's; held to every pair of both pools at once, h200-2 would be at their median."""
    slow = [
        {"kind": "slow", "node": n, "metric": MULTINODE, "factor": 0.8}
        for n in ("h100-1", "h100-2", "h100-3", "h100-4", "h200-2")
    ]
    fleet = pools_fleet(slow)
    fleet["pools"][0]["nodes"]["count"] = 4
    fleet["pools"][1]["nodes"]["count"] = 6  # it takes about five nodes for one to stand out of its pairs
    spec = pools_spec(pairs=True)
    spec["pools"][0]["expect"]["nodes"], spec["pools"][1]["expect"]["nodes"] = 4, 6
    run = certify(fleet, spec=spec, suites=("certify",))
    assert run.findings == {(MULTINODE, None, None), (f"straggler.{MULTINODE}", "h200-2", None)}
    rings = sorted(f["message"].split(":")[0] for f in run.verdict["findings"] if f["check"] == MULTINODE)
    assert rings == ["pool infer", "pool train"]
    pairs = [p for f in pairs_files(run.run_dir / "evidence" / "multinode") for p in json.loads(f.read_text())["pairs"]]
    pools = {"h100": "train", "h200": "infer"}
    assert all(len({pools[n.split("-")[0]] for n in p["nodes"]}) == 1 for p in pairs)  # never a pair across pools
    assert len(pairs) == 4 + 6


def test_a_pools_ring_that_names_another_pools_node_cannot_be_believed(certify, pytester) -> None:
    first = certify(pools_fleet([]), spec=pools_spec(), suites=("certify",))
    assert first.findings == set()
    run = pytester.path / "edited"
    shutil.copytree(first.run_dir, run)
    ring = run / "evidence" / "multinode" / "infer" / "nccl.json"
    doc = json.loads(ring.read_text())
    doc["nodes"] = ["h200-1", "h100-1"]  # a ring of infer's over a node of train's
    ring.write_text(json.dumps(doc))
    shutil.rmtree(pytester.path / "reports")
    again = certify(pools_fleet([]), "--evidence", str(run / "evidence"), spec=pools_spec(), suites=("certify",))
    [found] = [f for f in again.verdict["findings"] if f["check"] == MULTINODE]
    assert found["status"] == "error"
    assert found["message"] == "pool infer: the multi-node evidence cannot be believed: h100-1 not in pool infer"
