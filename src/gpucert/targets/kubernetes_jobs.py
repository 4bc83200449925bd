"""Probe Jobs: kubernetes.py's helper that measures a live cluster on its own nodes.

One Job per node (nodeName pinned, all its GPUs requested, the spec's tolerations, a deadline and a TTL), at most
`maxParallel` at once, the plan mounted from the run's ConfigMap, progress from a watch on the run's pods, and each
node's evidence read from its pod log (framed with length and sha256) and written the moment it arrives. Anything
that stops a node (Pending past its timeout, an image that does not pull, OOMKilled, a non-zero exit, a cut log,
the node deleted) becomes that node's finding and the others go on. Every object carries the run's label and is
owned by the run's ConfigMap; all are deleted at the end, on failure and on interrupt.

The all-reduce across nodes is one Indexed Job (a pod per node, held to the chosen nodes by node affinity and to
one per node by anti-affinity) with a headless Service, so process 0 answers at `<job>-0.<service>` for the
rendezvous; process 0's log carries the multi-node evidence.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gpucert import __version__
from gpucert.errors import ClusterAccessError, ConfigError, IncompleteRunError
from gpucert.evidence import FabricEvidence, NodeEvidence, ProbeError
from gpucert.probes.framing import FramingError, unframe
from gpucert.probes.multinode import DEFAULT_PORT
from gpucert.probes.runner import DcgmPlan, ProbePlan
from gpucert.targets.base import EvidenceSink, MeasurePlan

if TYPE_CHECKING:
    from gpucert.targets.kubernetes import KubernetesTarget

__all__ = ["LABEL_MANAGED", "LABEL_NODE", "LABEL_RUN", "ProbeJobs", "cleanup_runs", "run_label"]

LABEL_RUN = "gpucert.io/run"
LABEL_NODE = "gpucert.io/node"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_ROLE = "gpucert.io/role"
LABEL_FABRIC = "gpucert.io/fabric"  # which all-reduce across nodes a pod belongs to (several run at once)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
PLAN_PATH = "/etc/gpucert/plan.json"
IMAGE_ERRORS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
}
WATCH_SLICE_S = 5


def run_label(run_id: str) -> str:
    """A label value for the run (labels are 63 characters at most; the full run id goes in an annotation)."""
    return "r" + hashlib.sha256(run_id.encode()).hexdigest()[:15]


def _short(node: str) -> str:
    return hashlib.sha256(node.encode()).hexdigest()[:8]


def _container_state(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The first container's `terminated` or `waiting` state in a pod status, if any has one."""
    for cs in status.get("containerStatuses") or []:
        state = (cs.get("state") or {}).get(kind)
        if state:
            return dict(state)
    return None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _NodeRun:
    node: str
    job: str
    created: float
    pod: str | None = None
    phase: str | None = None
    unschedulable: str = ""


@dataclass
class _FabricRun:
    name: str
    nodes: list[str]
    created: float
    pods: dict[int, dict[str, Any]] = field(default_factory=dict)
    result: FabricEvidence | None = None


PodHandler = Callable[[dict[str, Any], bool], bool]  # (pod, deleted) -> stop watching now


