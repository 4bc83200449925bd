"""The all-reduce across nodes on a live cluster: kubernetes.py's helper for `certify.multinode`.

One Indexed Job per group of nodes (a pod per node, held to the chosen nodes by node affinity and to one per node
by anti-affinity) with a headless Service, so process 0 answers at `<job>-0.<service>` for the rendezvous; process
0's log carries the multi-node evidence. What NCCL needs to use the fabric from inside a pod:
- the RDMA device plugin's resource (the pool's `fabric.rails.resource`, else `target.fabricResources`), which puts
  /dev/infiniband (the verbs devices libibverbs opens) in the pod;
- with RDMA, IPC_LOCK, to pin (register) the buffers the adapters read and write: Linux grants an added capability
  only to root in a container, so this pod then runs as root with every other capability dropped (Pod Security
  `privileged`; without RDMA or the host's network it meets `restricted`, as the probe pods do);
- a memory-backed /dev/shm (NCCL's shared-memory segments and proxy buffers; a container's default is 64 MiB);
- optionally the host's network namespace (`target.fabricHostNetwork`), where NCCL sees every host interface.
Whatever stops one all-reduce (a pod Pending past its timeout, an image, a crash, a log that cannot be read)
becomes its document's error, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpucert._version import __version__
from gpucert.errors import ClusterAccessError, IncompleteRunError
from gpucert.measure.evidence import FabricEvidence, ProbeError
from gpucert.measure.probes.framing import FramingError
from gpucert.measure.probes.multinode import DEFAULT_PORT
from gpucert.measure.targets.kubernetes.admission import admission_fix, refused
from gpucert.measure.targets.kubernetes.gang import Gang
from gpucert.measure.targets.kubernetes.jobs import ProbeJobs
from gpucert.measure.targets.kubernetes.pods import IMAGE_ERRORS, container_state, stop_reason, unschedulable
from gpucert.measure.targets.kubernetes.podspec import fabric_level, fabric_security
from gpucert.measure.targets.kubernetes.runs import at_once, cleanup_runs, now, short

__all__ = ["FabricJobs"]

LABEL_ROLE = "gpucert.io/role"
LABEL_FABRIC = "gpucert.io/fabric"  # which all-reduce across nodes a pod belongs to (several run at once)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@dataclass
class _FabricRun:
    name: str
    nodes: list[str]
    created: float
    pods: dict[int, dict[str, Any]] = field(default_factory=dict)
    result: FabricEvidence | None = None


class FabricJobs(ProbeJobs):
    def fabric_pod(self, name: str, nodes: list[str], rendezvous: str | None = None) -> dict[str, Any]:
        """The pod of every process of the all-reduce across `nodes` (its rank from the completion index);
        process 0 answers at `rendezvous` (the Indexed Job's `<job>-0.<service>` by default)."""
        t = self.cluster.options
        args = [
            *("--processes", str(len(nodes)), "--rank", "$(RANK)"),
            *("--rendezvous", f"{rendezvous or f'{name}-0.{name}'}:{DEFAULT_PORT}"),
            # past the Pending timeout, so a pod that never starts is reported as such
            *("--rendezvous-timeout", str(t.pending_timeout_seconds + 60)),
        ]
        pool = self.plan.pools.get(nodes[0]) if nodes else None
        if pool is not None and pool in self.plan.rails:
            args += ["--pool", pool]  # the pool's rails (the plan's pool_rails): its own HCAs, never another's
        rank = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
        rdma = self.rdma_of(nodes)
        pod = self.probe_pod(
            name,
            args,
            env=[{"name": "RANK", "valueFrom": rank}],
            limits=rdma,
            ports=[{"name": "rendezvous", "containerPort": DEFAULT_PORT}],
            gpus=self.gpus_of(nodes),
        )
        pod["containers"][0]["securityContext"] = fabric_security(t, rdma=bool(rdma))
        if t.fabric_host_network:
            pod["hostNetwork"] = True
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"  # the rendezvous name is a cluster DNS name
        return pod

    def gpus_of(self, nodes: list[str]) -> int:
        """The GPUs each pod of a collective across `nodes` requests: their pool's count (a collective is of one
        pool; should its nodes' pools differ, the least of them, which every node has)."""
        return min((self.gpus_for(n) for n in nodes), default=self.gpus_per_node)

    def rdma_of(self, nodes: list[str]) -> dict[str, str]:
        """The RDMA resource each pod of a collective across `nodes` requests: their pool's rails.resource, else
        target.fabricResources."""
        return self.plan.rdma_for(nodes[0], self.cluster.options.fabric_resources) if nodes else {}

    def fabric_bodies(
        self, name: str, nodes: list[str], owner_uid: str, rendezvous: str | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The headless Service and the Indexed Job of the all-reduce across `nodes` (gang.py makes a JobSet of
        the Job, whose process 0 answers at `rendezvous`)."""
        labels = {**self.labels, LABEL_ROLE: "nccl-multinode", LABEL_FABRIC: name}
        meta = self.owned_meta(name, name, owner_uid, labels, **{"gpucert.io/nodes": ",".join(nodes)})
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
        on_nodes = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}
        one_each = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
        pod = {
            "subdomain": name,  # with the hostname `<job>-<index>`: `<job>-0.<service>` resolves
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [on_nodes]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_each]},
            },
            **self.fabric_pod(name, nodes, rendezvous),
        }
        job = self.job(
            meta,
            labels,
            pod,
            self.deadline_for(None),
            completionMode="Indexed",
            completions=len(nodes),
            parallelism=len(nodes),
        )
        return service, job

    def fabric_refused(self, nodes: list[str]) -> str:
        """The API's Forbidden message for the all-reduce pod across `nodes` (a dry run), or "" if admitted."""
        name = f"gpucert-{self.label}-n{short(','.join(nodes))}"
        pod = self.fabric_bodies(name, nodes, "")[1]["spec"]["template"]["spec"]
        return refused(self.cluster, f"{name}-admission", self.labels, pod)

    def _fabric_failed(self, run: _FabricRun, message: str) -> None:
        t = now()
        run.result = FabricEvidence(
            run_id=self.plan.run_id,
            target="kubernetes",
            probe_version=__version__,
            started=t,
            finished=t,
            nodes=run.nodes,
            gpus_per_node=self.gpus_of(run.nodes),
            collected=False,
            errors=[ProbeError(probe="nccl", message=message)],
        )

    def _on_fabric_pod(
        self, runs: dict[str, _FabricRun], pod: dict[str, Any], deleted: bool, gang: Gang | None = None
    ) -> bool:
        meta = pod["metadata"]
        run = runs.get((meta.get("labels") or {}).get(LABEL_FABRIC, ""))
        if run is None or run.result is not None:
            return False
        index = int((meta.get("annotations") or {}).get(INDEX_ANNOTATION, "-1"))
        evicted = gang.evicted(run.name) if gang is not None and deleted else ""
        if evicted:  # Kueue took the admission back (waitForPodsReady): who had not come, as they stood
            self._fabric_failed(run, f"{evicted}; " + self._never_came(run, self._pending(run)))
            return True
        run.pods[index] = pod
        status = pod.get("status") or {}
        phase = status.get("phase")
        where = f"process {index} ({pod['spec'].get('nodeName') or 'not scheduled'})"
        if index == 0 and phase == "Succeeded":
            try:
                run.result = FabricEvidence.model_validate_json(self.log(meta["name"]).document())
            except (FramingError, ValidationError, ClusterAccessError, IncompleteRunError) as exc:
                self._fabric_failed(run, f"the evidence in the log of {meta['name']} is unusable: {exc}")
        elif phase == "Failed" or (deleted and phase != "Succeeded"):
            reason = "deleted" if deleted and phase != "Failed" else stop_reason(pod)
            tail = "" if deleted else self.tail(self.log_or_none(meta["name"]))
            self._fabric_failed(
                run,
                f"{where} of the all-reduce across nodes failed: {reason}" + (f"; log tail: {tail}" if tail else ""),
            )
        else:
            waiting = container_state(status, "waiting")
            if waiting and waiting.get("reason") in IMAGE_ERRORS:
                self._fabric_failed(run, f"{where} cannot start: {waiting['reason']}: {waiting.get('message', '')}")
        return run.result is not None

    @staticmethod
    def _pending(run: _FabricRun) -> list[int]:
        """The processes not started: no pod yet, or a pod still Pending."""
        return sorted(
            i
            for i in range(len(run.nodes))
            if (run.pods.get(i, {}).get("status") or {}).get("phase", "Pending") == "Pending"
        )

    def _fabric_expire(self, run: _FabricRun, gang: Gang | None = None) -> None:
        t = self.cluster.options
        age = self.clock() - run.created
        pending = self._pending(run)
        if pending and age > t.pending_timeout_seconds:
            stalled = gang.stalled(run.name) if gang is not None and not run.pods else ""
            self._fabric_failed(
                run,
                f"the all-reduce across nodes was still Pending after {t.pending_timeout_seconds} s: "
                + (f"{stalled}; " if stalled else "")
                + self._never_came(run, pending),
            )
        elif age > self.deadline_for(None) + 60:
            self._fabric_failed(run, f"the all-reduce across nodes ran past its {self.deadline_for(None)} s deadline")

    @staticmethod
    def _never_came(run: _FabricRun, pending: list[int]) -> str:
        """Who never came to the rendezvous: each process not started and why, the nodes no process reached, and
        the processes that started and waited for them (ended with the run's cleanup)."""
        why = []
        for i in pending:
            pod = run.pods.get(i)
            if pod is None:
                why.append(f"process {i} (no pod was created)")
                continue
            node = pod["spec"].get("nodeName")
            waiting = (container_state(pod.get("status") or {}, "waiting") or {}).get("reason")
            said = f"on {node}, not started" + (f": {waiting}" if waiting else "") if node else unschedulable(pod)
            why.append(f"process {i}" + (f" ({said})" if said else ""))
        placed = {p["spec"].get("nodeName") for p in run.pods.values()}
        absent = [n for n in run.nodes if n not in placed]
        started = sorted(set(run.pods) - set(pending))
        out = "; ".join(why)
        if absent:
            out += f"; no process reached {', '.join(absent)}"
        if started:
            on = ", ".join(str(run.pods[i]["spec"].get("nodeName")) for i in started)
            out += f"; processes {', '.join(map(str, started))} ({on}) started and waited for them until stopped"
        return out

    def _create_pair(self, run: _FabricRun) -> None:
        """The pair's ConfigMap, then the headless Service and Indexed Job it owns."""
        service, job = self.fabric_bodies(run.name, run.nodes, self.create_configmap(run.name))
        kube = self.cluster.kube
        kube.call(
            "create",
            f"services in namespace {self.ns}",
            self.core.create_namespaced_service,
            namespace=self.ns,
            body=service,
        )
        kube.call(
            "create", f"jobs in namespace {self.ns}", self.batch.create_namespaced_job, namespace=self.ns, body=job
        )

    def _submit_gang(self, gang: Gang, run: _FabricRun) -> None:
        """The all-reduce as a JobSet for Kueue to admit whole, or its error when it could not be (no LocalQueue),
        with nothing made."""
        said = gang.problem()
        if said:
            self._fabric_failed(run, said)
            return
        gang.submit(run.name, run.nodes, self.create_configmap(run.name))

    def _admitted(self, gang: Gang, run: _FabricRun) -> bool:
        """Whether Kueue admitted the run's JobSet; its Pending timeout counts from then. Not admitted in time is
        the run's error (gang.py says why), and its JobSet goes at the end with the others."""
        if run.name not in gang.submitted:
            return False
        said = gang.waiting(run.name)
        if said is None:
            run.created = gang.admitted[run.name]
        elif said:
            self._fabric_failed(run, said)
        return said is None

    def run_fabrics(self, groups: list[list[str]]) -> list[FabricEvidence]:
        """One all-reduce across each group of nodes, all at once (no node is in two groups); whatever stops one
        becomes its document's error, never an exception."""
        runs: dict[str, _FabricRun] = {}
        said = self.fabric_refused(groups[0]) if groups else ""
        if said:  # admission refuses the all-reduce pods: every group's error, at once, and nothing created
            level = fabric_level(self.cluster.options, rdma=bool(self.rdma_of(groups[0])))[0]
            message = admission_fix(said, self.ns, level, "the all-reduce pods")
            for nodes in groups:
                runs[",".join(nodes)] = run = _FabricRun(name="", nodes=nodes, created=self.clock())
                self._fabric_failed(run, message)
            return [r.result for r in runs.values() if r.result is not None]
        gang = Gang.detect(self)  # JobSet and Kueue, where the spec and the cluster have them
        try:
            for nodes in groups:
                name = f"gpucert-{self.label}-n{short(','.join(nodes))}"
                runs[name] = _FabricRun(name=name, nodes=nodes, created=self.clock())
                if gang is not None:
                    self._submit_gang(gang, runs[name])
            if gang is None:  # the pairs' creates at once (each pair's in order); the first error makes no more
                at_once(self._create_pair, list(runs.values()), stop_on_error=True)

            def step() -> bool:
                waiting = [r for r in runs.values() if r.result is None]
                for r in waiting:
                    if gang is None or self._admitted(gang, r):
                        self._fabric_expire(r, gang)
                return any(r.result is None for r in waiting)

            self.follow(lambda pod, deleted: self._on_fabric_pod(runs, pod, deleted, gang), step)
        finally:
            if gang is not None:
                gang.delete()
            cleanup_runs(self.cluster.kube, self.ns, self.label)
        admission = "indexed job" if gang is None else "kueue"  # said in the evidence: the fallback is not silent
        results = [r.result for r in runs.values()]
        assert all(r is not None for r in results)
        return [r.model_copy(update={"admission": admission}) for r in results if r is not None]
