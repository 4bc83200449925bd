"""What a probe pod's status says, read the way the cluster writes it: why the pod stopped (evicted, its node
deleted, OOM-killed, crashed, its Job's deadline), and why it is not scheduled (busy GPUs, taints, no such node).

Pure functions over pods as the API serves them in JSON; kubernetes_jobs.py and kubernetes_fabric.py act on them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "IMAGE_ERRORS",
    "container_state",
    "disruption",
    "lacks_gpus",
    "node_deleted",
    "stop_reason",
    "unschedulable",
]

IMAGE_ERRORS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
}
# the DisruptionTarget condition's reasons (k8s 1.26+): who ended the pod, in words a reader knows
DISRUPTIONS = {
    "DeletionByPodGC": "its node was deleted",
    "EvictionByEvictionAPI": "it was evicted through the Eviction API, by a drain or a descheduler",
    "PreemptionByScheduler": "it was preempted by a higher-priority pod",
    "DeletionByTaintManager": "a NoExecute taint on its node evicted it",
    "TerminationByKubelet": "the kubelet ended it, for node pressure or a node shutdown",
}


def container_state(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The first container's `terminated` or `waiting` state in a pod status, if any has one."""
    for cs in status.get("containerStatuses") or []:
        state = (cs.get("state") or {}).get(kind)
        if state:
            return dict(state)
    return None


def disruption(pod: dict[str, Any]) -> tuple[str, str] | None:
    """The pod's DisruptionTarget condition (reason, message), set before the pod is ended by someone else."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason", "")), str(cond.get("message", ""))
    return None


def node_deleted(pod: dict[str, Any]) -> bool:
    """Pod GC marks the pods of a deleted node Failed with DeletionByPodGC before it deletes them."""
    d = disruption(pod)
    return d is not None and d[0] == "DeletionByPodGC"


def stop_reason(pod: dict[str, Any]) -> str:
    """Why a pod that did not succeed stopped, as one phrase with the cluster's own words in parentheses."""
    status = pod.get("status") or {}
    d = disruption(pod)
    if d is not None:
        reason, message = d
        said = f"{reason}: {message}" if message else reason
        return f"{DISRUPTIONS[reason]} ({said})" if reason in DISRUPTIONS else said
    if status.get("reason") == "Evicted":  # the kubelet's node-pressure eviction, before DisruptionTarget existed
        return f"the kubelet evicted it ({status.get('message', 'node pressure')})"
    if status.get("reason") == "DeadlineExceeded":  # the pod's own activeDeadlineSeconds
        return f"it ran past its deadline ({status.get('message', 'DeadlineExceeded')})"
    term = container_state(status, "terminated") or {}
    reason = term.get("reason") or status.get("reason") or "Failed"
    code = term.get("exitCode")
    return f"{reason}" + (f" (exit code {code})" if code is not None else "")


def unschedulable(pod: dict[str, Any]) -> str:
    """The scheduler's reason a Pending pod is not placed ("" when it has not said, or placed it)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}"
    return ""


def lacks_gpus(reason: str, resource: str = "nvidia.com/gpu") -> bool:
    """Whether the scheduler's reason is that the node's GPUs are taken (by other pods)."""
    return f"Insufficient {resource}" in reason
