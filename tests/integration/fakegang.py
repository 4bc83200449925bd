"""A fake JobSet controller and Kueue for the fake API server (fakecluster.py), as the pinned releases behave
(tests/fixtures/gang/README.md; the CRDs served are theirs).

`install()` serves the JobSet and Kueue CRDs, a LocalQueue, and has the API refuse (422) any JobSet its CRD's schema
refuses. Kueue here: a suspended JobSet of the queue is admitted (unsuspended) when the ClusterQueue's GPU quota
has room for all its pods at once, else it stays suspended and its Workload says why in a QuotaReserved=False
condition, in Kueue v0.10.6's words (pkg/scheduler/flavorassigner/flavorassigner.go: "couldn't assign flavors to
pod set ...: insufficient unused quota for ... in flavor ..., N more needed").

The JobSet controller, as JobSet v0.8.2's reconcile does it (kubernetes-sigs/jobset v0.8.2, commit bba74dba,
pkg/controllers/jobset_controller.go): every JobSet, suspended or not, gets the headless Service of its subdomain
(createHeadlessSvcIfNecessary) and its child Jobs (`<jobset>-<rjob>-<index>`, reconcileReplicatedJobs) at once,
each created with `spec.suspend` equal to the JobSet's (constructJob, lines 724-726: "if Suspend is set, then we
assume all jobs will be suspended also"), its pods in the JobSet's subdomain and labelled
`jobset.sigs.k8s.io/jobset-name` and `jobset.sigs.k8s.io/replicatedjob-name`, all owned by the JobSet. Once Kueue
unsuspends the JobSet, the controller resumes each suspended child Job (resumeJobsIfNecessary and resumeJob, lines
406-511: `Suspend` false). The fake kubelet's Job controller makes no pod for a suspended Job (kubernetes
pkg/controller/job/job_controller.go, manageJob: a suspended Job's active pods are deleted and none created).
A JobSet suspended again (Kueue's eviction) has its active Jobs suspended (suspendJobs), and a suspended Job's pods
are deleted. `resumes=False` is a JobSet controller that never gets to resume them (stopped, or crash-looping);
`pods_ready_timeout` is Kueue's waitForPodsReady (`_pods_ready`)."""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import crds
from .fakecluster import FakeCluster

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
GPU = "nvidia.com/gpu"


def _gpus(js: dict[str, Any]) -> int:
    total = 0
    for rjob in js["spec"]["replicatedJobs"]:
        job = rjob["template"]["spec"]
        pods = job.get("parallelism", 1) * rjob.get("replicas", 1)
        per_pod = sum(int(c["resources"]["limits"].get(GPU, 0)) for c in job["template"]["spec"]["containers"])
        total += pods * per_pod
    return total


def _owned_by(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}]


