"""A fabric round runs whole on Kubernetes (issue 25): every pair of a round is created before any is cleaned up,
however small `target.maxParallel` is, and `target.fabricParallel` alone bounds it. The real `kubernetes` client
against the fake API server; no kubelet, so each pair is stopped at its first check (no waiting)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.kubernetes.fabric import FabricJobs
from gpucert.spec.cluster import Probe, load_spec

from .fakecluster import FakeCluster
from .gpu_operator import node

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"gpu-{i:02d}" for i in range(1, 9)]
ROUND = [NODES[i : i + 2] for i in range(0, 8, 2)]  # four pairs, each node once


def spec_file(tmp_path: Path, **target: int) -> Path:
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "round"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": "gpucert",
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
            **target,
        },
        "expect": {"nodes": 8, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
        "certify": {"baseline": str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"), "probes": ["nccl"]},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def batches(cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **target: int) -> list[int]:
    """How many Jobs each batch of the round created before its cleanup deleted them."""
    monkeypatch.setattr(FabricJobs, "_fabric_expire", lambda self, run: self._fabric_failed(run, "stopped by the test"))
    for n in NODES:
        cluster.put("nodes", node(n))
    fabrics = open_target(load_spec(spec_file(tmp_path, **target))).measure_fabrics(
        ROUND, MeasurePlan(run_id="round-1", probes=(Probe.NCCL,), dcgm_level=1)
    )
    assert [f.nodes for f in fabrics] == ROUND
    assert all(f.errors for f in fabrics)
    out: list[int] = []
    creating = False
    for method, path in cluster.requests:
        if method == "POST" and path.split("?")[0].endswith("/jobs"):
            out[-1:] = [out[-1] + 1] if creating else [*out, 1]
            creating = True
        elif method == "DELETE" and "/jobs/" in path:
            creating = False
    return out


def test_a_round_is_created_whole_whatever_max_parallel_says(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before issue 25 this was [1, 1, 1, 1]: maxParallel 2 cut the round into batches of one pair
    assert batches(served_cluster, tmp_path, monkeypatch, maxParallel=2) == [4]
    # what a pair costs the API (benchmarks/fabric_scale.py REQUESTS_PER_PAIR): its ConfigMap, Service and Job
    # created, and deleted at the cleanup (its two pods too, where a Job controller made them); one admission dry run
    sent = [(m, p.split("?")[0].split("/gpucert/")[-1].split("/")[0]) for m, p in served_cluster.requests]
    made = {kind: sent.count(("POST", kind)) for kind in ("configmaps", "services", "jobs", "pods")}
    assert made == {"configmaps": 4, "services": 4, "jobs": 4, "pods": 1}
    assert {kind: sent.count(("DELETE", kind)) for kind in ("configmaps", "services", "jobs")} == dict.fromkeys(
        ("configmaps", "services", "jobs"), 4
    )


def test_fabric_parallel_bounds_the_nodes_of_a_round_at_once(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert batches(served_cluster, tmp_path, monkeypatch, maxParallel=32, fabricParallel=4) == [2, 2]
