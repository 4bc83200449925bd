"""A cluster of several node pools, certified end to end: each pool against its own expectations and baseline,
peers from the node's pool only, every node in exactly one pool, and reports grouped by pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..in_process import gpucert_here
from .conftest import BASELINES, ROOT, SUITES

EXAMPLE = ROOT / "examples" / "pools.yaml"


def pools_spec(**changes: Any) -> dict[str, Any]:
    """examples/pools.yaml with its fleet at fleet.yaml and its baselines absolute (the test writes both)."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["target"]["fleet"] = "fleet.yaml"
    for pool in doc["pools"]:
        pool["baseline"] = str(BASELINES / Path(pool["baseline"]).name)
    doc.update(changes)
    return doc


def group(name: str, sku: str, count: int, prefix: str, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    return {"name": name, "sku": sku, "nodes": {"count": count, "namePrefix": prefix, "gpusPerNode": gpus}, **extra}


def fleet(*groups: dict[str, Any], faults: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "pools"},
        "pools": list(groups),
        "noise": {"cv": 0.01},
        "seed": 11,
        "faults": faults or [],
    }


def test_the_two_pool_example_finds_one_fault_in_each_pool(certify, pytester: pytest.Pytester) -> None:
    run = certify(yaml.safe_load((ROOT / "examples" / "fleets" / "pools.yaml").read_text()), spec=pools_spec())
    assert run.findings == {("straggler.memory.bandwidth", "h100-3", 5), ("health.ecc", "h200-2", 1)}
    v = run.verdict
    assert v["coverage"]["complete"], v["coverage"]["missing"]
    assert {n: s["pool"] for n, s in v["nodes"].items()} == {
        **{f"h100-{i}": "train" for i in range(1, 5)},
        **{f"h200-{i}": "infer" for i in range(1, 3)},
    }
    assert v["pools"]["train"] | {"results": None} == {
        "nodes": 4,
        "gpusPerNode": 8,
        "product": "NVIDIA-H100-80GB-HBM3",
        "baseline": "H100-SXM5-80GB",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "found": 4,
        "result": "fail",
        "results": None,
        "failing": ["straggler.memory.bandwidth"],
    }
    assert v["pools"]["infer"]["failing"] == ["health.ecc"]
    assert v["summary"]["gpus"] == 4 * 8 + 2 * 4
    # the plan enumerates each pool's GPUs: 14 configure checks, an all-reduce and the probe's preflight per node,
    # 19 checks per GPU and its straggler.combined (every metric at once: 4 GPUs on a node give 3 peers), and the
    # 9 node-level straggler checks where the pool has the four nodes they need (train, not infer's two)
    per_node = {n: s["passed"] + s["failed"] + s["errors"] + s["skipped"] for n, s in v["nodes"].items()}
    h100, h200 = 16 + 8 * (19 + 1) + 9, 16 + 4 * (19 + 1)
    assert per_node == {**{f"h100-{i}": h100 for i in range(1, 5)}, **{f"h200-{i}": h200 for i in (1, 2)}}
    assert any(u["comparison"] == "node as a whole" and u["where"] == ["infer pool"] for u in v["undecided"])
    run.result.stdout.fnmatch_lines(["*test_ecc[[]h200-2[]]*"])  # one item per check and node (issue 28)
    run.result.stdout.fnmatch_lines(["*gpu1 fail: h200-2/gpu1: 1 uncorrected ECC error*"])
    # the straggler is judged against its own pool: 7 peers on its node and the 32 H100 GPUs, not the H200s
    message = next(f["message"] for f in v["findings"] if f["check"] == "straggler.memory.bandwidth")
    assert "7 peers on h100-3" in message
    assert "over 32 GPUs" in message
    assert "the train pool median over 32 GPUs" in message
    # the infer pool pins its own driver branch and CUDA: its nodes run 550 and pass stack.version and stack.compat
    stack = json.loads((run.run_dir / "stack.json").read_text())
    assert stack["nodes"]["h200-1"]["components"]["driver"]["version"] == "550.127.05"
    assert stack["nodes"]["h100-1"]["components"]["driver"]["version"] == "570.124.06"
    # each pool's baseline is an input of the run, signed with it
    assert sorted(p.name for p in (run.run_dir / "inputs" / "baselines").iterdir()) == ["infer.yaml", "train.yaml"]
    html = (run.run_dir / "report.html").read_text()
    assert "pool train: NVIDIA-H100-80GB-HBM3, 8 GPUs per node, baseline H100-SXM5-80GB; 4 of 4 nodes; FAIL" in html
    assert "memory.bandwidth per GPU (pool infer)" in html


