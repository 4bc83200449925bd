"""The fake kubelet and Job controller never bring back what a sweep deleted (a soak's "nothing left behind" failed
now and then on a loaded machine, one pod left): each interleaving forced here, without threads or timing.

The real ones: an update of a deleted pod is 404 (kubernetes pkg/registry/core/pod/strategy.go,
AllowCreateOnUpdate false), which the kubelet's status manager drops (pkg/kubelet/status/status_manager.go,
syncPod: "Pod does not exist on the server"); the Job controller syncs only a Job its cache still has
(pkg/controller/job/job_controller.go, syncJob returns on NotFound), and a pod made for one just deleted is deleted by
the garbage collector, its owner gone (pkg/controller/garbagecollector, attemptToDeleteItem)."""

from __future__ import annotations

from typing import Any

from .fakecluster import INDEX, FakeCluster
from .fakekubelet import FakeKubelet

NS = "gpucert"


def _cluster() -> FakeCluster:
    c = FakeCluster()
    c.put("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return c


def _job(name: str, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "probe",
        "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
        "command": ["gpucert-probe", "--rank", "$(RANK)"],
        "env": [{"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}}}],
    }
    on = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-01", "gpu-02"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [on]}}}
    template = {"metadata": {"labels": {"app": "gpucert"}}, "spec": {"containers": [container], "affinity": affinity}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": template, **spec},
    }


def test_a_pod_deleted_before_its_process_starts_is_not_brought_back_by_the_kubelets_status_update() -> None:
    cluster = _cluster()
    kubelet = FakeKubelet(cluster)
    job = cluster.put("jobs", _job("ring", completionMode="Indexed", completions=1))
    pod = kubelet._pod(job)
    pod["metadata"]["annotations"] = {INDEX: "0"}
    pod["spec"]["nodeName"] = "gpu-01"
    cluster.put("pods", pod)
    cluster.delete("jobs", NS, "ring")  # the sweep: the Job, and its pod with it, before the process started
    assert cluster.list("pods", NS) == []
    kubelet._execute_rank(job, pod, port=0, what="hang")  # its thread starts now: "Running"
    assert cluster.list("pods", NS) == []
    assert [e[3] for e in cluster.events if e[1] == "pods"] == ["ADDED", "DELETED"]


def test_a_job_deleted_after_the_job_controller_listed_it_gets_no_pod() -> None:
    cluster = _cluster()
    kubelet = FakeKubelet(cluster)
    cluster.put("jobs", _job("probe-a"))
    cluster.put("jobs", _job("ring", completionMode="Indexed", completions=2))
    listed = cluster.list

    def list_then_sweep(kind: str, ns: str | None = None, selector: str = "", fields: str = "") -> list[dict[str, Any]]:
        out = listed(kind, ns, selector, fields)
        if kind == "jobs" and ns is None:  # the controller's listing, then the sweep deletes every Job
            for job in out:
                cluster.delete("jobs", NS, job["metadata"]["name"])
        return out

    cluster.list = list_then_sweep  # type: ignore[method-assign]
    kubelet.sync_jobs()
    cluster.list = listed  # type: ignore[method-assign]
    assert cluster.list("pods", NS) == []
    assert kubelet.collectives_made == 0
