"""Probe Jobs: kubernetes.py's helper that measures a live cluster on its own nodes.

One Job per node, placed by the scheduler (required node affinity on the node's `kubernetes.io/hostname`, never
`nodeName`, so a pod that cannot be placed is Pending with the scheduler's reason rather than rejected by the
kubelet), all its GPUs requested, the spec's tolerations and the cordon's (recertification measures a cordoned
node), a deadline and a TTL, at most `maxParallel` at once, the plan mounted from the run's ConfigMap, progress
from a watch on the run's pods, and each node's evidence read from its pod log (framed parts, then the framed
document) and written the moment it arrives.

Anything that stops one node is that node's finding and the others go on: Pending past its timeout (with the
scheduler's reason), GPUs held by other pods (named; `busyTimeoutSeconds` waits for them), an image that does not
pull, OOMKilled or another crash, an eviction, the Job's deadline, the node deleted (Pod GC's DeletionByPodGC), a
log that cannot be read. A pod that stopped half-way keeps the probes it finished (the parts in its log). Every
object carries the run's label and is owned by the run's ConfigMap; all are deleted at the end, on failure and on
interrupt. The all-reduce across nodes is kubernetes_fabric.py's.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpucert._version import __version__
from gpucert.errors import ClusterAccessError, ConfigError, IncompleteRunError
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.probes.deadline import fabric_seconds, job_seconds
from gpucert.measure.probes.framing import FramedLog, FramingError
from gpucert.measure.probes.runner import DcgmPlan, ProbePlan
from gpucert.measure.probes.stream import rebuild
from gpucert.measure.targets.base import EvidenceSink, MeasurePlan
from gpucert.measure.targets.kubernetes.admission import refuse
from gpucert.measure.targets.kubernetes.api import Cluster, status_of
from gpucert.measure.targets.kubernetes.nodes import gpu_pods
from gpucert.measure.targets.kubernetes.podlog import read_pod_log
from gpucert.measure.targets.kubernetes.pods import (
    IMAGE_ERRORS,
    container_state,
    disruption,
    lacks_gpus,
    node_deleted,
    stop_reason,
    unschedulable,
)
from gpucert.measure.targets.kubernetes.podspec import pod_spec
from gpucert.measure.targets.kubernetes.runs import (
    HOSTNAME,
    LABEL_ATTEMPT,
    LABEL_MANAGED,
    LABEL_NODE,
    LABEL_RUN,
    cleanup_runs,
    failed_evidence,
    run_label,
    short,
)
from gpucert.measure.targets.kubernetes.watch import PodHandler, PodWatch
from gpucert.spec.cluster import Probe

__all__ = ["LABEL_MANAGED", "LABEL_NODE", "LABEL_RUN", "ProbeJobs", "cleanup_runs", "run_label"]


@dataclass
class _NodeRun:
    node: str
    job: str
    created: float
    pod: str | None = None
    phase: str | None = None
    unschedulable: str = ""
    log: FramedLog | None = None  # read while the pod was being ended: its log goes with it


@dataclass
class ProbeJobs:
    cluster: Cluster
    plan: MeasurePlan
    sink: EvidenceSink
    gpus_per_node: int
    clock: Callable[[], float] = time.monotonic
    max_active_seen: int = 0
    _active: dict[str, _NodeRun] = field(default_factory=dict)

    def __post_init__(self) -> None:
        t = self.cluster.options
        if not t.image:
            raise ConfigError(
                "measuring a cluster needs the probe image (built from deploy/Dockerfile); set it, pinned by digest",
                path=self.cluster.spec_path,
                key="target.image",
            )
        self.ns = t.namespace
        self.core = self.cluster.kube.core
        self.batch = self.cluster.kube.batch
        self.label = run_label(self.plan.run_id)
        self.attempt = uuid.uuid4().hex[:12]  # this pass's pods (LABEL_ATTEMPT)
        self.labels = {LABEL_RUN: self.label, LABEL_MANAGED: "gpucert", LABEL_ATTEMPT: self.attempt}
        self.cm_name = f"gpucert-{self.label}"
        self.probe_plan = ProbePlan(
            run_id=self.plan.run_id,
            node="(set by --node)",
            target="kubernetes",
            probes=list(self.plan.probes),
            device="cupy",
            samples={Probe(k): n for k, n in self.plan.samples.items()},
            dcgm=DcgmPlan(level=self.plan.dcgm_level),
            fabric=self.plan.fabric,
            pool_rails=dict(self.plan.rails),
        )
        most = max([self.gpus_per_node, *self.plan.gpus.values()])
        needed = job_seconds(self.probe_plan, most)
        if t.active_deadline_seconds is not None and t.active_deadline_seconds < needed:
            raise ConfigError(
                f"{t.active_deadline_seconds} s is shorter than the probes need on a {most}-GPU node ({needed} s: "
                "the preflight, DCGM's level, every probe's budget and watchdog, a margin); raise it or leave it out",
                path=self.cluster.spec_path,
                key="target.activeDeadlineSeconds",
            )

    def deadline_for(self, node: str | None) -> int:
        """The Job's activeDeadlineSeconds: the spec's, or what the node's plan needs (None: the all-reduce)."""
        t = self.cluster.options
        if t.active_deadline_seconds is not None:
            return t.active_deadline_seconds
        if node is None:
            return fabric_seconds(self.probe_plan, t.pending_timeout_seconds + 60)
        return job_seconds(self.probe_plan, self.gpus_for(node))

    # ---- objects -----------------------------------------------------------------------------------------------

    def create_configmap(self, name: str | None = None) -> str:
        probe_plan = self.probe_plan
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name or self.cm_name,
                "namespace": self.ns,
                "labels": self.labels,
                "annotations": {"gpucert.io/run-id": self.plan.run_id, "gpucert.io/version": __version__},
            },
            "data": {"plan.json": probe_plan.model_dump_json(by_alias=True)},
        }
        resp = self.cluster.kube.call(
            "create",
            f"configmaps in namespace {self.ns}",
            self.core.create_namespaced_config_map,
            namespace=self.ns,
            body=body,
        )
        return str(json.loads(resp.data)["metadata"]["uid"])

    def owned_meta(self, name: str, owner: str, owner_uid: str, labels: dict[str, str], **notes: str) -> dict[str, Any]:
        """Metadata of an object the run's ConfigMap `owner` owns: deleting that ConfigMap cascades to it.

        No `blockOwnerDeletion`: it matters only to a foreground deletion of the owner, which gpucert never asks
        for, and where OwnerReferencesPermissionEnforcement is on (OpenShift) setting it needs `update` on the
        owner's finalizers, a grant this would be the only use of."""
        return {
            "name": name,
            "namespace": self.ns,
            "labels": labels,
            "annotations": {"gpucert.io/run-id": self.plan.run_id, **notes},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": owner_uid}],
        }

    def probe_pod(
        self,
        plan_configmap: str,
        extra_args: Sequence[str] = (),
        *,
        env: Sequence[dict[str, Any]] = (),
        limits: dict[str, str] | None = None,
        ports: Sequence[dict[str, Any]] = (),
        gpus: int | None = None,
    ) -> dict[str, Any]:
        """The probe pod's spec (kubernetes_podspec.py) on `gpus` GPUs, the node's by default."""
        c = self.cluster
        n = gpus or self.gpus_per_node
        return pod_spec(c.options, c.tolerations, plan_configmap, n, extra_args, env=env, limits=limits, ports=ports)

    def hostname(self, node: str) -> str:
        """The node's `kubernetes.io/hostname` label (the scheduler places by it; it need not equal the name)."""
        known = self.cluster.hostnames.get(node)
        if known is not None:
            return known
        try:
            resp = self.cluster.kube.call("get", f"node {node}", self.core.read_node, name=node)
            labels = (json.loads(resp.data).get("metadata") or {}).get("labels") or {}
        except ClusterAccessError as exc:
            if status_of(exc) != 404:
                raise
            labels = {}  # gone: the pod stays Pending and the node is reported deleted
        self.cluster.hostnames[node] = labels.get(HOSTNAME, node)
        self.cluster.labels.setdefault(node, labels)
        return self.cluster.hostnames[node]

    def job(
        self, meta: dict[str, Any], labels: dict[str, str], pod: dict[str, Any], deadline: int, **spec: Any
    ) -> dict[str, Any]:
        """A probe Job: one try, its deadline, gone an hour after it finished; `spec` adds to its spec."""
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                **spec,
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "ttlSecondsAfterFinished": 3600,
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        }

    def job_body(self, node: str, owner_uid: str) -> dict[str, Any]:
        labels = {**self.labels, LABEL_NODE: node[:63]}
        name = f"gpucert-{self.label}-{short(node)}"
        on_node = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [self.hostname(node)]}]}
        affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [on_node]}}
        }
        meta = self.owned_meta(name, self.cm_name, owner_uid, labels, **{"gpucert.io/node": node})
        pod = {"affinity": affinity, **self.probe_pod(self.cm_name, gpus=self.gpus_for(node), limits=self.nics(node))}
        return self.job(meta, labels, pod, self.deadline_for(node))

    def nics(self, node: str) -> dict[str, str] | None:
        """The probe pod's RDMA resource, on a node of a fabric pool: it reads the NICs' DMA-BUF support
        (fabric.gdr), which libibverbs asks through /dev/infiniband, there only where the device plugin put it."""
        if not self.plan.fabric or self.plan.rails_for(node) is None:
            return None
        return self.plan.rdma_for(node, self.cluster.options.fabric_resources) or None

    def gpus_for(self, node: str) -> int:
        """All the GPUs the node's pool expects (several pools may expect different counts)."""
        return self.plan.gpus.get(node, self.gpus_per_node)

    def _start(self, node: str, owner_uid: str) -> None:
        body = self.job_body(node, owner_uid)
        self.cluster.kube.call(
            "create", f"jobs in namespace {self.ns}", self.batch.create_namespaced_job, namespace=self.ns, body=body
        )
        self._active[node] = _NodeRun(node=node, job=body["metadata"]["name"], created=self.clock())
        self.max_active_seen = max(self.max_active_seen, len(self._active))

    def _finish(self, run: _NodeRun, evidence: NodeEvidence) -> None:
        self.sink(evidence)
        del self._active[run.node]
        # already gone (TTL, or deleted by hand) is fine: the final cleanup sweeps by label anyway
        with contextlib.suppress(ClusterAccessError, IncompleteRunError):
            self.cluster.kube.call(
                "delete",
                f"job {run.job}",
                self.batch.delete_namespaced_job,
                name=run.job,
                namespace=self.ns,
                propagation_policy="Background",
            )

    def _failed(self, run: _NodeRun, message: str) -> None:
        self._finish(run, failed_evidence(run.node, message))

    # ---- outcomes ------------------------------------------------------------------------------------------------

    def log(self, pod: str) -> FramedLog:
        return read_pod_log(self.cluster.kube, self.core, self.ns, pod)

    def log_or_none(self, pod: str) -> FramedLog | None:
        try:
            return self.log(pod)
        except (ClusterAccessError, IncompleteRunError):
            return None

    @staticmethod
    def tail(log: FramedLog | None) -> str:
        return " | ".join(line for line in (log.tail if log is not None else []) if line.strip())

    def node_gone(self, node: str) -> bool:
        try:
            self.cluster.kube.call("get", f"node {node}", self.core.read_node, name=node)
        except ClusterAccessError as exc:
            return status_of(exc) == 404
        except IncompleteRunError:
            pass
        return False

    def _job_deadline(self, run: _NodeRun) -> str:
        """The Job's own account when its activeDeadlineSeconds ran out (it then ends the pod)."""
        try:
            resp = self.cluster.kube.call(
                "get", f"job {run.job}", self.batch.read_namespaced_job, name=run.job, namespace=self.ns
            )
        except (ClusterAccessError, IncompleteRunError):
            return ""
        for cond in (json.loads(resp.data).get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Failed" and cond.get("reason") == "DeadlineExceeded":
                secs = self.deadline_for(run.node)
                return f"the Job's activeDeadlineSeconds ({secs} s) ran out (DeadlineExceeded: {cond.get('message')})"
        return ""

    def _stopped(self, run: _NodeRun, pod: dict[str, Any], why: str) -> None:
        """A probe pod ended without its document: keep what its log's parts say was measured, or say why not."""
        gc = disruption(pod) if node_deleted(pod) else None
        if gc is not None or (disruption(pod) is None and self.node_gone(run.node)):
            said = f"{gc[0]}: {gc[1]}" if gc is not None else f"{run.node} is no longer in the cluster; {why}"
            self._failed(run, f"the node {run.node} was deleted during the run ({said})")
            return
        why = self._job_deadline(run) or why
        log = run.log if run.log is not None or run.pod is None else self.log_or_none(run.pod)
        # OOM-killed: one cause (the pod's memory), so the node's one finding, not an error per probe left undone
        oom = (container_state(pod.get("status") or {}, "terminated") or {}).get("reason") == "OOMKilled"
        try:
            evidence = rebuild(log.parts(), why) if log is not None and not oom else None
        except FramingError as exc:
            evidence, why = None, f"{why}; the evidence in the log of pod {run.pod} on {run.node} is unusable: {exc}"
        if evidence is not None and evidence.node == run.node:
            self._finish(run, evidence)  # the probes it finished stand; the others are errors naming `why`
            return
        tail = self.tail(log)
        self._failed(run, why + (f"; log tail: {tail}" if tail else ""))

    def _on_pod(self, pod: dict[str, Any], deleted: bool) -> None:
        labels = pod["metadata"].get("labels") or {}
        node = next((n for n in self._active if n[:63] == labels.get(LABEL_NODE)), None)
        if node is None:
            return
        run = self._active[node]
        run.pod = pod["metadata"]["name"]
        status = pod.get("status") or {}
        phase = run.phase = status.get("phase")
        waiting = container_state(status, "waiting")
        ending = bool(pod["metadata"].get("deletionTimestamp")) or disruption(pod) is not None
        if ending and run.log is None and phase != "Succeeded" and not node_deleted(pod):
            run.log = self.log_or_none(run.pod)  # read it while the pod still exists
        if deleted and phase != "Succeeded":
            why = stop_reason(pod) if (phase == "Failed" or disruption(pod)) else "it was deleted before it finished"
            self._stopped(run, pod, f"the probe pod {run.pod} stopped: {why}")
        elif phase == "Succeeded":
            self._collect(run)
        elif phase == "Failed":
            self._stopped(run, pod, f"the probe pod failed: {stop_reason(pod)}")
        elif waiting and waiting.get("reason") in IMAGE_ERRORS:
            self._failed(run, f"the probe pod cannot start: {waiting['reason']}: {waiting.get('message', '')}".strip())
        elif phase == "Pending":
            run.unschedulable = unschedulable(pod) or run.unschedulable

    def _collect(self, run: _NodeRun) -> None:
        assert run.pod is not None
        try:
            document = self.log(run.pod).document()
            evidence = NodeEvidence.model_validate_json(document)
        except (ClusterAccessError, IncompleteRunError) as exc:  # a 404 (node object gone), a kubelet 5xx
            gone = f"; the node {run.node} was deleted during the run" if self.node_gone(run.node) else ""
            self._failed(run, f"cannot read the log of {run.pod}: {exc}{gone}")
            return
        except FramingError as exc:
            self._failed(run, f"the evidence in the log of pod {run.pod} on {run.node} is unusable: {exc}")
            return
        except ValidationError as exc:
            self._failed(run, f"the evidence in the log of {run.pod} is not an evidence document: {exc.errors()[0]}")
            return
        if evidence.node != run.node:
            self._failed(run, f"the probe reported node {evidence.node!r}, not {run.node!r}")
            return
        self._finish(run, evidence)

    def _busy(self, run: _NodeRun) -> str:
        """Who holds the node's GPUs, from its pods; or why the scheduler finds too few with none held."""
        try:
            resp = self.cluster.kube.call(
                "list",
                f"pods on node {run.node}",
                self.core.list_pod_for_all_namespaces,
                field_selector=f"spec.nodeName={run.node}",
            )
            holders = gpu_pods(json.loads(resp.data).get("items") or [], run_label=self.label)
        except (ClusterAccessError, IncompleteRunError) as exc:
            return f"{run.node}'s GPUs are taken (the pods holding them could not be listed: {exc})"
        if holders:
            return f"{run.node} is busy: its GPUs are held by {', '.join(holders)}"
        return (
            f"{run.node} has fewer free nvidia.com/gpu than the {self.gpus_for(run.node)} requested and no pod holds "
            "any: its allocatable count is short (a GPU the device plugin marked unhealthy?)"
        )

    def _expire(self) -> None:
        """Pending too long is the node's finding (a busy node may wait longer); so is running past the deadline."""
        t = self.cluster.options
        for run in list(self._active.values()):
            age = self.clock() - run.created
            busy = lacks_gpus(run.unschedulable)
            limit = max(t.pending_timeout_seconds, t.busy_timeout_seconds) if busy else t.pending_timeout_seconds
            if run.phase in (None, "Pending") and age > limit:
                if busy:
                    self._failed(
                        run,
                        f"{self._busy(run)}; the probe pod waited {limit} s ({run.unschedulable}); free the node, or "
                        "let the run wait longer with target.busyTimeoutSeconds",
                    )
                elif self.node_gone(run.node):
                    self._failed(run, f"the node {run.node} was deleted during the run (its probe pod was Pending)")
                else:
                    why = run.unschedulable or ("no pod was created" if run.pod is None else "")
                    self._failed(run, f"the probe pod was still Pending after {limit} s" + (f" ({why})" if why else ""))
            elif age > self.deadline_for(run.node) + 60:
                self._stopped(run, {}, f"the probe ran past its {self.deadline_for(run.node)} s deadline")

    # ---- the loop ------------------------------------------------------------------------------------------------

    def follow(self, handler: PodHandler, step: Callable[[], bool]) -> None:
        """Watch this pass's pods with `handler` while `step()` (called between watch slices) says there is more:
        not a pod an earlier pass of the run left going (a soak's previous round, whose Jobs had the same names)."""
        selector = f"{LABEL_RUN}={self.label},{LABEL_ATTEMPT}={self.attempt}"
        PodWatch(self.cluster, self.ns, selector).follow(handler, step)

    def run(self, nodes: list[str]) -> None:
        queue = deque(refuse(self, nodes))
        if not queue:
            return
        owner = self.create_configmap()

        def on_pod(pod: dict[str, Any], deleted: bool) -> bool:
            before = len(self._active)
            self._on_pod(pod, deleted)
            return len(self._active) < before  # a slot is free: go and start the next Job

        def step() -> bool:
            self._expire()
            while queue and len(self._active) < self.cluster.options.max_parallel:
                self._start(queue.popleft(), owner)
            return bool(queue or self._active)

        try:
            self.follow(on_pod, step)
        finally:
            cleanup_runs(self.cluster.kube, self.ns, self.label)
