"""A soak on a Kubernetes cluster: the real `kubernetes` client against the fake API server, each round the probe
Jobs the fake kubelet runs on the NumPy device, on nodes cordoned and labelled `gpucert.io/soak=running`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucert.errors import NodeBusyError
from gpucert.fleet.soak import start_soak
from gpucert.measure.targets.kubernetes.target import KubernetesTarget
from gpucert.spec.cluster import load_spec

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import node

ROOT = Path(__file__).resolve().parents[2]
NS = "gpucert"


def _spec(tmp_path: Path) -> Path:
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "soak-live"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": NS,
            "maxParallel": 2,
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
            "pendingTimeoutSeconds": 3,
            "nodeSelector": {"soak": "yes"},
        },
        "expect": {"nodes": 2, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
        "certify": {"baseline": str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"), "probes": ["memory"]},
        "soak": {"duration": "2s", "round": "1s", "probes": ["health", "memory"]},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return tmp_path / "spec.yaml"


def _nodes(cluster: FakeCluster) -> None:
    for name in ("gpu-01", "gpu-02"):
        cluster.put("nodes", node(name, extra_labels={"soak": "yes"}))
    cluster.put("nodes", node("gpu-03"))  # not selected: never touched


def test_rounds_run_as_probe_jobs_on_cordoned_labelled_nodes(served_cluster: FakeCluster, tmp_path: Path) -> None:
    _nodes(served_cluster)
    spec = _spec(tmp_path)
    kubelet = FakeKubelet(served_cluster).start()
    try:
        result = start_soak(spec, tmp_path / "reports")
    finally:
        kubelet.close()
    assert sorted(result.nodes) == ["gpu-01", "gpu-02"]
    for name in ("gpu-01", "gpu-02"):
        n = served_cluster.get("nodes", None, name)
        assert n is not None
        assert n["spec"].get("unschedulable") is True
        assert n["metadata"]["labels"]["gpucert.io/soak"] == "failed"  # it left the soak (running before)
    untouched = served_cluster.get("nodes", None, "gpu-03")
    assert untouched is not None
    assert "gpucert.io/soak" not in untouched["metadata"]["labels"]
    first = json.loads((result.run / "soak" / "rounds" / "0000" / "gpu-01.json").read_text(encoding="utf-8"))
    assert first["collected"], first["errors"]
    assert first["gpus"][0]["uuid"].startswith("CPU-")  # the fake kubelet's NumPy device, two of them
    assert "memory.bandwidth" in first["gpus"][0]["measurements"]
    assert {k: len(served_cluster.list(k, NS)) for k in ("jobs", "pods", "leases")} == {
        "jobs": 0,
        "pods": 0,
        "leases": 0,  # the soak's leases on its nodes went with it
    }
    holders = {e[4]["spec"]["holderIdentity"] for e in served_cluster.events if e[1] == "leases" and e[3] == "ADDED"}
    assert holders == {f"soak {result.run.name}"}
    # the NumPy device is no 8-GPU node: each node leaves at its first round, measured, judged and found short
    assert {n: (v["result"], v["leftRound"]) for n, v in result.nodes.items()} == {
        "gpu-01": ("fail", 0),
        "gpu-02": ("fail", 0),
    }
    labelled = [
        e[4]["metadata"]["labels"].get("gpucert.io/soak")
        for e in served_cluster.events
        if e[1] == "nodes" and e[4]["metadata"]["name"] == "gpu-01"
    ]
    assert [v for i, v in enumerate(labelled) if v and v != labelled[i - 1]] == ["running", "failed"]
    (finding,) = result.nodes["gpu-01"]["findings"]
    assert finding["check"] == "soak.round"
    assert "2 GPUs answered, the pool expects 8" in finding["message"]


def test_a_node_another_run_holds_is_not_soaked(served_cluster: FakeCluster, tmp_path: Path) -> None:
    _nodes(served_cluster)
    spec = _spec(tmp_path)
    target = KubernetesTarget.from_spec(load_spec(spec))
    held = target.node_control(tmp_path).lock("gpu-02", "recertify gpu-02 by someone")
    with held, pytest.raises(NodeBusyError, match="recertify gpu-02 by someone"):
        start_soak(spec, tmp_path / "reports")
    assert served_cluster.list("jobs", NS) == []
    labels = served_cluster.get("nodes", None, "gpu-01")["metadata"]["labels"]  # type: ignore[index]
    assert "gpucert.io/soak" not in labels  # nothing was marked before every lease was held


def test_each_round_runs_the_all_reduce_across_nodes_as_the_multinode_job(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """certify.multinode in a soak on a cluster (issue 26: "NCCL within the node and across nodes"): the round runs
    the Indexed Job certify runs across the round's nodes, and its bus bandwidth is the round's `fabric` figure."""
    _nodes(served_cluster)
    spec = _spec(tmp_path)
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["certify"]["multinode"] = {"maxNodes": 2}
    doc["soak"]["probes"] = ["health", "nccl"]
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    kubelet = FakeKubelet(served_cluster).start()
    try:
        result = start_soak(spec, tmp_path / "reports")
    finally:
        kubelet.close()
    summary = json.loads((result.run / "soak" / "rounds" / "0000" / "summary.json").read_text(encoding="utf-8"))
    fabric = summary["fabric"]["round"]
    assert fabric["nodes"] == ["gpu-01", "gpu-02"]
    assert fabric["errors"] == [], fabric["errors"]
    assert fabric["median"] is not None
    assert fabric["median"] > 0  # the fake kubelet's NumPy ring, measured
    assert len(fabric["samples"]) >= 5
    indexed = [
        e[4]
        for e in served_cluster.events
        if e[1] == "jobs" and e[3] == "ADDED" and e[4]["spec"].get("completionMode") == "Indexed"
    ]
    assert len(indexed) == 1
    assert indexed[0]["spec"]["completions"] == 2  # one pod per node, as certify's
    assert {k: len(served_cluster.list(k, NS)) for k in ("jobs", "pods", "services")} == {
        "jobs": 0,
        "pods": 0,
        "services": 0,
    }