@dataclass
class FakeGang:
    cluster: FakeCluster
    quota_gpus: int = 1 << 20  # the ClusterQueue's nominal nvidia.com/gpu behind the LocalQueue
    flavor: str = "default-flavor"
    takes_jobsets: bool = True  # False: Kueue configured without the jobset.x-k8s.io/jobset integration
    resumes: bool = True  # False: the JobSet controller never resumes the suspended child Jobs of an admitted JobSet
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    admitted: dict[str, int] = field(default_factory=dict)  # JobSet uid -> the GPUs it holds
    # Kueue's waitForPodsReady.timeout in seconds (None: not enabled, Kueue's default): an admitted JobSet whose pods
    # are not all Running within it is evicted (module docstring)
    pods_ready_timeout: float | None = None
    admitted_at: dict[str, float] = field(default_factory=dict)  # JobSet uid -> when it was admitted
    evicted: set[str] = field(default_factory=set)  # JobSet uids evicted: requeued after a backoff beyond any test

    def install(self, namespace: str = "gpucert", queue: str | None = "gpucert") -> FakeGang:
        for name in crds.FILES:
            self.cluster.put("customresourcedefinitions", copy.deepcopy(crds.crd(name)))
        if queue is not None:
            lq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue"}
            lq |= {"metadata": {"name": queue, "namespace": namespace}, "spec": {"clusterQueue": "gpus"}}
            assert crds.problems(lq) == []
            self.cluster.put("localqueues", lq)
        self.cluster.validators["jobsets"] = crds.problems
        return self

    def start(self) -> FakeGang:
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop.is_set():
            live = set()
            for js in self.cluster.list("jobsets"):
                live.add(js["metadata"]["uid"])
                self._reconcile(js)  # JobSet's controller sees it first: Kueue's webhook made it suspended
                if js["spec"].get("suspend") and self.takes_jobsets and js["metadata"]["uid"] not in self.evicted:
                    self._queue(js)
                elif self.pods_ready_timeout is not None and js["metadata"]["uid"] in self.admitted:
                    self._pods_ready(js)
            for uid in set(self.admitted) - live:  # a deleted JobSet's quota is free again
                del self.admitted[uid]
            self.stop.wait(0.02)

    # ---- Kueue -----------------------------------------------------------------------------------------------------

    def _queue(self, js: dict[str, Any]) -> None:
        needed = _gpus(js)
        free = self.quota_gpus - sum(self.admitted.values())
        if needed <= free:
            self.admitted[js["metadata"]["uid"]] = needed
            self.admitted_at[js["metadata"]["uid"]] = time.monotonic()
            js["spec"]["suspend"] = False
            self.cluster.update("jobsets", js)  # a JobSet deleted since the listing stays deleted
            return
        ns, uid = js["metadata"]["namespace"], js["metadata"]["uid"]
        if self.cluster.list("workloads", ns, f"kueue.x-k8s.io/job-uid={uid}"):
            return
        rjob = js["spec"]["replicatedJobs"][0]["name"]
        message = (
            f"couldn't assign flavors to pod set {rjob}: insufficient unused quota for {GPU} in flavor "
            f"{self.flavor}, {needed - free} more needed"
        )
        cond = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}
        self.cluster.put(
            "workloads",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Workload",
                "metadata": {
                    "name": f"jobset-{js['metadata']['name']}-{uid[:5]}",
                    "namespace": ns,
                    "labels": {"kueue.x-k8s.io/job-uid": uid},
                    "ownerReferences": _owned_by(js),
                },
                "spec": {"queueName": js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]},
                "status": {"conditions": [cond]},
            },
        )

    def _pods_ready(self, js: dict[str, Any]) -> None:
        """waitForPodsReady (Kueue v0.10.6 pkg/controller/core/workload_controller.go, reconcileNotReadyTimeout): an
        admitted workload whose pods are not all ready within the timeout gets the condition Evicted, reason
        PodsReadyTimeout, "Exceeded the PodsReady timeout <namespace>/<workload>", its quota is freed, and its job
        is suspended again (the JobSet integration sets spec.suspend); it is requeued after a backoff."""
        meta = js["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        pods = self.cluster.list("pods", ns, f"{JOBSET_NAME}={name}")
        wanted = sum(
            r["template"]["spec"].get("parallelism", 1) * r.get("replicas", 1) for r in js["spec"]["replicatedJobs"]
        )
        ready = sum((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods)
        if ready >= wanted or time.monotonic() - self.admitted_at[uid] <= float(self.pods_ready_timeout or 0):
            return
        del self.admitted[uid]
        self.evicted.add(uid)
        js["spec"]["suspend"] = True
        if self.cluster.update("jobsets", js) is None:
            return
        workload = f"jobset-{name}-{uid[:5]}"
        cond = {
            "type": "Evicted",
            "status": "True",
            "reason": "PodsReadyTimeout",
            "message": f"Exceeded the PodsReady timeout {ns}/{workload}",
        }
        self.cluster.put(
            "workloads",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Workload",
                "metadata": {
                    "name": workload,
                    "namespace": ns,
                    "labels": {"kueue.x-k8s.io/job-uid": uid},
                    "ownerReferences": _owned_by(js),
                },
                "spec": {"queueName": meta["labels"]["kueue.x-k8s.io/queue-name"]},
                "status": {"conditions": [cond]},
            },
        )

    # ---- the JobSet controller -------------------------------------------------------------------------------------

    def _reconcile(self, js: dict[str, Any]) -> None:
        """The JobSet as it is now (one deleted since the listing makes nothing): its Service and child Jobs if it
        has none, suspended as it is; once it is no longer suspended, its suspended Jobs resumed."""
        meta = js["metadata"]
        with self.cluster.cond:
            now = self.cluster.get("jobsets", meta["namespace"], meta["name"])
            if now is None or now["metadata"]["uid"] != meta["uid"]:
                return
            jobs = self.cluster.list("jobs", meta["namespace"], f"{JOBSET_NAME}={meta['name']}")
            if not jobs:
                self._start(now)
            elif not now["spec"].get("suspend") and self.resumes:
                for job in jobs:
                    if job["spec"].get("suspend"):
                        job["spec"]["suspend"] = False
                        self.cluster.update("jobs", job)
            elif now["spec"].get("suspend"):  # suspendJobs: a JobSet suspended again suspends its active Jobs
                for job in jobs:
                    if not job["spec"].get("suspend"):
                        job["spec"]["suspend"] = True
                        self.cluster.update("jobs", job)

    def _start(self, js: dict[str, Any]) -> None:
        meta, spec = js["metadata"], js["spec"]
        ns, name = meta["namespace"], meta["name"]
        subdomain = (spec.get("network") or {}).get("subdomain") or name
        # the Service first, then the Jobs, as JobSet's reconcile does (createHeadlessSvcIfNecessary first)
        if self.cluster.get("services", ns, subdomain) is None:
            svc = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": subdomain, "namespace": ns, "ownerReferences": _owned_by(js)},
                "spec": {"clusterIP": "None", "selector": {JOBSET_NAME: name}, "publishNotReadyAddresses": True},
            }
            self.cluster.put("services", svc)
        for rjob in spec["replicatedJobs"]:
            for index in range(rjob.get("replicas", 1)):
                tmpl = copy.deepcopy(rjob["template"])
                labels = {**(tmpl.get("metadata") or {}).get("labels", {}), JOBSET_NAME: name, RJOB_NAME: rjob["name"]}
                job_spec = tmpl["spec"]
                job_spec["template"]["metadata"]["labels"] = {**job_spec["template"]["metadata"]["labels"], **labels}
                job_spec["template"]["spec"]["subdomain"] = subdomain
                job_spec["suspend"] = bool(spec.get("suspend"))  # constructJob: the JobSet's own
                job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{name}-{rjob['name']}-{index}",
                        "namespace": ns,
                        "labels": labels,
                        "ownerReferences": _owned_by(js),
                    },
                    "spec": job_spec,
                }
                self.cluster.put("jobs", job)