def test_peers_are_the_pool_never_another_sku(certify) -> None:
    """One H100 node among H200 nodes: against the mixed fleet every H100 GPU would be far behind the median; its
    peers are its own pool, so the clean fleet passes. A node no pool selects is held to pool.membership alone."""
    mixed = fleet(
        group("h100", "H100-SXM5-80GB", 1, "h100-"),
        group("h200", "H200-SXM-141GB", 3, "h200-", gpus=4),
        group("spare", "A100-SXM4-80GB", 1, "a100-"),
    )
    spec = pools_spec()
    spec["pools"][0]["expect"]["nodes"] = 1
    spec["pools"][1]["expect"]["nodes"] = 3
    run = certify(mixed, spec=spec)
    assert run.findings == {("pool.membership", "a100-1", None)}
    lines = run.verdict["fleetAgainstSku"]  # each pool against its own SKU figure: an H100 never against an H200's
    assert {line["pool"] for line in lines} == {"train", "infer"}
    assert not any(line["behind"] for line in lines)
    (f,) = run.verdict["findings"]
    assert "a100-1 is in no pool: it has nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB" in f["message"]
    assert run.verdict["nodes"]["a100-1"] | {"measured": None} == {
        "result": "fail",
        "passed": 0,
        "failed": 1,
        "errors": 0,
        "skipped": 0,
        "waived": 0,
        "failing": ["pool.membership"],
        "waivedChecks": [],
        "measured": None,
        "carriedFrom": None,
        "pool": None,
    }
    assert not (run.run_dir / "evidence" / "a100-1.json").exists()  # nothing is expected of it: not measured
    assert run.verdict["coverage"]["complete"]
    assert run.verdict["pools"]["train"]["result"] == "pass"
    assert run.verdict["pools"]["infer"]["result"] == "pass"


def configure(pytester: pytest.Pytester, fleet_doc: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc))
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec))
    pytester.runpytest(
        str(SUITES / "configure"),
        "--spec",
        str(pytester.path / "spec.yaml"),
        "--reports",
        str(pytester.path / "reports"),
        "--no-measure",
        "-p",
        "no:cacheprovider",
    )
    (run,) = (pytester.path / "reports").iterdir()
    verdict: dict[str, Any] = json.loads((run / "verdict.json").read_text())
    return verdict


def test_overlapping_pools_and_a_short_pool_are_findings(pytester: pytest.Pytester) -> None:
    spec = pools_spec()
    # a third pool by instance type also matches the H100 nodes: each is then in two pools
    spec["pools"].append(
        {
            "name": "p5",
            "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            "expect": {"nodes": 4, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
            "baseline": str(BASELINES / "H100-SXM5-80GB.yaml"),
        }
    )
    spec["pools"][1]["expect"]["nodes"] = 3  # one H200 node short
    doc = fleet(
        group("h100", "H100-SXM5-80GB", 2, "h100-", labels={"node.kubernetes.io/instance-type": "p5.48xlarge"}),
        group("h200", "H200-SXM-141GB", 2, "h200-", gpus=4),
    )
    verdict = configure(pytester, doc, spec)
    got = {(f["check"], f["node"]) for f in verdict["findings"]}
    assert got == {("pool.membership", "h100-1"), ("pool.membership", "h100-2"), ("inventory.nodes", None)}
    messages = {(f["check"], f["node"]): f["message"] for f in verdict["findings"]}
    assert "h100-1 is in 2 pools (train, p5)" in messages[("pool.membership", "h100-1")]
    assert messages[("inventory.nodes", None)] == (
        "pool train: 0 nodes found, 4 expected; pool infer: 2 nodes found, 3 expected; pool p5: 0 nodes found, "
        "4 expected; 2 GPU nodes are in no pool or in several (see pool.membership)"
    )
    assert verdict["coverage"]["complete"]


