"""Would the API server admit this pod? A server-side dry run answers before any Job exists.

A Job's pods are created by the Job controller, so a pod that admission refuses (Pod Security, a policy webhook)
never shows up: the Job sits without pods and the run would see only a Pending timeout. A dry run of the same pod
(`dryRun=All`: every admission step runs, nothing is stored) gets the API's own Forbidden message at once, which
becomes every affected node's finding. RBAC: `create` on pods in the run namespace.
"""

from __future__ import annotations

from typing import Any, Protocol

from gpucert.errors import AdmissionError
from gpucert.measure.targets.base import EvidenceSink
from gpucert.measure.targets.kubernetes.api import Cluster, KubeApi
from gpucert.measure.targets.kubernetes.runs import failed_evidence
from gpucert.measure.targets.kubernetes.sharing import refusal
from gpucert.spec.cluster import GpuSharing

__all__ = ["admission_fix", "dry_run_pod", "refuse", "refused"]

PSA_LABEL = "pod-security.kubernetes.io/enforce"


class ProbeRun(Protocol):
    """What `refuse` reads of a run's probe Jobs (jobs.ProbeJobs), so that this module needs no import of them."""

    cluster: Cluster
    ns: str
    cm_name: str
    labels: dict[str, str]

    @property
    def sink(self) -> EvidenceSink:
        """Where a node's evidence goes (here: the evidence of a node refused)."""
        ...

    def job_body(self, node: str, owner_uid: str) -> dict[str, Any]:
        """The probe Job `node` would get."""
        ...


def dry_run_pod(kube: KubeApi, ns: str, name: str, pod: dict[str, Any], labels: dict[str, str] | None = None) -> None:
    """Create the pod with `dryRun=All`: every admission step runs, nothing is stored (AdmissionError when refused)."""
    meta = {"name": name, "namespace": ns, **({"labels": labels} if labels else {})}
    kube.call(
        "create",
        f"pods in namespace {ns} (a dry run)",
        kube.core.create_namespaced_pod,
        namespace=ns,
        body={"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod},
        dry_run="All",
    )


def refused(cluster: Cluster, name: str, labels: dict[str, str], pod: dict[str, Any]) -> str:
    """ "" when the API server would admit the pod; else its Forbidden message, quoted."""
    try:
        dry_run_pod(cluster.kube, cluster.options.namespace, name, pod, labels)
    except AdmissionError as exc:
        return exc.said
    return ""


def admission_fix(said: str, namespace: str, level: str, what: str) -> str:
    """The finding for pods admission refused: the API's words and what to change."""
    if "violates PodSecurity" in said:
        fix = (
            f"{what} need Pod Security `{level}`: kubectl label namespace {namespace} --overwrite "
            f"{PSA_LABEL}={level} (docs/first-run.md, First run on a real cluster)"
        )
    elif "exceeded quota" in said:  # the ResourceQuota plugin: `exceeded quota: NAME, requested: ...`
        fix = f"raise namespace {namespace}'s ResourceQuota, or lower target.resources"
    elif "RuntimeClass" in said:
        fix = "create the RuntimeClass (the GPU Operator makes `nvidia`) or correct target.runtimeClassName"
    else:
        fix = f"a policy of the cluster refuses {what}; exempt namespace {namespace} from it"
    return f"the API server refused {what} at once ({said}); {fix}"


def refuse(jobs: ProbeRun, nodes: list[str]) -> list[str]:
    """Fail at once, with the reason, the nodes no probe pod can run on: admission refuses the pod (a dry run of
    the first node's), or the node's GPUs are shared (GFD's labels); returns the nodes left to measure."""
    if not nodes:
        return []
    pod = jobs.job_body(nodes[0], "")["spec"]["template"]["spec"]
    said = refused(jobs.cluster, f"{jobs.cm_name}-admission", jobs.labels, pod)
    if said:
        message = admission_fix(said, jobs.ns, "restricted", "the probe pods")
        for node in nodes:
            jobs.sink(failed_evidence(node, message))
        return []
    left = []
    for node in nodes:
        c = jobs.cluster
        why = refusal(node, c.labels.get(node, {}), c.sharing.get(node, GpuSharing.NONE))
        if why:
            jobs.sink(failed_evidence(node, why))
        else:
            left.append(node)
    return left