@dataclass
class ProbeJobs:
    target: KubernetesTarget
    plan: MeasurePlan
    sink: EvidenceSink
    gpus_per_node: int
    clock: Callable[[], float] = time.monotonic
    max_active_seen: int = 0
    _active: dict[str, _NodeRun] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from kubernetes import client

        t = self.target.target
        if not t.image:
            raise ConfigError(
                "measuring a cluster needs the probe image (built from deploy/Dockerfile); set it, pinned by digest",
                path=self.target.spec.path,
                key="target.image",
            )
        self.ns = t.namespace
        self.core = client.CoreV1Api(self.target.api)
        self.batch = client.BatchV1Api(self.target.api)
        self.label = run_label(self.plan.run_id)
        self.labels = {LABEL_RUN: self.label, LABEL_MANAGED: "gpucert"}
        self.cm_name = f"gpucert-{self.label}"

    # ---- objects -----------------------------------------------------------------------------------------------

    def _create_configmap(self, name: str | None = None) -> str:
        probe_plan = ProbePlan(
            run_id=self.plan.run_id,
            node="(set by --node)",
            target="kubernetes",
            probes=list(self.plan.probes),
            device="cupy",
            dcgm=DcgmPlan(level=self.plan.dcgm_level),
        )
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
        resp = self.target._call(
            "create",
            f"configmaps in namespace {self.ns}",
            self.core.create_namespaced_config_map,
            namespace=self.ns,
            body=body,
        )
        return str(json.loads(resp.data)["metadata"]["uid"])

    def _owned_meta(
        self, name: str, owner: str, owner_uid: str, labels: dict[str, str], **notes: str
    ) -> dict[str, Any]:
        """Metadata of an object the run's ConfigMap `owner` owns: deleting that ConfigMap cascades to it."""
        return {
            "name": name,
            "namespace": self.ns,
            "labels": labels,
            "annotations": {"gpucert.io/run-id": self.plan.run_id, **notes},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": owner_uid, "blockOwnerDeletion": True}
            ],
        }

    def _probe_pod(
        self,
        plan_configmap: str,
        extra_args: Sequence[str] = (),
        *,
        env: Sequence[dict[str, Any]] = (),
        limits: dict[str, str] | None = None,
        ports: Sequence[dict[str, Any]] = (),
    ) -> dict[str, Any]:
        """The probe pod's spec: `python -m gpucert.probes` on all the node's GPUs, the plan from the ConfigMap."""
        container: dict[str, Any] = {
            "name": "probe",
            "image": self.target.target.image,
            "command": [
                *("python", "-m", "gpucert.probes", "--plan", PLAN_PATH, "--node", "$(NODE_NAME)", "--framed"),
                *extra_args,
            ],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, *env],
            "resources": {"limits": {"nvidia.com/gpu": str(self.gpus_per_node), **(limits or {})}},
            "volumeMounts": [{"name": "plan", "mountPath": "/etc/gpucert", "readOnly": True}],
        }
        if ports:
            container["ports"] = list(ports)
        return {
            "restartPolicy": "Never",
            "tolerations": self.target.target.tolerations,
            "containers": [container],
            "volumes": [{"name": "plan", "configMap": {"name": plan_configmap}}],
        }

    def job_body(self, node: str, owner_uid: str) -> dict[str, Any]:
        t = self.target.target
        labels = {**self.labels, LABEL_NODE: node[:63]}
        name = f"gpucert-{self.label}-{_short(node)}"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self._owned_meta(name, self.cm_name, owner_uid, labels, **{"gpucert.io/node": node}),
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": t.active_deadline_seconds,
                "ttlSecondsAfterFinished": 3600,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"nodeName": node, **self._probe_pod(self.cm_name)},
                },
            },
        }

    def _start(self, node: str, owner_uid: str) -> None:
        body = self.job_body(node, owner_uid)
        self.target._call(
            "create", f"jobs in namespace {self.ns}", self.batch.create_namespaced_job, namespace=self.ns, body=body
        )
        self._active[node] = _NodeRun(node=node, job=body["metadata"]["name"], created=self.clock())
        self.max_active_seen = max(self.max_active_seen, len(self._active))

    def _finish(self, run: _NodeRun, evidence: NodeEvidence) -> None:
        self.sink(evidence)
        del self._active[run.node]
        # already gone (TTL, or deleted by hand) is fine: the final cleanup sweeps by label anyway
        with contextlib.suppress(ClusterAccessError):
            self.target._call(
                "delete",
                f"job {run.job}",
                self.batch.delete_namespaced_job,
                name=run.job,
                namespace=self.ns,
                propagation_policy="Background",
            )

    def _failed(self, run: _NodeRun, message: str) -> None:
        now = _now()
        self._finish(
            run,
            NodeEvidence(
                node=run.node,
                target="kubernetes",
                probe_version=__version__,
                started=now,
                finished=now,
                collected=False,
                errors=[ProbeError(probe="*", message=message)],
            ),
        )

    # ---- outcomes ------------------------------------------------------------------------------------------------

    def _log(self, pod: str) -> str:
        resp = self.target._call(
            "get", f"the log of pod {pod}", self.core.read_namespaced_pod_log, name=pod, namespace=self.ns
        )
        return bytes(resp.data).decode(errors="replace")

    def _on_pod(self, pod: dict[str, Any], deleted: bool) -> None:
        labels = pod["metadata"].get("labels") or {}
        node = next((n for n in self._active if n[:63] == labels.get(LABEL_NODE)), None)
        if node is None:
            return
        run = self._active[node]
        run.pod = pod["metadata"]["name"]
        status = pod.get("status") or {}
        phase = run.phase = status.get("phase")
        term = _container_state(status, "terminated")
        waiting = _container_state(status, "waiting")
        if deleted and phase not in ("Succeeded", "Failed"):
            self._failed(run, f"the probe pod {run.pod} was deleted before it finished{self._node_gone(node)}")
        elif phase == "Succeeded":
            self._collect(run)
        elif phase == "Failed":
            reason = (term or {}).get("reason") or status.get("reason") or "Failed"
            code = (term or {}).get("exitCode")
            tail = self._log_tail(run.pod)
            self._failed(
                run,
                f"the probe pod failed: {reason}"
                + (f" (exit code {code})" if code is not None else "")
                + (f"; log tail: {tail}" if tail else ""),
            )
        elif waiting and waiting.get("reason") in IMAGE_ERRORS:
            self._failed(run, f"the probe pod cannot start: {waiting['reason']}: {waiting.get('message', '')}".strip())
        elif phase == "Pending":
            for cond in status.get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    run.unschedulable = f"{cond.get('reason', '')}: {cond.get('message', '')}"

    def _log_tail(self, pod: str) -> str:
        try:
            lines = self._log(pod).strip().splitlines()
        except (ClusterAccessError, IncompleteRunError):
            return ""
        return " | ".join(lines[-5:])

    def _node_gone(self, node: str) -> str:
        try:
            self.target._call("get", f"node {node}", self.core.read_node, name=node)
        except ClusterAccessError as exc:
            if "404" in str(exc):
                return f"; the node {node} was deleted during the run"
        except IncompleteRunError:
            pass
        return ""

    def _collect(self, run: _NodeRun) -> None:
        assert run.pod is not None
        try:
            document = unframe(self._log(run.pod))
            evidence = NodeEvidence.model_validate_json(document)
        except FramingError as exc:
            self._failed(run, f"the evidence in the log of {run.pod} is unusable: {exc}")
            return
        except ValidationError as exc:
            self._failed(run, f"the evidence in the log of {run.pod} is not an evidence document: {exc.errors()[0]}")
            return
        if evidence.node != run.node:
            self._failed(run, f"the probe reported node {evidence.node!r}, not {run.node!r}")
            return
        self._finish(run, evidence)

    def _expire(self) -> None:
        """Pending too long is the node's finding; so is running past the Job's deadline without a verdict."""
        t = self.target.target
        for run in list(self._active.values()):
            age = self.clock() - run.created
            if run.phase in (None, "Pending") and age > t.pending_timeout_seconds:
                why = run.unschedulable or ("no pod was created" if run.pod is None else "")
                self._failed(
                    run,
                    f"the probe pod was still Pending after {t.pending_timeout_seconds} s"
                    + (f" ({why})" if why else ""),
                )
            elif age > t.active_deadline_seconds + 60:
                self._failed(run, f"the probe ran past its {t.active_deadline_seconds} s deadline")

    # ---- the loop ------------------------------------------------------------------------------------------------

    def _list(self, handler: PodHandler) -> str:
        """Read the run's pods as they are now; returns the list's resourceVersion to watch from.

        Watch events come in resourceVersion order, so a watch stopped half-way resumes from the last event it
        handled; the objects of a list do not, which is why (re)starting is a list followed by a watch.
        """
        resp = self.target._call(
            "list",
            f"pods in namespace {self.ns}",
            self.core.list_namespaced_pod,
            namespace=self.ns,
            label_selector=f"{LABEL_RUN}={self.label}",
        )
        data = json.loads(resp.data)
        for pod in data.get("items") or []:
            handler(pod, False)
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, resource_version: str | None, seconds: int, handler: PodHandler) -> str | None:
        """Handle the run's pod events for up to `seconds`; returns the resourceVersion to resume from."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        if not resource_version:
            resource_version = self._list(handler)
        w = watch.Watch()
        kwargs: dict[str, Any] = {
            "namespace": self.ns,
            "label_selector": f"{LABEL_RUN}={self.label}",
            "timeout_seconds": seconds,
            "resource_version": resource_version,
        }
        try:
            for event in w.stream(self.core.list_namespaced_pod, **kwargs):
                raw = event.get("raw_object") or {}
                if event.get("type") == "ERROR":
                    return None  # 410 Gone and friends: resume from a fresh list
                resource_version = (raw.get("metadata") or {}).get("resourceVersion", resource_version)
                if handler(raw, event.get("type") == "DELETED"):
                    w.stop()  # something finished: go and act on it
        except ApiException as exc:
            if exc.status == 410:
                return None
            raise
        return resource_version

    def _follow(self, handler: PodHandler, step: Callable[[], bool]) -> None:
        """Watch the run's pods with `handler` while `step()` (called between watch slices) says there is more."""
        rv: str | None = None
        failures = 0
        while step():
            try:
                rv = self._watch(rv, WATCH_SLICE_S, handler)
                failures = 0
            except Exception as exc:
                failures += 1
                if failures > self.target.retries:
                    raise IncompleteRunError(
                        f"watching the probe pods at {self.target.endpoint} failed {failures} times: {exc}"
                    ) from exc
                time.sleep(self.target.backoff_s * 2 ** (failures - 1))
                rv = None

    def run(self, nodes: list[str]) -> None:
        queue = deque(nodes)
        owner = self._create_configmap()

        def on_pod(pod: dict[str, Any], deleted: bool) -> bool:
            before = len(self._active)
            self._on_pod(pod, deleted)
            return len(self._active) < before  # a slot is free: go and start the next Job

        def step() -> bool:
            self._expire()
            while queue and len(self._active) < self.target.target.max_parallel:
                self._start(queue.popleft(), owner)
            return bool(queue or self._active)

        try:
            self._follow(on_pod, step)
        finally:
            cleanup_runs(self.target, self.ns, self.label)

    # ---- the all-reduce across nodes ----------------------------------------------------------------------------

    def fabric_bodies(self, name: str, nodes: list[str], owner_uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The headless Service and the Indexed Job of the all-reduce across `nodes`."""
        t = self.target.target
        labels = {**self.labels, LABEL_ROLE: "nccl-multinode", LABEL_FABRIC: name}
        meta = self._owned_meta(name, name, owner_uid, labels, **{"gpucert.io/nodes": ",".join(nodes)})
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "publishNotReadyAddresses": True,  # the rendezvous starts before any readiness could be known
                "ports": [{"name": "rendezvous", "port": DEFAULT_PORT, "protocol": "TCP"}],
            },
        }
        args = [
            *("--processes", str(len(nodes)), "--rank", "$(RANK)"),
            *("--rendezvous", f"{name}-0.{name}:{DEFAULT_PORT}"),
            # past the Pending timeout, so a pod that never starts is reported as such
            *("--rendezvous-timeout", str(t.pending_timeout_seconds + 60)),
        ]
        rank = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
        pod = self._probe_pod(
            name,
            args,
            env=[{"name": "RANK", "valueFrom": rank}],
            limits=t.fabric_resources,
            ports=[{"name": "rendezvous", "containerPort": DEFAULT_PORT}],
        )
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "completionMode": "Indexed",
                "completions": len(nodes),
                "parallelism": len(nodes),
                "backoffLimit": 0,
                "activeDeadlineSeconds": t.active_deadline_seconds,
                "ttlSecondsAfterFinished": 3600,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "subdomain": name,  # with the hostname `<job>-<index>`: `<job>-0.<service>` resolves
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}
                                    ]
                                }
                            },
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
                                ]
                            },
                        },
                        **pod,
                    },
                },
            },
        }
        return service, job

    def _fabric_failed(self, run: _FabricRun, message: str) -> None:
        now = _now()
        run.result = FabricEvidence(
            run_id=self.plan.run_id,
            target="kubernetes",
            probe_version=__version__,
            started=now,
            finished=now,
            nodes=run.nodes,
            gpus_per_node=self.gpus_per_node,
            collected=False,
            errors=[ProbeError(probe="nccl", message=message)],
        )

    def _on_fabric_pod(self, runs: dict[str, _FabricRun], pod: dict[str, Any], deleted: bool) -> bool:
        meta = pod["metadata"]
        run = runs.get((meta.get("labels") or {}).get(LABEL_FABRIC, ""))
        if run is None or run.result is not None:
            return False
        index = int((meta.get("annotations") or {}).get(INDEX_ANNOTATION, "-1"))
        run.pods[index] = pod
        status = pod.get("status") or {}
        phase = status.get("phase")
        where = f"process {index} ({pod['spec'].get('nodeName') or 'not scheduled'})"
        if index == 0 and phase == "Succeeded":
            try:
                run.result = FabricEvidence.model_validate_json(unframe(self._log(meta["name"])))
            except (FramingError, ValidationError) as exc:
                self._fabric_failed(run, f"the evidence in the log of {meta['name']} is unusable: {exc}")
        elif phase == "Failed" or (deleted and phase != "Succeeded"):
            term = _container_state(status, "terminated")
            reason = "deleted" if deleted else (term or {}).get("reason") or status.get("reason") or "Failed"
            tail = "" if deleted else self._log_tail(meta["name"])
            self._fabric_failed(
                run,
                f"{where} of the all-reduce across nodes failed: {reason}" + (f"; log tail: {tail}" if tail else ""),
            )
        else:
            waiting = _container_state(status, "waiting")
            if waiting and waiting.get("reason") in IMAGE_ERRORS:
                self._fabric_failed(run, f"{where} cannot start: {waiting['reason']}: {waiting.get('message', '')}")
        return run.result is not None

    def _fabric_expire(self, run: _FabricRun) -> None:
        t = self.target.target
        age = self.clock() - run.created
        pending = sorted(
            i
            for i in range(len(run.nodes))
            if (run.pods.get(i, {}).get("status") or {}).get("phase", "Pending") == "Pending"
        )
        if pending and age > t.pending_timeout_seconds:
            why = []
            for i in pending:
                conds = (run.pods.get(i, {}).get("status") or {}).get("conditions") or []
                msg = next((c.get("message", "") for c in conds if c.get("type") == "PodScheduled"), "")
                why.append(
                    f"process {i}" + (f" ({msg})" if msg else " (no pod was created)" if i not in run.pods else "")
                )
            self._fabric_failed(
                run,
                f"the all-reduce across nodes was still Pending after {t.pending_timeout_seconds} s: {'; '.join(why)}",
            )
        elif age > t.active_deadline_seconds + 60:
            self._fabric_failed(run, f"the all-reduce across nodes ran past its {t.active_deadline_seconds} s deadline")

    def run_fabrics(self, groups: list[list[str]]) -> list[FabricEvidence]:
        """One all-reduce across each group of nodes, all at once (no node is in two groups); whatever stops one
        becomes its document's error, never an exception."""
        runs: dict[str, _FabricRun] = {}
        try:
            for nodes in groups:
                name = f"gpucert-{self.label}-n{_short(','.join(nodes))}"
                owner = self._create_configmap(name)
                runs[name] = _FabricRun(name=name, nodes=nodes, created=self.clock())
                service, job = self.fabric_bodies(name, nodes, owner)
                self.target._call(
                    "create",
                    f"services in namespace {self.ns}",
                    self.core.create_namespaced_service,
                    namespace=self.ns,
                    body=service,
                )
                self.target._call(
                    "create",
                    f"jobs in namespace {self.ns}",
                    self.batch.create_namespaced_job,
                    namespace=self.ns,
                    body=job,
                )

            def step() -> bool:
                waiting = [r for r in runs.values() if r.result is None]
                for r in waiting:
                    self._fabric_expire(r)
                return any(r.result is None for r in waiting)

            self._follow(lambda pod, deleted: self._on_fabric_pod(runs, pod, deleted), step)
        finally:
            cleanup_runs(self.target, self.ns, self.label)
        results = [r.result for r in runs.values()]
        assert all(r is not None for r in results)
        return [r for r in results if r is not None]


def cleanup_runs(target: KubernetesTarget, namespace: str, label: str | None = None) -> int:
    """Delete the Jobs, Pods, Services and ConfigMaps of one run (or, without `label`, of every gpucert run)."""
    from kubernetes import client

    core, batch = client.CoreV1Api(target.api), client.BatchV1Api(target.api)
    selector = f"{LABEL_RUN}={label}" if label else f"{LABEL_MANAGED}=gpucert"
    deleted = 0
    kinds: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
        ("jobs", batch.list_namespaced_job, batch.delete_namespaced_job),
        ("pods", core.list_namespaced_pod, core.delete_namespaced_pod),
        ("services", core.list_namespaced_service, core.delete_namespaced_service),
        ("configmaps", core.list_namespaced_config_map, core.delete_namespaced_config_map),
    ]
    for kind, lister, deleter in kinds:
        for obj in list(
            target._pages(
                "list", f"{kind} in namespace {namespace}", lister, namespace=namespace, label_selector=selector
            )
        ):
            name = obj["metadata"]["name"]
            try:
                target._call(
                    "delete", f"{kind} {name}", deleter, name=name, namespace=namespace, propagation_policy="Background"
                )
                deleted += 1
            except ClusterAccessError as exc:
                if "404" not in str(exc):
                    raise
    return deleted
