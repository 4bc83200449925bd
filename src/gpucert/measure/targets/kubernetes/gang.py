"""The all-reduce across nodes admitted whole: a JobSet that Kueue admits (every rank or none), where the cluster
has both and the spec names a LocalQueue (`target.gang`); fabric.py's Indexed Job everywhere else.

Why: an Indexed Job's pods are scheduled one by one, so with part of the pool busy some ranks start and wait at the
rendezvous for peers that never come. Kueue admits a workload only when the quota for all its pods is free, and
while it waits the JobSet stays suspended: no pod exists, nothing holds a GPU, nothing waits at a rendezvous.
Kueue counts quota, not nodes: a node busy with a pod outside the ClusterQueue still leaves its rank Pending after
admission, and the Pending timeout (counted from the admission) ends it as on the Indexed Job. A
JobSet not admitted within `admissionTimeoutSeconds` is the all-reduce's error ("not admitted in N s", with
Kueue's own reason from its Workload), never a hang, and it is deleted.

What the pinned releases say (their CRDs are tests/fixtures/gang/):
- JobSet v0.8.2 (kubernetes-sigs/jobset): `jobset.x-k8s.io/v1alpha2`; with `network.enableDNSHostnames` each pod
  answers at `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`, the subdomain being a headless Service
  the JobSet controller creates (pkg/controllers/jobset_controller.go, createHeadlessSvcIfNecessary; publishing
  not-ready addresses by default). Exclusive placement is the annotation `alpha.jobset.sigs.k8s.io/exclusive-topology`
  (api/jobset/v1alpha2/jobset_types.go, ExclusiveKey): every pod of a child Job in one domain of the label, and
  no other JobSet's Job in that domain. It is set only where every node of the collective is in one domain: the
  certification's rings are one per domain (plan/run.py); a pair across racks could never be placed so.
- Kueue v0.10.6 (kubernetes-sigs/kueue): a JobSet joins a LocalQueue by the label `kueue.x-k8s.io/queue-name`
  (pkg/controller/constants/constants.go, QueueLabel); its Workload carries `kueue.x-k8s.io/job-uid` (JobUIDLabel)
  and says why it waits in its QuotaReserved condition (pkg/workload/workload.go,
  UnsetQuotaReservationWithCondition). Kueue takes JobSets up where its configuration lists `jobset.x-k8s.io/jobset`
  in integrations.frameworks (config/components/manager/controller_manager_config.yaml does by default); a JobSet
  with no Workload is said to be one Kueue never took up. Kueue's own topology-aware scheduling
  (`kueue.x-k8s.io/podset-required-topology`, apis/kueue/v1alpha1/tas_types.go) is alpha and off by default in that
  release (pkg/features/kube_features.go, TopologyAwareScheduling) and needs Topology objects, so placement uses
  JobSet's annotation.

Detection reads the two CRDs (apiextensions.k8s.io/v1) once a run (the target's Cluster keeps the answer): a 404 is
"not installed"; only a spec with `target.gang` asks, so a cluster without it sees no new request.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpucert.errors import ClusterAccessError, IncompleteRunError
from gpucert.measure.targets.kubernetes.api import RBAC_HINT, Cluster, KubeApi, status_of
from gpucert.spec.kubernetes import GangSpec

__all__ = [
    "EXCLUSIVE_TOPOLOGY",
    "JOBSET_CRD",
    "KUEUE_CRD",
    "QUEUE_LABEL",
    "RANKS",
    "Gang",
    "delete_jobsets",
    "gang_readiness",
    "installed",
]

JOBSET_CRD = "jobsets.jobset.x-k8s.io"
KUEUE_CRD = "workloads.kueue.x-k8s.io"
JOBSET = {"group": "jobset.x-k8s.io", "version": "v1alpha2", "plural": "jobsets"}
LOCALQUEUE = {"group": "kueue.x-k8s.io", "version": "v1beta1", "plural": "localqueues"}
WORKLOAD = {"group": "kueue.x-k8s.io", "version": "v1beta1", "plural": "workloads"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
RANKS = "ranks"  # the JobSet's one replicated job: a Job of one pod per node


class FabricJobs(Protocol):
    """What the JobSet needs of fabric.py's FabricJobs (which imports this module): its pods and the cluster."""

    cluster: Cluster

    def clock(self) -> float: ...

    def fabric_bodies(
        self, name: str, nodes: list[str], owner_uid: str, rendezvous: str | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def hostname(self, node: str) -> str: ...


def installed(kube: KubeApi, crd: str) -> bool:
    """Whether the cluster serves the CustomResourceDefinition `crd` (its API is there)."""
    try:
        kube.call("get", f"customresourcedefinition {crd}", kube.extensions.read_custom_resource_definition, name=crd)
    except ClusterAccessError as exc:
        if status_of(exc) == 404:
            return False
        if status_of(exc) == 403:
            raise ClusterAccessError(
                f"{exc}; target.gang needs to read the JobSet and Kueue CRDs to know whether they are installed"
            ) from exc
        raise
    return True


def queue_missing(kube: KubeApi, namespace: str, spec: GangSpec) -> str:
    """Why the LocalQueue target.gang names cannot take the run (it does not exist), "" when it can."""
    try:
        kube.call(
            "get",
            f"localqueue {spec.local_queue} in namespace {namespace}",
            kube.custom.get_namespaced_custom_object,
            namespace=namespace,
            name=spec.local_queue,
            **LOCALQUEUE,
        )
    except ClusterAccessError as exc:
        if status_of(exc) != 404:
            raise
        return f"Kueue has no LocalQueue {spec.local_queue!r} in namespace {namespace}"
    return ""


def gang_readiness(kube: KubeApi, namespace: str, spec: GangSpec) -> tuple[str, str, str]:
    """`gpucert preflight`'s row for target.gang: (ok | warn | fail, what it found, the fix). The CRDs absent is a
    warning, not a failure: the run goes ahead as the Indexed Job (and its evidence says so)."""
    try:
        missing = [crd for crd in (JOBSET_CRD, KUEUE_CRD) if not installed(kube, crd)]
        queue = "" if missing else queue_missing(kube, namespace, spec)
    except ClusterAccessError as exc:
        return "warn", f"not known: {exc}", RBAC_HINT
    if missing:
        said = " and ".join(missing)
        absent = f"the {said} CRD{'s are' if len(missing) > 1 else ' is'} absent"
        return (
            "warn",
            f"target.gang is set but {absent}: the run falls back to an Indexed Job (no gang admission)",
            "install JobSet v0.8.2 and Kueue v0.10.6 (docs/probes.md, Gang admission), or remove target.gang",
        )
    if queue:
        return "fail", queue, "kubectl apply -f deploy/kueue/localqueue.yaml, or name an existing one in target.gang"
    return "ok", "JobSet and Kueue are installed: the all-reduce across nodes is one JobSet that Kueue admits", ""


def delete_jobsets(kube: KubeApi, namespace: str, names: list[str]) -> int:
    """Delete the JobSets of these names (their Jobs, pods and Service go with each); gone already, or a cluster
    without the JobSet API, is fine. By name: the role grants `delete`, not `list` (deploy/rbac.yaml). Returns how
    many went."""
    deleted = 0
    for name in names:
        try:
            kube.call(
                "delete",
                f"jobset {name}",
                kube.custom.delete_namespaced_custom_object,
                namespace=namespace,
                name=name,
                propagation_policy="Background",
                **JOBSET,
            )
            deleted += 1
        except ClusterAccessError as exc:
            if status_of(exc) != 404:
                raise
    return deleted


@dataclass
class Gang:
    """The JobSets of one run's all-reduces: made, watched for admission, deleted."""

    jobs: FabricJobs
    spec: GangSpec
    submitted: dict[str, float] = field(default_factory=dict)  # JobSet -> when it was created
    admitted: dict[str, float] = field(default_factory=dict)  # JobSet -> when it was seen admitted
    queue_said: str | None = None  # why the LocalQueue cannot take the run ("" : it can), once asked

    @classmethod
    def detect(cls, jobs: FabricJobs) -> Gang | None:
        """The gang path where the spec asks for it and the cluster has JobSet and Kueue; None: the Indexed Job."""
        spec = jobs.cluster.options.gang
        if spec is None:
            return None
        cluster = jobs.cluster
        if cluster.gang_installed is None:  # asked once a run, not again for each batch or round of all-reduces
            cluster.gang_installed = installed(cluster.kube, JOBSET_CRD) and installed(cluster.kube, KUEUE_CRD)
        return cls(jobs, spec) if cluster.gang_installed else None

    @staticmethod
    def rendezvous(name: str) -> str:
        """Process 0's name: the first pod of the first Job of the replicated job, in the JobSet's subdomain."""
        return f"{name}-{RANKS}-0-0.{name}"

    def body(self, name: str, nodes: list[str], owner_uid: str) -> dict[str, Any]:
        """The JobSet of the all-reduce across `nodes`: the Indexed Job's pods, admitted whole from the queue."""
        job = self.jobs.fabric_bodies(name, nodes, owner_uid, rendezvous=self.rendezvous(name))[1]
        meta, job_spec = job["metadata"], dict(job["spec"])
        labels = job_spec["template"]["metadata"]["labels"]
        pod = {k: v for k, v in job_spec["template"]["spec"].items() if k != "subdomain"}  # the JobSet sets it
        job_spec["template"] = {"metadata": {"labels": labels}, "spec": pod}
        job_spec.pop("ttlSecondsAfterFinished", None)  # the JobSet's, for all it made
        annotations = dict(meta["annotations"])
        if self._one_domain(nodes):
            annotations[EXCLUSIVE_TOPOLOGY] = str(self.spec.topology_key)
        return {
            "apiVersion": f"{JOBSET['group']}/{JOBSET['version']}",
            "kind": "JobSet",
            "metadata": {
                **meta,
                "labels": {**meta["labels"], QUEUE_LABEL: self.spec.local_queue},
                "annotations": annotations,
            },
            "spec": {
                "suspend": True,  # Kueue's webhook suspends it too; nothing starts before admission either way
                "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
                "failurePolicy": {"maxRestarts": 0},  # one try, as the Indexed Job's backoffLimit 0
                "ttlSecondsAfterFinished": 3600,
                "replicatedJobs": [
                    {"name": RANKS, "replicas": 1, "template": {"metadata": {"labels": labels}, "spec": job_spec}}
                ],
            },
        }

    def problem(self) -> str:
        """Why no JobSet can be admitted (no LocalQueue), before anything is made; "" if it can."""
        if self.queue_said is None:  # once for all the groups of this batch
            self.queue_said = self._queue_problem()
        return self.queue_said

    def _queue_problem(self) -> str:
        said = queue_missing(self.jobs.cluster.kube, self.jobs.cluster.options.namespace, self.spec)
        return (
            f"{said}: create it (deploy/kueue/localqueue.yaml) or name an existing one in target.gang.localQueue"
            if said
            else ""
        )

    def _one_domain(self, nodes: list[str]) -> bool:
        """Whether every node is in one domain of the topology label: then the JobSet is placed there exclusively.
        The certification's rings are one per domain (plan/run.py); a collective across domains (a fabric pair
        between racks, the soak's ring of a pool) runs on its named nodes without the annotation, which no
        placement across domains could satisfy."""
        key = self.spec.topology_key
        if not key:
            return False
        for n in nodes:
            self.jobs.hostname(n)  # reads the node's labels when the listing did not
        domains = {self.jobs.cluster.labels.get(n, {}).get(key, "") for n in nodes}
        return len(domains) == 1 and "" not in domains

    def submit(self, name: str, nodes: list[str], owner_uid: str) -> None:
        t = self.jobs.cluster.options
        kube = self.jobs.cluster.kube
        kube.call(
            "create",
            f"jobsets in namespace {t.namespace}",
            kube.custom.create_namespaced_custom_object,
            namespace=t.namespace,
            body=self.body(name, nodes, owner_uid),
            **JOBSET,
        )
        self.submitted[name] = self.jobs.clock()

    def waiting(self, name: str) -> str | None:
        """None once Kueue admitted the JobSet `name` (it is no longer suspended); while it waits "", and past
        the admission timeout why it was not admitted."""
        if name in self.admitted:
            return None
        t = self.jobs.cluster.options
        kube = self.jobs.cluster.kube
        obj = kube.json(
            "get",
            f"jobset {name}",
            kube.custom.get_namespaced_custom_object,
            namespace=t.namespace,
            name=name,
            **JOBSET,
        )
        if not (obj.get("spec") or {}).get("suspend", False):
            self.admitted[name] = self.jobs.clock()
            return None
        waited = self.jobs.clock() - self.submitted[name]
        if waited <= self.spec.admission_timeout_seconds:
            return ""
        said = self._workload_says(str(obj["metadata"].get("uid", "")))
        return (
            f"the all-reduce across nodes was not admitted by Kueue in {self.spec.admission_timeout_seconds} s "
            f"(LocalQueue {self.spec.local_queue}, JobSet {name} stayed suspended; no rank was started)"
            + (f": {said}" if said else "")
            + "; free the quota, or let it wait longer with target.gang.admissionTimeoutSeconds"
        )

    def evicted(self, name: str) -> str:
        """Why a pod of the JobSet `name` went: Kueue evicted it (suspended again, its Workload Evicted, e.g.
        PodsReadyTimeout under waitForPodsReady), or "" (still admitted, or gone). Asked of a pod that was deleted,
        so the JobSet had been admitted whether or not `waiting` saw it so: it looks every STEP_S, and a
        waitForPodsReady timeout as short as that admits and evicts between two looks. Kueue marks the Workload
        Evicted before it suspends the JobSet (pkg/controller/jobframework/reconciler.go, ReconcileGenericJob,
        "6. handle eviction": stopJob only once the Evicted condition is True), JobSet v0.8.2 then suspends the
        child Jobs and the Job controller deletes their pods, so a deleted pod is never seen before the condition."""
        if name not in self.submitted:
            return ""
        t = self.jobs.cluster.options
        kube = self.jobs.cluster.kube
        try:
            obj = kube.json(
                "get", f"jobset {name}", kube.custom.get_namespaced_custom_object, namespace=t.namespace, name=name,
                **JOBSET,
            )  # fmt: skip
        except (ClusterAccessError, IncompleteRunError):
            return ""
        if not (obj.get("spec") or {}).get("suspend", False):
            return ""
        said = self._workload_says(str(obj["metadata"].get("uid", "")), "Evicted", "True")
        said = "" if said.startswith("Kueue made no Workload") else said  # it had one: it admitted the JobSet
        return (
            f"Kueue evicted JobSet {name} after admitting it" + (f" ({said})" if said else "")
            + ": not every rank was ready within Kueue's waitForPodsReady.timeout, and its pods were deleted"
        )  # fmt: skip

    def stalled(self, name: str) -> str:
        """Why the admitted JobSet `name` has no pod: its child Job is still suspended ("" when it is not, or
        cannot be read). JobSet v0.8.2 creates the child Jobs suspended with the JobSet (jobset_controller.go,
        constructJob, lines 724-726) and resumes them once Kueue unsuspends it (resumeJobsIfNecessary); a suspended
        Job makes no pod (kubernetes pkg/controller/job/job_controller.go, manageJob), so none of its ranks
        started, whatever the JobSet says."""
        t = self.jobs.cluster.options
        kube = self.jobs.cluster.kube
        job = f"{name}-{RANKS}-0"
        try:
            obj = kube.json("get", f"job {job}", kube.batch.read_namespaced_job, name=job, namespace=t.namespace)
        except (ClusterAccessError, IncompleteRunError):
            return ""
        if not (obj.get("spec") or {}).get("suspend", False):
            return ""
        return (
            f"Kueue admitted JobSet {name}, but its Job {job} is still suspended, so no rank was started: the JobSet "
            "controller did not resume it (is JobSet's controller manager running? kubectl get pods -n jobset-system)"
        )

    def _workload_says(self, uid: str, condition: str = "QuotaReserved", status: str = "False") -> str:
        """Kueue's reason for not admitting the JobSet with `uid` (its Workload's QuotaReserved condition), or for
        taking the admission back (`Evicted`, True)."""
        t = self.jobs.cluster.options
        kube = self.jobs.cluster.kube
        try:
            items = (
                kube.json(
                    "list",
                    f"workloads in namespace {t.namespace}",
                    kube.custom.list_namespaced_custom_object,
                    namespace=t.namespace,
                    label_selector=f"{JOB_UID_LABEL}={uid}",
                    **WORKLOAD,
                ).get("items")
                or []
            )
        except (ClusterAccessError, IncompleteRunError) as exc:
            return f"(Kueue's Workload could not be read: {exc})"
        if not items:  # Kueue never took it up: its configuration leaves JobSets out (they are in by default)
            return (
                "Kueue made no Workload for it; is `jobset.x-k8s.io/jobset` among Kueue's integrations.frameworks "
                "(its controller_manager_config.yaml)?"
            )
        for wl in items:
            for cond in (wl.get("status") or {}).get("conditions") or []:
                if cond.get("type") == condition and cond.get("status") == status:
                    return f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
        return ""

    def delete(self) -> None:
        """Every JobSet this run made (its Jobs, pods and Service go with it); gone already is fine."""
        t = self.jobs.cluster.options
        kube = self.jobs.cluster.kube
        for name in self.submitted:
            with contextlib.suppress(ClusterAccessError, IncompleteRunError):
                kube.call(
                    "delete",
                    f"jobset {name}",
                    kube.custom.delete_namespaced_custom_object,
                    namespace=t.namespace,
                    name=name,
                    propagation_policy="Background",
                    **JOBSET,
                )
