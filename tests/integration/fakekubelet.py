"""A fake scheduler and kubelet for the fake API server: they place each probe Job's pod as the real scheduler does
(required node affinity, taints and tolerations, a cordon, free nvidia.com/gpu), explain a pod they cannot place
in the scheduler's words, run the pod's plan on the NumPy device, and stream its framed parts and document into
the pod's log, as the probe command prints them.

`behaviour[node]` changes what happens on a node: "imagepull" (the image does not pull), "oom" (OOM-killed at
start), "oom-halfway" (OOM-killed half-way), "truncate" (the log is cut), "crash" (a segfault half-way), "deadline"
(the Job's activeDeadlineSeconds runs out half-way), "evict" (evicted half-way), "podgc" (the node is deleted
half-way: Pod GC fails and deletes its pods), "log500" / "log404" (the kubelet cannot serve the log), "rotated"
(the kubelet rotated the log and serves its current file, from the third record on), "stderr" (a line of stderr
after every frame line), "preflight" (the pod's $HOME is not writable, so the probe's preflight fails), "no-nvml"
(the GPU path where no NVML library is installed, as on this machine). Half-way is after GPU 0's probes.

An Indexed Job (the all-reduce across nodes) gets one pod per index, on the nodes its node affinity names, one per
node; each runs its rank over loopback (with `simulator`, process 0 reports the simulator's all-reduce across the
Job's nodes instead). The fake DNS resolves `<hostname>.<svc>` only when a headless Service `svc` selects a pod
with that hostname and subdomain, as the cluster DNS does. `fabric_behaviour[node]` ("oom") changes that node's
process of the collective only; `collectives[k]` changes the k-th collective (Indexed Job) made: "hang" (every
process runs until its pod is deleted), "deadline" (the Job's activeDeadlineSeconds runs out: the Job controller
fails it and deletes its pods), "slow:<factor>" (with `simulator`, its bus bandwidth times the factor).
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpucert.measure.evidence import FabricEvidence, NodeEvidence
from gpucert.measure.probes.framing import DOCUMENT, Framer, frame
from gpucert.measure.probes.multinode import run_multinode
from gpucert.measure.probes.runner import BudgetSpec, ProbePlan, Sizes, run_plan
from gpucert.measure.probes.stream import framer
from gpucert.spec.cluster import Probe

from .fakecluster import INDEX, FakeCluster, container_status

GPU = "nvidia.com/gpu"
NO_SCHEDULE = ("NoSchedule", "NoExecute")


def _served(log: str, lines: list[str], what: str) -> str:
    """The log as the kubelet serves it: cut, rotated (only the current file, which begins at a line), or with the
    probe's stderr joined in between whole lines; else as written."""
    if what == "truncate":
        return log[: len(log) // 2]
    if what == "rotated":
        return "".join(lines[next(i for i, line in enumerate(lines) if " rec=2 " in line) :])
    if what == "stderr":
        return "".join(line + "W1205 12:00:00.000 cuda.cc:42] a warning on stderr\n" for line in lines)
    return log


def _gpus_of(pod: dict[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0)) for c in pod["spec"]["containers"])


