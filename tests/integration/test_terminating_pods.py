"""A run's deleted pods are gone before its sweep returns, and a pass over the nodes never takes a pod an earlier
pass of the same run left going: on a cluster both are the normal case, not a race.

The real ones (kubernetes/kubernetes): a Job deleted with propagationPolicy Background is removed at once
(staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go, Store.Delete: no finalizer, not graceful) and
the Job controller only removes its pods' tracking finalizers (pkg/controller/job/job_controller.go, deleteJob and
cleanupPodFinalizers); the garbage collector deletes the pods afterwards, from its queue
(pkg/controller/garbagecollector/garbagecollector.go, attemptToDeleteItem); and a running pod's delete is graceful:
it stays, Terminating, until its kubelet stopped it, 30 s by default (pkg/registry/core/pod/strategy.go,
CheckGracefulDelete; only an unscheduled or finished pod goes at once). A list right after the deletes still shows
the pods. The fake keeps a deleted pod Terminating through `grace_lists` lists of pods: each interleaving is forced by
the requests made, not by time."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.kubernetes.runs import await_pods_gone, cleanup_runs
from gpucert.spec.cluster import Probe, load_spec

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import node
from .test_probe_jobs import NS, spec_file

RUN = {"gpucert.io/run": "r1", "app.kubernetes.io/managed-by": "gpucert"}


def _owned(kind: str, name: str, owner: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": dict(RUN)}
    if owner is not None:
        ref = {"kind": owner["kind"], "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
        meta["ownerReferences"] = [ref]
    return {"kind": kind, "metadata": meta, **extra}


def _a_running_probe(cluster: FakeCluster) -> None:
    """A run's ConfigMap, the Job it owns and the Job's pod, running on gpu-01."""
    cm = cluster.put("configmaps", _owned("ConfigMap", "gpucert-r1", None))
    job = cluster.put("jobs", _owned("Job", "gpucert-r1-a", cm, spec={}))
    running = {"phase": "Running"}
    cluster.put("pods", _owned("Pod", "gpucert-r1-a-x1", job, spec={"nodeName": "gpu-01"}, status=running))


def test_a_sweep_returns_once_the_runs_deleted_pods_are_gone(served_cluster: FakeCluster, tmp_path: Path) -> None:
    """Without the wait the sweep returned as the deletes were answered, the pod still Terminating and listed."""
    served_cluster.grace_lists = 2  # the list the sweep makes of the pods, and one more, still show it
    _a_running_probe(served_cluster)
    kube = open_target(load_spec(spec_file(tmp_path))).kube  # type: ignore[attr-defined]
    assert cleanup_runs(kube, NS, "r1") == 3  # the Job, the pod (Terminating already: answered, not gone), the CM
    assert served_cluster.list("pods", NS) == []
    assert [e[3] for e in served_cluster.events if e[1] == "pods"] == ["ADDED", "MODIFIED", "DELETED"]
    assert served_cluster.list("jobs", NS) == served_cluster.list("configmaps", NS) == []


def test_a_pod_that_never_goes_holds_the_sweep_no_longer_than_its_bound(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """A pod whose kubelet never finishes it (its node down) is left to the cluster once the bound has passed."""
    served_cluster.grace_lists = 1 << 30
    _a_running_probe(served_cluster)
    served_cluster.delete("pods", NS, "gpucert-r1-a-x1")
    kube = open_target(load_spec(spec_file(tmp_path))).kube  # type: ignore[attr-defined]
    t0 = time.monotonic()
    assert await_pods_gone(kube, NS, "gpucert.io/run=r1", timeout_s=0.5) == ["gpucert-r1-a-x1"]
    assert time.monotonic() - t0 < 0.5 + 1.0  # the bound and the last list


def test_a_pass_never_takes_a_pod_an_earlier_pass_of_the_run_left_going(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """A soak's rounds are passes of one run: the same run label and the same Job names. The first pass's pod,
    still Terminating as the second pass starts, goes once the second pass has listed its pods and made its Job;
    its DELETED event (a Succeeded pod whose log still reads) was taken as the second pass's pod, so the second
    pass reported the first pass's measurements while its own pod was OOM-killed."""
    served_cluster.put("nodes", node("gpu-01"))
    target = open_target(load_spec(spec_file(tmp_path)))
    plan = MeasurePlan(run_id="soak-1", probes=(Probe.MEMORY,), dcgm_level=1)
    kubelet = FakeKubelet(served_cluster).start()
    try:
        first: list[NodeEvidence] = []
        target.measure(["gpu-01"], plan, first.append)
        (done,) = first
        assert done.collected, done.errors
        # the first pass's pod as it ended, left going: Terminating through the next list of pods (the second pass's)
        (stale,) = [copy.deepcopy(e[4]) for e in served_cluster.events if e[1] == "pods" and e[3] == "DELETED"]
        stale["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
        served_cluster.put("pods", stale)
        served_cluster.grace_lists = 1
        served_cluster.terminating[("pods", NS, stale["metadata"]["name"])] = 1
        kubelet.behaviour["gpu-01"] = "oom"  # the second pass's own pod is OOM-killed
        second: list[NodeEvidence] = []
        target.measure(["gpu-01"], plan, second.append)
    finally:
        kubelet.close()
    (ev,) = second
    assert not ev.collected
    assert any("OOMKilled" in e.message for e in ev.errors), ev.errors
    assert served_cluster.list("pods", NS) == []