def test_a_pool_pin_the_node_does_not_run_fails_on_that_pool_only(pytester: pytest.Pytester) -> None:
    doc = fleet(group("h100", "H100-SXM5-80GB", 2, "h100-"), group("h200", "H200-SXM-141GB", 2, "h200-", gpus=4))
    doc["faults"] = [{"kind": "version", "node": "h200-2", "component": "driver", "version": "570.124.06"}]
    spec = pools_spec()
    spec["pools"][0]["expect"]["nodes"] = 2
    verdict = configure(pytester, doc, spec)
    assert {(f["check"], f["node"]) for f in verdict["findings"]} == {("stack.version", "h200-2")}
    (f,) = verdict["findings"]
    assert f["expected"] == "550.127.05"
    assert f["observed"] == "570.124.06"


def test_gpucert_certify_prints_the_pools(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text((ROOT / "examples" / "fleets" / "pools-clean.yaml").read_text())
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(pools_spec()))
    r = gpucert_here("configure", "spec.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pools" in r.stdout
    assert "NVIDIA-H200" in r.stdout
    assert "2 of 2" in r.stdout


def test_recertifying_a_node_compares_it_with_its_pool_only(project: Path) -> None:
    """Handover of the two-pool cluster, then one H200 node recertified: its handover baseline is its pool's,
    and its fleet peers are the other H200 node, never the H100s."""
    (project / "examples" / "fleets" / "pools.yaml").write_text(
        (project / "examples" / "fleets" / "pools-clean.yaml").read_text()
    )
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    r = gpucert_here("certify", "examples/pools.yaml", "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (project / "reports").glob("*acme-mixed")
    r = gpucert_here("baseline", "record", str(run), cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    recorded = yaml.safe_load((project / "baselines" / "nodes" / "acme-mixed" / "h200-1.yaml").read_text())
    assert recorded["sku"] == "H200-SXM-141GB"
    args = ("recertify", "h200-1", "--spec", "examples/pools.yaml", "-q", "--key", "keys/gpucert.pub")
    r = gpucert_here(*args, cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (recert,) = (project / "reports").glob("*recertify-h200-1")
    record = json.loads((recert / "recertify.json").read_text())
    assert sorted(record["fleetPeers"]) == ["h200-2"]
    verdict = json.loads((recert / "verdict.json").read_text())
    assert verdict["nodes"]["h200-1"]["pool"] == "infer"
    assert list(verdict["pools"]) == ["infer"]
    assert "SKU baseline H200-SXM-141GB" in verdict["recertify"]["summary"]


def test_init_from_the_simulated_fleet_drafts_a_spec_that_passes_configure(project: Path) -> None:
    r = gpucert_here("init", "--simulated", "examples/fleets/pools-clean.yaml", "--out", "mine.yaml", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    spec = yaml.safe_load((project / "mine.yaml").read_text())
    assert spec["target"] == {"kind": "simulated", "fleet": "examples/fleets/pools-clean.yaml"}
    assert [p["baseline"] for p in spec["pools"]] == [
        "baselines/gpus/H100-SXM5-80GB.yaml",
        "baselines/gpus/H200-SXM-141GB.yaml",
    ]
    assert spec["pools"][1]["stack"] == {"components": [{"name": "driver", "version": "550.127.05"}]}
    r = gpucert_here("configure", "mine.yaml", "-q", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
