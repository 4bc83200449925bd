"""Reading pod statuses as the cluster writes them: who ended a pod, and who holds a node's GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from gpucert.measure.targets.kubernetes.nodes import gpu_pods
from gpucert.measure.targets.kubernetes.pods import lacks_gpus, node_deleted, stop_reason, unschedulable


def pod(status: dict[str, Any], labels: dict[str, str] | None = None, gpus: int = 8) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": status,
    }


def disrupted(reason: str, message: str) -> dict[str, Any]:
    cond = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}
    return {"phase": "Failed", "conditions": [cond]}


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (disrupted("DeletionByPodGC", "PodGC: node no longer exists"), "its node was deleted (DeletionByPodGC: Pod"),
        (disrupted("EvictionByEvictionAPI", "Eviction API: evicting"), "it was evicted through the Eviction API"),
        (disrupted("PreemptionByScheduler", ""), "it was preempted by a higher-priority pod (PreemptionByScheduler)"),
        ({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}, "low on"),
        (
            {
                "phase": "Failed",
                "containerStatuses": [{"state": {"terminated": {"exitCode": 139, "reason": "Error"}}}],
            },
            "Error (exit code 139)",
        ),
    ],
)
def test_who_ended_a_pod(status: dict[str, Any], said: str) -> None:
    assert said in stop_reason(pod(status))


def test_pod_gc_says_the_node_was_deleted() -> None:
    assert node_deleted(pod(disrupted("DeletionByPodGC", "PodGC: node no longer exists")))
    assert not node_deleted(pod(disrupted("EvictionByEvictionAPI", "")))


def test_the_schedulers_reason() -> None:
    msg = "0/16 nodes are available: 1 Insufficient nvidia.com/gpu, 15 node(s) didn't match Pod's node affinity."
    p = pod(
        {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}],
        }
    )
    assert unschedulable(p) == f"Unschedulable: {msg}"
    assert lacks_gpus(unschedulable(p))
    assert not lacks_gpus("0/16 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}.")


def test_another_gpucert_run_holds_gpus_too() -> None:
    ours = pod({"phase": "Running"}, {"app.kubernetes.io/managed-by": "gpucert", "gpucert.io/run": "rmine"})
    theirs = pod({"phase": "Running"}, {"app.kubernetes.io/managed-by": "gpucert", "gpucert.io/run": "rother"})
    theirs["metadata"]["name"] = "recertify-probe"
    trainer = pod({"phase": "Running"}, {"app": "trainer"})
    trainer["metadata"]["name"] = "trainer"
    idle = pod({"phase": "Running"}, gpus=0)
    assert gpu_pods([ours, theirs, trainer, idle], run_label="rmine") == ["ns/recertify-probe", "ns/trainer"]
    assert gpu_pods([ours, theirs, trainer, idle]) == ["ns/trainer"]  # recertification: no gpucert pod counts
