"""certify.multinode on a live cluster with two pools (the real `kubernetes` client, the fake API server and
kubelet): one Indexed Job per pool, over that pool's nodes only, the second sent after the first is gone (pools
often share the spine: a ring measured while another loads it would be judged for the other's traffic); each
pool's ring lands in evidence/multinode/<pool>/nccl.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import main as cli
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.kubernetes import watch
from gpucert.plan import run as runner
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.pools import PoolMap

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import node

ROOT = Path(__file__).resolve().parents[2]
NS = "gpucert"
H100, H200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"
RDMA = {"rdma/rdma_shared_device_a": "1"}


def _pool(name: str, product: str, nodes: int, baseline: str) -> dict[str, Any]:
    return {
        "name": name,
        "nodeSelector": {"nvidia.com/gpu.product": product},
        "expect": {"nodes": nodes, "gpusPerNode": 8, "gpuProduct": product},
        "baseline": str(ROOT / "baselines" / "gpus" / baseline),
    }


def spec_file(tmp_path: Path) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "gpucert.io/v1alpha2",
        "kind": "ClusterSpec",
        "metadata": {"name": "pools-jobs"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": NS,
            "maxParallel": 4,
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
            "pendingTimeoutSeconds": 3,
        },
        "pools": [_pool("train", H100, 3, "H100-SXM5-80GB.yaml"), _pool("infer", H200, 2, "H200-SXM-141GB.yaml")],
        "certify": {"probes": ["memory"], "multinode": {}},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(autouse=True)
def short_watch_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "STEP_S", 1.0)  # a step each second, as test_gang.py: keeps this file fast


def test_each_pool_runs_its_own_all_reduce_as_an_indexed_job_one_after_another(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    for i in range(1, 6):
        served_cluster.put("nodes", node(f"gpu-{i:02d}", product=H100 if i <= 3 else H200))
    spec = load_spec(spec_file(tmp_path))
    with runner.new_run(tmp_path / "reports", spec, "measure") as folder:
        pass
    target = open_target(spec)
    inventory = runner.plan(target, spec, folder)
    pools = PoolMap(spec, {n: s.labels for n, s in folder.read_stack().nodes.items()}, inventory.names)
    plan = MeasurePlan(run_id=folder.id, probes=(Probe.NCCL,), dcgm_level=1)
    kubelet = FakeKubelet(served_cluster).start()
    try:  # the rings over every node, as if each node's probe pod had brought its evidence
        runner.measure_rings(target, folder, pools, inventory.names, plan)
    finally:
        kubelet.close()
    rings = {
        p: json.loads((folder.path / "evidence" / "multinode" / p / "nccl.json").read_text())
        for p in ("train", "infer")
    }
    assert rings["train"]["nodes"] == ["gpu-01", "gpu-02", "gpu-03"]
    assert rings["infer"]["nodes"] == ["gpu-04", "gpu-05"]
    assert all(r["errors"] == [] and r["nccl"]["correct"] for r in rings.values())
    multinode = [
        (e[3], e[4]["metadata"]["annotations"]["gpucert.io/nodes"])
        for e in served_cluster.events
        if e[1] == "jobs"
        and e[3] in ("ADDED", "DELETED")
        and e[4]["metadata"]["labels"].get("gpucert.io/role") == "nccl-multinode"
    ]
    assert multinode == [
        ("ADDED", "gpu-01,gpu-02,gpu-03"),
        ("DELETED", "gpu-01,gpu-02,gpu-03"),
        ("ADDED", "gpu-04,gpu-05"),
        ("DELETED", "gpu-04,gpu-05"),
    ]
    added = [e[4] for e in served_cluster.events if e[1] == "jobs" and e[3] == "ADDED"]
    assert [
        j["spec"]["parallelism"] for j in added if j["metadata"]["labels"].get("gpucert.io/role") == "nccl-multinode"
    ] == [3, 2]


@pytest.mark.parametrize(("multinode", "flagged"), [({}, True), ({"pools": {"train": {}}}, False)])
def test_preflight_asks_for_the_fabric_only_on_the_nodes_of_a_pool_with_a_ring(
    served_cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], multinode: Any, flagged: bool
) -> None:
    """target.fabricResources is what the all-reduce pods request: a node of a pool that runs no ring
    (certify.multinode.pools leaves it out) needs no RDMA device plugin."""
    for i in range(1, 5):
        n = node(f"gpu-{i:02d}", product=H100 if i <= 3 else H200)
        if i <= 3:
            n["status"]["allocatable"].update(RDMA)
        served_cluster.put("nodes", n)
    doc = yaml.safe_load(spec_file(tmp_path).read_text())
    doc["pools"][1]["expect"]["nodes"] = 1
    doc["certify"]["multinode"] = multinode
    doc["target"]["fabricResources"] = RDMA
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    cli.main(["preflight", str(tmp_path / "spec.yaml"), "--format", "json"])
    rows = json.loads(capsys.readouterr().out)["checks"]
    rdma = [c["item"] for c in rows if c["status"] == "fail" and "RDMA" in c["item"] and "gpu-" in c["item"]]
    assert rdma == (["gpu-04: RDMA"] if flagged else [])
