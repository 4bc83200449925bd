"""certify.multinode on a spec with several pools: one ring per pool in the plan (the pool the key's detail), each
pool's pairs for the node that slows its ring, and the soak's ring per pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpucert.fleet.soak import start_soak
from gpucert.plan.checks import CheckKey
from gpucert.plan.required import plan_checks
from gpucert.spec.cluster import load_spec
from gpucert.spec.pools import PoolMap

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / "baselines" / "gpus"
MULTINODE = "nccl.all_reduce.multinode"
PAIRS = f"straggler.{MULTINODE}"
PRODUCTS = {"train": "NVIDIA-H100-80GB-HBM3", "infer": "NVIDIA-H200"}


def pools_spec(tmp: Path, multinode: dict[str, Any], **extra: Any) -> Path:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "pools.yaml").read_text())
    doc["target"]["fleet"] = "fleet.yaml"
    for pool in doc["pools"]:
        pool["baseline"] = str(BASELINES / Path(pool["baseline"]).name)
    doc["certify"]["multinode"] = multinode
    doc.update(extra)
    (tmp / "spec.yaml").write_text(yaml.safe_dump(doc))
    return tmp / "spec.yaml"


def _plan(tmp: Path, multinode: dict[str, Any], train: int = 6, infer: int = 2) -> set[CheckKey]:
    spec = load_spec(pools_spec(tmp, multinode))
    labels = {f"t{i}": {"nvidia.com/gpu.product": PRODUCTS["train"]} for i in range(1, train + 1)}
    labels |= {f"i{i}": {"nvidia.com/gpu.product": PRODUCTS["infer"]} for i in range(1, infer + 1)}
    plan = plan_checks(spec, list(labels), ["certify"], components=[], pools=PoolMap(spec, labels, list(labels)))
    return {k for k in plan.required if k.check in (MULTINODE, PAIRS)}


def test_each_pool_has_its_own_ring_named_by_its_detail_and_its_own_pairs(tmp_path: Path) -> None:
    keys = _plan(tmp_path, {"pairs": True})
    assert {k for k in keys if k.check == MULTINODE} == {
        CheckKey(MULTINODE, None, None, "train"),
        CheckKey(MULTINODE, None, None, "infer"),
    }
    assert str(CheckKey(MULTINODE, None, None, "infer")) == "nccl.all_reduce.multinode@fleet[infer]"
    # four nodes tell a slow one from its pairs: the six of train do, the two of infer do not
    assert {k.node for k in keys if k.check == PAIRS} == {f"t{i}" for i in range(1, 7)}


def test_a_pools_own_max_nodes_and_a_pool_left_out(tmp_path: Path) -> None:
    keys = _plan(tmp_path, {"pairs": True, "maxNodes": 6, "pools": {"train": {"maxNodes": 4}}})
    assert {k for k in keys if k.check == MULTINODE} == {CheckKey(MULTINODE, None, None, "train")}
    assert {k.node for k in keys if k.check == PAIRS} == {"t1", "t2", "t3", "t4"}


def test_a_one_pool_spec_keeps_its_ring_without_a_detail(tmp_path: Path) -> None:
    """One pool: the key is the one it always was (`nccl.all_reduce.multinode@fleet`), so verdicts, waivers and
    history keyed on it read the same."""
    spec = load_spec(ROOT / "examples" / "fabric.yaml")
    labels = {f"n{i}": {"nvidia.com/gpu.product": PRODUCTS["train"]} for i in range(1, 4)}
    plan = plan_checks(spec, list(labels), ["certify"], components=[], pools=PoolMap(spec, labels, list(labels)))
    assert {k for k in plan.required if k.check == MULTINODE} == {CheckKey(MULTINODE)}


def test_the_soak_runs_a_ring_per_pool_and_a_slow_link_fails_its_pool_alone(tmp_path: Path) -> None:
    fleet: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "fleets" / "pools.yaml").read_text())
    fleet["faults"] = []
    fleet["soak"] = {"timeScale": 0, "faults": [{"kind": "link-slow", "node": "h200-1", "factor": 0.8, "after": "4h"}]}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    spec = pools_spec(tmp_path, {}, soak={"duration": "8h", "round": "1h", "probes": ["health", "nccl"]})
    result = start_soak(spec, tmp_path / "reports")
    assert result.result == "fail"
    assert {v["result"] for v in result.nodes.values()} == {"pass"}
    assert result.fabric is not None
    train, infer = result.fabric["pools"]["train"], result.fabric["pools"]["infer"]
    assert (train["result"], train["rounds"], train["findings"]) == ("pass", 8, [])
    assert (infer["result"], infer["leftRound"]) == ("fail", 4)
    assert result.fabric["leftRound"] == 4
    assert all(f["message"].startswith("pool infer: ") for f in result.fabric["findings"])
    (run,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir() and not p.name.startswith(".")]
    rounds = [json.loads(p.read_text())["fabric"] for p in sorted(run.glob("soak/rounds/*/summary.json"))]
    assert [sorted(r["pools"]) for r in rounds] == [["infer", "train"]] * 5 + [["train"]] * 3  # infer left at 4
    assert rounds[0]["pools"]["infer"]["round"]["nodes"] == ["h200-1", "h200-2"]
    assert rounds[0]["pools"]["train"]["round"]["nodes"] == ["h100-1", "h100-2", "h100-3", "h100-4"]
    kept = sorted(p.name for p in (run / "soak" / "rounds" / "0000").glob("_fabric*"))
    assert kept == ["_fabric.infer.json", "_fabric.train.json"]  # each ring as it finished, for a resumed soak
