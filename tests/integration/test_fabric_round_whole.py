"""A fabric round runs whole on Kubernetes (issue 25): every pair of a round is created before any is cleaned up,
however small `target.maxParallel` is, and `target.fabricParallel` alone bounds it. The real `kubernetes` client
against the fake API server; no kubelet, so each pair is stopped at its first check (no waiting)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucert.errors import ClusterAccessError
from gpucert.measure.evidence import FabricEvidence
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.kubernetes import runs
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
    monkeypatch.setattr(
        FabricJobs, "_fabric_expire", lambda self, run, gang=None: self._fabric_failed(run, "stopped by the test")
    )
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


def run_round(cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[FabricEvidence]:
    monkeypatch.setattr(
        FabricJobs, "_fabric_expire", lambda self, run, gang=None: self._fabric_failed(run, "stopped by the test")
    )
    for n in NODES:
        cluster.put("nodes", node(n))
    target = open_target(load_spec(spec_file(tmp_path)))
    return target.measure_fabrics(ROUND, MeasurePlan(run_id="round-1", probes=(Probe.NCCL,), dcgm_level=1))


def test_a_rounds_creates_and_deletes_are_in_flight_together_bounded_each_pair_in_order(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 25: a round's 9 requests a pair went one after another (512 pairs: 4,608 x 10 ms = 46 s a round)
    monkeypatch.setattr(runs, "IN_FLIGHT", 3)
    served_cluster.hang("POST", "configmaps", 0.1, times=4)  # each create slow enough to overlap the others
    served_cluster.hang("DELETE", "services", 0.1, times=4)
    fabrics = run_round(served_cluster, tmp_path, monkeypatch)
    assert [f.nodes for f in fabrics] == ROUND
    assert served_cluster.most_in_flight["POST"] == 3  # overlapped, and never more than the bound
    assert served_cluster.most_in_flight["DELETE"] == 3
    # each pair's ConfigMap before its Service and Job (they name it their owner)
    made = [(kind, obj["metadata"]["name"]) for _, kind, _, event, obj in served_cluster.events if event == "ADDED"]
    names = {n for kind, n in made if kind == "configmaps" and n.startswith("gpucert-")}
    assert len(names) == 4
    for name in names:
        order = [kind for kind, n in made if n == name and kind in ("configmaps", "services", "jobs")]
        assert order == ["configmaps", "services", "jobs"]
    assert not [o for kind in ("configmaps", "services", "jobs", "pods") for o in served_cluster.list(kind, "gpucert")]


def test_an_error_in_one_pairs_create_leaves_no_pair_behind(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served_cluster.hang("POST", "configmaps", 0.1, times=4)  # the other pairs' creates are in flight meanwhile
    served_cluster.fail("POST", "jobs", 422, message="Job.batch is invalid")
    with pytest.raises(ClusterAccessError, match=r"Job\.batch is invalid"):
        run_round(served_cluster, tmp_path, monkeypatch)
    assert served_cluster.most_in_flight["POST"] >= 2
    assert not [o for kind in ("configmaps", "services", "jobs", "pods") for o in served_cluster.list(kind, "gpucert")]