def _affinity_matches(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not affinity:
        return True
    labels = node["metadata"].get("labels") or {}
    for term in affinity["nodeSelectorTerms"]:  # terms are OR-ed, the requirements of a term AND-ed
        exprs = all(
            (labels.get(e["key"]) in e["values"]) == (e["operator"] == "In") for e in term.get("matchExpressions", [])
        )
        fields = all(
            (node["metadata"]["name"] in f["values"]) == (f["operator"] == "In") for f in term.get("matchFields", [])
        )
        if exprs and fields:
            return True
    return False


def _taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    taints = list((node.get("spec") or {}).get("taints") or [])
    if (node.get("spec") or {}).get("unschedulable"):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return [t for t in taints if t.get("effect") in NO_SCHEDULE]


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        key_ok = t.get("key") == taint["key"] or (not t.get("key") and t.get("operator") == "Exists")
        effect_ok = not t.get("effect") or t.get("effect") == taint["effect"]
        value_ok = t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", "")
        if key_ok and effect_ok and value_ok:
            return True
    return False


@dataclass
class FakeKubelet:
    cluster: FakeCluster
    behaviour: dict[str, str] = field(default_factory=dict)
    fabric_behaviour: dict[str, str] = field(default_factory=dict)
    simulator: Any = None  # a SimulatedTarget: its evidence for the node instead of running the plan on NumPy
    slow_s: float = 0.0
    collectives: list[str] = field(default_factory=list)  # what the k-th Indexed Job made does (module docstring)
    collectives_made: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    pending: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (ns, pod) -> the pod's Job
    refused: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, Job) -> the FailedCreate message

    def start(self) -> FakeKubelet:
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.sync_jobs()
            self._schedule()
            self.stop.wait(0.01)

    def sync_jobs(self) -> None:
        """The Job controller's pass: a pod for each Job that has none. Each Job is read again as it is now, under
        the store's lock: one deleted since the listing gets no pod (the real controller's pods name their Job as
        owner, and the garbage collector deletes a pod whose owner is gone; the sweep that deleted the Job has
        already listed the pods, so a pod made here for it would be left behind)."""
        for job in self.cluster.list("jobs"):
            ns, jname = job["metadata"]["namespace"], job["metadata"]["name"]
            with self.cluster.cond:
                now = self.cluster.get("jobs", ns, jname)
                if now is None or now["metadata"]["uid"] != job["metadata"]["uid"]:
                    continue
                if now["spec"].get("suspend"):  # manageJob: a suspended Job's active pods go, none is made
                    for pod in self.cluster.list("pods", ns, f"job-name={jname}"):
                        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                            self.cluster.delete("pods", ns, pod["metadata"]["name"])
                    continue
                if any(p["metadata"]["labels"].get("job-name") == jname for p in self.cluster.list("pods", ns)):
                    continue
                said = self.cluster.admit(ns, self._pod(job))
                if said:  # the Job controller's pod is refused: a FailedCreate event, no pod
                    self.refused.setdefault((ns, jname), f"Error creating: {said}")
                elif job["spec"].get("completionMode") == "Indexed":
                    self._run_indexed(job)
                else:
                    self.cluster.put("pods", self._pod(job))
                    self.pending[(ns, f"{jname}")] = job

    # ---- the scheduler -------------------------------------------------------------------------------------------

    def _free_gpus(self, node: dict[str, Any]) -> int:
        alloc = int((node.get("status") or {}).get("allocatable", {}).get(GPU, 0))
        used = sum(
            _gpus_of(p)
            for p in self.cluster.list("pods", None, fields=f"spec.nodeName={node['metadata']['name']}")
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        return alloc - used

    def place(self, pod: dict[str, Any], among: list[str] | None = None) -> tuple[str | None, str]:
        """The node the pod goes to, or None and the scheduler's message saying why no node fits."""
        nodes = self.cluster.list("nodes")
        if among is not None:  # the collective's free nodes first, in the order its affinity names them
            nodes.sort(key=lambda n: among.index(n["metadata"]["name"]) if n["metadata"]["name"] in among else 1 << 30)
        why: Counter[str] = Counter()
        for node in nodes:
            name = node["metadata"]["name"]
            if not _affinity_matches(pod, node) or (among is not None and name not in among):
                why["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            bad = [t for t in _taints(node) if not _tolerated(t, pod["spec"].get("tolerations") or [])]
            if bad:
                why[f"node(s) had untolerated taint {{{bad[0]['key']}: {bad[0].get('value', '')}}}"] += 1
                continue
            if self._free_gpus(node) < _gpus_of(pod):
                why[f"Insufficient {GPU}"] += 1
                continue
            return name, ""
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(why.items()))
        preempt = (
            f"preemption: 0/{len(nodes)} nodes are available: {len(nodes)} Preemption is not helpful for scheduling."
        )
        return None, f"0/{len(nodes)} nodes are available: {reasons}. {preempt}"

    def _schedule(self) -> None:
        for (ns, prefix), job in list(self.pending.items()):
            pod = next((p for p in self.cluster.list("pods", ns) if p["metadata"]["name"].startswith(prefix)), None)
            if pod is None:  # deleted while Pending (the run gave up on it)
                del self.pending[(ns, prefix)]
                continue
            node, message = self.place(pod)
            if node is None:
                cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                if (pod.get("status") or {}).get("conditions") != [cond]:
                    pod["status"] = {"phase": "Pending", "conditions": [cond]}
                    self.cluster.update("pods", pod)
                continue
            del self.pending[(ns, prefix)]
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
            if self.cluster.update("pods", pod) is not None:  # not bound if deleted since it was listed
                self._run_pod(job, pod, node)

    def _pod(self, job: dict[str, Any]) -> dict[str, Any]:
        tmpl = job["spec"]["template"]
        name = f"{job['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": job["metadata"]["namespace"],
                "labels": {**tmpl["metadata"]["labels"], "job-name": job["metadata"]["name"]},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                    }
                ],
            },
            "spec": copy.deepcopy(tmpl["spec"]),
            "status": {"phase": "Pending"},
        }

    # ---- the kubelet -----------------------------------------------------------------------------------------------

    def _run_pod(self, job: dict[str, Any], pod: dict[str, Any], node: str) -> None:
        what = self.behaviour.get(node, "ok")
        if what == "imagepull":
            waiting = {
                "reason": "ErrImagePull",
                "message": "rpc error: code = NotFound desc = failed to pull and "
                'unpack image "registry.local/gpucert-probe:missing": not found',
            }
            image = pod["spec"]["containers"][0]["image"]
            pod["status"]["containerStatuses"] = [container_status(image, {"waiting": waiting})]
            self.cluster.update("pods", pod)
            return
        threading.Thread(target=self._execute, args=(job, pod, node, what), daemon=True).start()

    def _plan(self, ns: str, pod: dict[str, Any], node: str, sizes: Sizes) -> dict[str, Any] | None:
        """The plan the pod mounts, made small: two NumPy devices, five repetitions (the spec's default sample
        counts left out, so the budget's five hold), small buffers."""
        cm = self.cluster.get("configmaps", ns, pod["spec"]["volumes"][0]["configMap"]["name"])
        if cm is None:
            return None
        plan: dict[str, Any] = json.loads(cm["data"]["plan.json"])
        plan.update(
            node=node,
            device="numpy",
            gpus=2,
            budget=BudgetSpec(warmup_s=0, measure_s=0.01, min_reps=5, max_reps=5).model_dump(),
            sizes=sizes.model_dump(),
            samples={},
        )
        return plan

    def _set(self, pod: dict[str, Any], **status: Any) -> None:
        pod["status"] = {**pod["status"], **status}
        self.cluster.update("pods", copy.deepcopy(pod))  # a pod deleted meanwhile stays deleted

    def _execute(self, job: dict[str, Any], pod: dict[str, Any], node: str, what: str) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        image = pod["spec"]["containers"][0]["image"]
        running = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
        self._set(pod, phase="Running", containerStatuses=[container_status(image, running, ready=True)])
        sizes = Sizes(memory_bytes=1 << 20, gemm_n=32, pcie_bytes=1 << 18, p2p_bytes=1 << 18, nccl_sizes=[1 << 16])
        plan = self._plan(ns, pod, node, sizes)
        if plan is None:
            return
        if self.slow_s:
            time.sleep(self.slow_s)
        if self.cluster.get("pods", ns, name) is None:
            return  # deleted while it ran
        frames: list[str] = ["probe: starting\n"]
        out = Framer(frames.append)  # one Framer per log, as the probe command has: records are numbered per log
        evidence = self._evidence(plan, node, what, out)
        out.emit(DOCUMENT, evidence.model_dump_json(by_alias=True), final=True)
        log = "".join(frames)
        half = "".join(frames[: next((i for i, f in enumerate(frames) if "key=gpu/1/memory" in f), len(frames))])
        if what in ("oom", "oom-halfway", "crash"):
            self._killed(pod, what, half)
        elif what in ("deadline", "evict"):
            self.cluster.logs[(ns, name)] = half
            self._ended(job, pod, what)
        elif what == "podgc":
            self.cluster.logs[(ns, name)] = half
            self._node_deleted(pod, node)
        else:
            self.cluster.logs[(ns, name)] = _served(log, frames, what)
            if what == "log500":
                kubelet = f"https://{node}:10250/containerLogs/{ns}/{name}/probe"
                self.cluster.log_errors[(ns, name)] = (500, f'Get "{kubelet}": dial tcp: connect: connection refused')
            elif what == "log404":
                self.cluster.log_errors[(ns, name)] = (404, f'nodes "{node}" not found')
            self._set(pod, phase="Succeeded", containerStatuses=_terminated(image, 0, "Completed"))

    def _evidence(self, plan: dict[str, Any], node: str, what: str, frames: Framer) -> NodeEvidence:
        """The node's evidence: the simulator's, or the real probe runner's on this machine's CPU (each part framed
        into `frames` as it is measured)."""
        if self.simulator is not None:
            from gpucert.measure.targets.base import MeasurePlan
            from gpucert.spec.cluster import Probe

            # the probes the pod's plan names, as the probe runner runs them (a soak round's DCGM only when due)
            probes = tuple(Probe(p) for p in plan["probes"]) if "probes" in plan else self.simulator.spec.certify.probes
            evidence = self.simulator.measure_node(node, MeasurePlan(plan["run_id"], probes, plan["dcgm"]["level"]))
            return evidence.model_copy(update={"target": "kubernetes"})
        env = {"HOME": "/dev/null/home"} if what == "preflight" else None  # not creatable, not even by root
        if what == "no-nvml":  # the GPU path on this machine, which has no NVIDIA driver: the real pynvml
            plan["device"] = "cupy"  # raises NVMLError_LibraryNotFound (no libnvidia-ml.so.1 to load)
        return run_plan(ProbePlan.model_validate(plan), emit=framer(frames), env=env)

    def _killed(self, pod: dict[str, Any], what: str, half: str) -> None:
        """The container killed: by the OOM killer (before or after GPU 0's probes were framed), or a crash."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        image = pod["spec"]["containers"][0]["image"]
        if what == "oom":
            self.cluster.logs[(ns, name)] = "probe: starting\nprobe: memory 1 GiB x 2 buffers\n"
            self._set(pod, phase="Failed", containerStatuses=_terminated(image, 137, "OOMKilled"))
        elif what == "oom-halfway":  # GPU 0's probes framed in the log, then the kernel kills the container
            self.cluster.logs[(ns, name)] = half + "probe: memory 1 GiB x 2 buffers\n"
            self._set(pod, phase="Failed", containerStatuses=_terminated(image, 137, "OOMKilled"))
        else:
            self.cluster.logs[(ns, name)] = half + "Fatal Python error: Segmentation fault\n"
            self._set(pod, phase="Failed", containerStatuses=_terminated(image, 139, "Error"))

    def _ended(self, job: dict[str, Any], pod: dict[str, Any], what: str) -> None:
        """The pod ended from outside: the Job's deadline ran out (the Job controller fails the Job and deletes its
        active pods), or it was evicted; SIGTERM, the grace period, then the pod is gone."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if what == "deadline":
            j = self.cluster.get("jobs", ns, job["metadata"]["name"])
            if j is not None:
                j["status"] = {
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "DeadlineExceeded",
                            "message": "Job was active longer than specified deadline",
                        }
                    ]
                }
                self.cluster.update("jobs", j)
        else:
            cond = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
            }
            pod["status"]["conditions"] = [*(pod["status"].get("conditions") or []), cond]
        pod["metadata"]["deletionTimestamp"] = "2026-12-02T00:05:00Z"
        self._set(pod)
        time.sleep(0.3)  # the grace period: SIGTERM, the container exits
        image = pod["spec"]["containers"][0]["image"]
        self._set(pod, phase="Failed", containerStatuses=_terminated(image, 143, "Error"))
        time.sleep(0.3)
        self.cluster.delete("pods", ns, name)

    def _node_deleted(self, pod: dict[str, Any], node: str) -> None:
        """The node deleted under the pod: Pod GC fails and deletes it, and its log can no longer be read."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.cluster.delete("nodes", None, node)
        time.sleep(0.2)  # Pod GC notices the node is gone
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
        }
        self.cluster.log_errors[(ns, name)] = (404, f'nodes "{node}" not found')
        self._set(pod, phase="Failed", conditions=[cond])
        self.cluster.delete("pods", ns, name)

    # ---- the Indexed Job of the all-reduce across nodes -----------------------------------------------------------

    @staticmethod
    def _job_nodes(job: dict[str, Any]) -> list[str]:
        """The nodes the collective's node affinity names."""
        affinity = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        return list(term["matchFields"][0]["values"])

    def _run_indexed(self, job: dict[str, Any]) -> None:
        nodes = self._job_nodes(job)
        with socket.socket() as probe:  # the port the fake DNS maps the rendezvous to
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        k, self.collectives_made = self.collectives_made, self.collectives_made + 1
        what = self.collectives[k] if k < len(self.collectives) else "ok"
        free = list(nodes)  # anti-affinity: one pod of the collective per node
        for i in range(job["spec"]["completions"]):
            pod = self._pod(job)
            pod["metadata"]["name"] = f"{job['metadata']['name']}-{i}-{uuid.uuid4().hex[:5]}"
            pod["metadata"]["annotations"] = {INDEX: str(i)}
            pod["metadata"]["labels"][INDEX] = str(i)
            pod["spec"]["hostname"] = f"{job['metadata']['name']}-{i}"
            node, message = self.place(pod, among=free)
            if node is None:
                cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                pod["status"]["conditions"] = [cond]
                self.cluster.put("pods", pod)
                continue
            free.remove(node)
            pod["spec"]["nodeName"] = node
            self.cluster.put("pods", pod)
            threading.Thread(target=self._execute_rank, args=(job, pod, port, what), daemon=True).start()

    def _resolve(self, ns: str, host: str) -> str:
        hostname, _, subdomain = host.partition(".")
        svc = self.cluster.get("services", ns, subdomain)
        if svc is None or svc["spec"].get("clusterIP") != "None":
            return "unresolvable.invalid"
        for pod in self.cluster.list("pods", ns):
            spec = pod["spec"]
            if (
                spec.get("hostname") == hostname
                and spec.get("subdomain") == subdomain
                and all(pod["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items())
            ):
                return "127.0.0.1"
        return "unresolvable.invalid"

    def _execute_rank(self, job: dict[str, Any], pod: dict[str, Any], port: int, what: str = "ok") -> None:
        ns, name, node = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["spec"]["nodeName"]
        container = pod["spec"]["containers"][0]
        image, cmd = container["image"], container["command"]
        arg = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
        assert arg["--rank"] == "$(RANK)"
        assert env["RANK"] == f"metadata.annotations['{INDEX}']"
        rank = int(pod["metadata"]["annotations"][INDEX])
        running = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
        pod["status"] = {"phase": "Running", "containerStatuses": [container_status(image, running, ready=True)]}
        if self.cluster.update("pods", copy.deepcopy(pod)) is None:
            return  # deleted before its process started: the kubelet's status update is 404, nothing runs
        if self.fabric_behaviour.get(node) == "oom":
            self.cluster.logs[(ns, name)] = "probe: starting\nprobe: nccl 8 GiB buffers\n"
            terminated = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            pod["status"] = {"phase": "Failed", "containerStatuses": [container_status(image, terminated)]}
            self.cluster.update("pods", pod)
            return
        if what in ("hang", "deadline"):
            self._hung(job, pod, what)
            return
        plan = self._plan(ns, pod, node, Sizes(nccl_sizes=[1 << 16, 1 << 20]))
        if plan is None:  # the run ended as this process started (the simulator's process 0 waits for no one)
            return
        host = self._resolve(ns, arg["--rendezvous"].rpartition(":")[0])
        try:
            if self.simulator is not None:
                fabric = self._simulated_fabric(job, plan, what) if rank == 0 else None
            else:
                fabric = run_multinode(
                    ProbePlan.model_validate(plan),
                    rank=rank,
                    processes=int(arg["--processes"]),
                    host=host,
                    port=port,
                    timeout_s=min(float(arg["--rendezvous-timeout"]), 10),
                )
            log = frame(fabric.model_dump_json(by_alias=True)) if fabric is not None else f"rank {rank} done\n"
            phase, state = "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}}
        except Exception as exc:
            log = f"gpucert.measure.probes: error: {type(exc).__name__}: {exc}\n"
            phase, state = "Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}
        self.cluster.logs[(ns, name)] = log
        pod["status"] = {"phase": phase, "containerStatuses": [container_status(image, state)]}
        self.cluster.update("pods", pod)

    def _simulated_fabric(self, job: dict[str, Any], plan: dict[str, Any], what: str) -> FabricEvidence:
        """The simulator's all-reduce across the Job's nodes, as process 0 reports it; "slow:<factor>" scales its
        bandwidths."""
        from gpucert.measure.targets.base import MeasurePlan

        nodes = self._job_nodes(job)
        (ev,) = self.simulator.measure_fabrics([nodes], MeasurePlan(plan["run_id"], (Probe.NCCL,), 1))
        factor = float(what.partition(":")[2]) if what.startswith("slow:") else 1.0
        if ev.nccl is not None and factor != 1.0:
            points = [
                p.model_copy(update={"busbw": [x * factor for x in p.busbw], "algbw": [x * factor for x in p.algbw]})
                for p in ev.nccl.points
            ]
            ev = ev.model_copy(update={"nccl": ev.nccl.model_copy(update={"points": points})})
        return ev.model_copy(update={"target": "kubernetes"})  # type: ignore[no-any-return]

    def _hung(self, job: dict[str, Any], pod: dict[str, Any], what: str) -> None:
        """A process that never returns: it runs until its pod is deleted ("hang"), or until the Job's deadline
        runs out and the Job controller deletes it ("deadline", 0.05 s in)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.cluster.logs[(ns, name)] = "probe: starting\nprobe: nccl all_reduce across nodes\n"
        if what == "deadline":
            self.stop.wait(0.05)
            self._ended(job, pod, "deadline")


def _terminated(image: str, code: int, reason: str) -> list[dict[str, Any]]:
    return [container_status(image, {"terminated": {"exitCode": code, "reason": reason}})]
