"""Two pools with their own fabrics on a live cluster (the real `kubernetes` client and the fake API server;
issue 25): every pod that touches a pool's NICs requests that pool's RDMA device plugin resource (its
`fabric.rails.resource`, which puts /dev/infiniband in the container) and that pool's GPU count, and the fabric
pods measure that pool's rails (`--pool`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.measure.targets import open_target
from gpucert.measure.targets.kubernetes import watch
from gpucert.measure.targets.kubernetes.fabric import FabricJobs
from gpucert.plan import run as runner
from gpucert.spec.cluster import load_spec
from gpucert.spec.pools import PoolMap

from .fakecluster import FakeCluster
from .gpu_operator import node

ROOT = Path(__file__).resolve().parents[2]
H100, H200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"
TRAIN_RDMA, INFER_RDMA = "rdma/ib_train", "nvidia.com/hostdev_infer"


def _pool(name: str, product: str, nodes: int, gpus: int, baseline: str, resource: str) -> dict[str, Any]:
    return {
        "name": name,
        "nodeSelector": {"nvidia.com/gpu.product": product},
        "expect": {"nodes": nodes, "gpusPerNode": gpus, "gpuProduct": product},
        "baseline": str(ROOT / "baselines" / "gpus" / baseline),
        "fabric": {"rails": {"count": 2, "resource": resource}, "linkLayer": "InfiniBand", "ratedGbps": 400},
    }


@pytest.fixture(autouse=True)
def short_watch_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "STEP_S", 1.0)


def test_each_pools_pods_request_its_own_rdma_resource_and_gpu_count(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    for i in range(1, 5):
        h100 = i <= 2
        n = node(f"gpu-{i:02d}", product=H100 if h100 else H200, gpus=8 if h100 else 4)
        n["status"]["allocatable"][TRAIN_RDMA if h100 else INFER_RDMA] = "63"
        served_cluster.put("nodes", n)
    labels = {"kubernetes.io/metadata.name": "gpucert", "pod-security.kubernetes.io/enforce": "privileged"}
    served_cluster.put(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpucert", "labels": labels}}
    )
    doc = {
        "apiVersion": "gpucert.io/v1alpha2",
        "kind": "ClusterSpec",
        "metadata": {"name": "fabric-pools-jobs"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": "gpucert",
            "image": "registry.local/gpucert-probe@sha256:" + "c" * 64,
            "pendingTimeoutSeconds": 3,
        },
        "pools": [
            _pool("train", H100, 2, 8, "H100-SXM5-80GB.yaml", TRAIN_RDMA),
            _pool("infer", H200, 2, 4, "H200-SXM-141GB.yaml", INFER_RDMA),
        ],
        "certify": {"probes": ["health"], "multinode": {}},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "spec.yaml")
    with runner.new_run(tmp_path / "reports", spec, "measure") as folder:
        pass
    target = open_target(spec)
    inventory = runner.plan(target, spec, folder)
    pools = PoolMap(spec, {n: s.labels for n, s in folder.read_stack().nodes.items()}, inventory.names)
    plan = runner.plan_of(spec, folder.id, pools)
    jobs = FabricJobs(target.cluster, plan, lambda ev: None, gpus_per_node=8)
    groups = [["gpu-01", "gpu-02"], ["gpu-03", "gpu-04"]]  # a round of the fabric stage: both pools' pairs at once
    assert all(jobs.fabric_refused(nodes) == "" for nodes in groups)  # the API server's dry run admits them
    fabric = {
        ",".join(n): jobs.fabric_bodies(f"pair-{i}", n, "uid")[1]["spec"]["template"]["spec"]
        for i, n in enumerate(groups)
    }
    want = {"gpu-01,gpu-02": ("train", TRAIN_RDMA, "8"), "gpu-03,gpu-04": ("infer", INFER_RDMA, "4")}
    assert sorted(fabric) == sorted(want)
    for nodes, (pool, resource, gpus) in want.items():
        [container] = fabric[nodes]["containers"]
        limits = container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == gpus, nodes
        assert {k: v for k, v in limits.items() if k not in ("cpu", "memory", "nvidia.com/gpu")} == {resource: "1"}
        assert container["command"][container["command"].index("--pool") + 1] == pool
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]  # pinning for RDMA

    for name, resource, gpus in (("gpu-01", TRAIN_RDMA, "8"), ("gpu-04", INFER_RDMA, "4")):
        [container] = jobs.job_body(name, "uid")["spec"]["template"]["spec"]["containers"]
        limits = container["resources"]["limits"]
        assert (limits["nvidia.com/gpu"], limits.get(resource)) == (gpus, "1"), name  # it asks the NICs for DMA-BUF
        assert (
            "capabilities" not in container["securityContext"]
            or "add" not in container["securityContext"]["capabilities"]
        )  # the probe pod stays `restricted`: asking for DMA-BUF registers no memory


def test_a_soaks_all_reduce_requests_its_pools_rdma_resource(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak's all-reduce across nodes is a fabric pod too: its plan carries each node's pool and the pool's
    RDMA resource, which the pods request (fabric.py rdma_of), where only target.fabricResources reached it."""
    from gpucert.fleet.soak import start
    from gpucert.measure.targets.base import MeasurePlan
    from gpucert.measure.targets.kubernetes.target import KubernetesTarget

    doc = {
        "apiVersion": "gpucert.io/v1alpha2",
        "kind": "ClusterSpec",
        "metadata": {"name": "fabric-soak"},
        "target": {"kind": "kubernetes", "context": "fake", "namespace": "gpucert", "image": "r@sha256:" + "c" * 64},
        "pools": [_pool("infer", H200, 2, 4, "H200-SXM-141GB.yaml", INFER_RDMA)],
        "certify": {"probes": ["health"], "multinode": {}},
        "soak": {"duration": "1s", "round": "1s", "probes": ["health", "nccl"]},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.soak is not None
    seen: list[MeasurePlan] = []
    monkeypatch.setattr(KubernetesTarget, "measure_fabrics", lambda self, groups, plan: seen.append(plan) or [])
    nodes = [{"node": "gpu-03", "pool": "infer"}, {"node": "gpu-04", "pool": "infer"}]
    soak = start._round_target(spec, spec.soak, "run-1", nodes)
    with pytest.raises(ValueError, match="not enough values"):  # the patched target returns no document
        soak.fabric_round(["gpu-03", "gpu-04"], 0, 0.0, 1.0)
    [plan] = seen
    assert plan.rdma_for("gpu-03", {}) == {INFER_RDMA: "1"}
    assert plan.gpus == {"gpu-03": 4, "gpu-04": 4}
