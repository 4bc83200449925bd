"""A fake Kubernetes API server with an object store, watches and cascading deletes, and a fake kubelet that runs
each probe Job's plan on the NumPy device and serves the framed evidence as the pod's log.

Served by pytest-httpserver's threaded server, so a watch stream and other requests proceed at once.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from werkzeug import Request, Response

from gpucert.probes.framing import frame
from gpucert.probes.multinode import run_multinode
from gpucert.probes.runner import BudgetSpec, ProbePlan, Sizes, run_plan

INDEX = "batch.kubernetes.io/job-completion-index"

ROUTES = [
    ("nodes", re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+))?$")),
    ("pods", re.compile(r"^/api/v1/pods$")),  # every namespace
    (
        "core",
        re.compile(
            r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|configmaps|services)"
            r"(?:/(?P<name>[^/]+)(?:(?P<log>/log)|(?P<eviction>/eviction))?)?$"
        ),
    ),
    ("jobs", re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs(?:/(?P<name>[^/]+))?$")),
    ("leases", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$")),
    ("clusterpolicies", re.compile(r"^/apis/nvidia\.com/v1/clusterpolicies$")),
]


def container_status(image: str, state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    """A container status with every field a real kubelet reports (the client validates them)."""
    return {
        "name": "probe",
        "image": image,
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
    }


def _selected(obj: dict[str, Any], selector: str, fields: str = "") -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, fields.split(",")):  # the one field selector gpucert uses: spec.nodeName=NODE
        key, _, value = term.partition("=")
        assert key == "spec.nodeName", f"the fake serves no field selector on {key}"
        if (obj.get("spec") or {}).get("nodeName") != value:
            return False
    return True


def _merge(dst: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


def _status(code: int, message: str) -> Response:
    reason = {403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Gone", 500: "InternalError"}.get(code, "Error")
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return Response(json.dumps(body), status=code, content_type="application/json")


@dataclass
class FakeCluster:
    objects: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[int, str, str | None, str, dict[str, Any]]] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    failures: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    max_jobs: int = 0
    rv: int = 1000
    cond: threading.Condition = field(default_factory=threading.Condition)

    # ---- the store -------------------------------------------------------------------------------------------------

    def put(self, kind: str, obj: dict[str, Any], event: str = "ADDED") -> dict[str, Any]:
        with self.cond:
            self.rv += 1
            meta = obj.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            meta["resourceVersion"] = str(self.rv)
            key = (kind, meta.get("namespace"), meta["name"])
            self.objects[key] = obj
            self.events.append((self.rv, kind, meta.get("namespace"), event, copy.deepcopy(obj)))
            if kind == "jobs":
                self.max_jobs = max(self.max_jobs, len(self.list("jobs")))
            self.cond.notify_all()
            return obj

    def delete(self, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.pop((kind, ns, name), None)
            if obj is None:
                return None
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, kind, ns, "DELETED", copy.deepcopy(obj)))
            uid = obj["metadata"]["uid"]
            for (k, n, nm), o in list(self.objects.items()):  # garbage collection of dependents
                if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or []):
                    self.delete(k, n, nm)
            self.cond.notify_all()
            return obj

    def list(self, kind: str, ns: str | None = None, selector: str = "", fields: str = "") -> list[dict[str, Any]]:
        with self.cond:
            return [
                copy.deepcopy(o)
                for (k, n, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
                if k == kind and (ns is None or n == ns) and _selected(o, selector, fields)
            ]

    def get(self, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        with self.cond:
            o = self.objects.get((kind, ns, name))
            return copy.deepcopy(o) if o else None

    def fail(self, method: str, kind: str, status: int, times: int = 1, message: str = "") -> None:
        self.failures.setdefault((method, kind), []).extend([(status, message)] * times)

    # ---- HTTP ----------------------------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        self.requests.append((request.method, request.full_path))
        found = next(((k, p.match(request.path)) for k, p in ROUTES if p.match(request.path)), None)
        if found is None:
            return _status(404, f"no route for {request.path}")
        kind, m = found
        assert m is not None
        groups = m.groupdict()
        if kind == "core":
            kind = groups["res"]
        ns, name = groups.get("ns"), groups.get("name")
        pending = self.failures.get((request.method, kind))
        if pending:
            code, message = pending.pop(0)
            return _status(code, message or f"injected {code}")
        args = request.args
        if request.method == "POST" and groups.get("eviction"):  # no PodDisruptionBudgets here: evicted at once
            gone = self.delete("pods", ns, name or "")
            return (
                Response(json.dumps({"kind": "Status", "status": "Success"}), status=201)
                if gone
                else _status(404, f'pods "{name}" not found')
            )
        if request.method == "GET" and groups.get("log"):
            log = self.logs.get((ns or "", name or ""))
            return (
                Response(log or "", content_type="text/plain")
                if log is not None
                else _status(404, f'pods "{name}" has no log')
            )
        if request.method == "GET" and name:
            obj = self.get(kind, ns, name)
            return (
                Response(json.dumps(obj), content_type="application/json")
                if obj
                else _status(404, f'{kind} "{name}" not found')
            )
        if request.method == "GET" and args.get("watch") in ("true", "True", "1"):
            return Response(
                self._watch(
                    kind,
                    ns,
                    args.get("labelSelector", ""),
                    args.get("resourceVersion"),
                    float(args.get("timeoutSeconds", "5")),
                    args.get("fieldSelector", ""),
                ),
                content_type="application/json",
                direct_passthrough=True,
            )
        if request.method == "GET":
            items = self.list(kind, ns, args.get("labelSelector", ""), args.get("fieldSelector", ""))
            start, limit = int(args.get("continue") or 0), int(args.get("limit") or 0) or len(items) or 1
            meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            return Response(
                json.dumps(
                    {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items[start : start + limit]}
                ),
                content_type="application/json",
            )
        if request.method == "POST":
            body = json.loads(request.data)
            body["metadata"]["namespace"] = ns
            if self.get(kind, ns, body["metadata"]["name"]):
                return _status(409, f'{kind} "{body["metadata"]["name"]}" already exists')
            return Response(json.dumps(self.put(kind, body)), status=201, content_type="application/json")
        if request.method in ("PATCH", "PUT") and name:
            current = self.get(kind, ns, name)
            if current is None:
                return _status(404, f'{kind} "{name}" not found')
            body = json.loads(request.data)
            if request.method == "PUT":
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want and want != current["metadata"]["resourceVersion"]:
                    return _status(
                        409,
                        f'Operation cannot be fulfilled on {kind} "{name}": the object has '
                        "been modified; please apply your changes to the latest version and try again",
                    )
                body["metadata"]["uid"] = current["metadata"]["uid"]
                current = body
            else:
                _merge(current, body)
            return Response(json.dumps(self.put(kind, current, "MODIFIED")), content_type="application/json")
        if request.method == "DELETE":
            if name:
                obj = self.delete(kind, ns, name)
                return (
                    Response(json.dumps(obj), content_type="application/json")
                    if obj
                    else _status(404, f'{kind} "{name}" not found')
                )
            gone = [
                self.delete(kind, ns, o["metadata"]["name"]) for o in self.list(kind, ns, args.get("labelSelector", ""))
            ]
            return Response(json.dumps({"kind": "List", "items": gone}), content_type="application/json")
        return _status(405, f"{request.method} not supported by the fake")

    def _watch(
        self, kind: str, ns: str | None, selector: str, rv: str | None, timeout: float, fields: str = ""
    ) -> Iterator[bytes]:
        deadline = time.monotonic() + timeout
        with self.cond:
            if rv:
                seen = int(rv)
            else:
                seen = self.rv
                initial = self.list(kind, ns, selector, fields)
        if not rv:
            for obj in initial:
                yield (json.dumps({"type": "ADDED", "object": obj}) + "\n").encode()
        while True:
            with self.cond:
                fresh = [e for e in self.events if e[0] > seen and e[1] == kind and (ns is None or e[2] == ns)]
                if not fresh:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.cond.wait(min(left, 0.2))
                    continue
            for rv_, _, _, etype, obj in fresh:
                seen = rv_
                if _selected(obj, selector, fields):
                    yield (json.dumps({"type": etype, "object": obj}) + "\n").encode()


# ---- the fake kubelet -------------------------------------------------------------------------------------------


@dataclass
class FakeKubelet:
    """Runs each probe Job's pod: the plan from its ConfigMap, on the NumPy device, the framed evidence as its log.

    `behaviour[node]` changes what happens on a node: "pending" (unschedulable, stays Pending), "imagepull",
    "oom" (killed mid-run), "truncate" (the log is cut), "slow" (takes `slow_s` seconds).

    An Indexed Job (the all-reduce across nodes) gets one pod per index, placed on the nodes its node affinity
    names, in order; each runs its rank of the collective over loopback. The fake DNS resolves `<hostname>.<svc>`
    only when a headless Service `svc` selects a pod with that hostname and subdomain, as the cluster DNS does.
    `fabric_behaviour[node]` ("pending", "oom") changes that node's pod of the collective only.
    """

    cluster: FakeCluster
    behaviour: dict[str, str] = field(default_factory=dict)
    fabric_behaviour: dict[str, str] = field(default_factory=dict)
    simulator: Any = None  # a SimulatedTarget: its evidence for the node instead of running the plan on NumPy
    slow_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

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
            for job in self.cluster.list("jobs"):
                ns, jname = job["metadata"]["namespace"], job["metadata"]["name"]
                if not any(p["metadata"]["labels"].get("job-name") == jname for p in self.cluster.list("pods", ns)):
                    if job["spec"].get("completionMode") == "Indexed":
                        self._run_indexed(job)
                    else:
                        self._run_pod(job)
            self.stop.wait(0.01)

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

    def _run_pod(self, job: dict[str, Any]) -> None:
        pod = self._pod(job)
        node = pod["spec"]["nodeName"]
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        what = self.behaviour.get(node, "ok")
        if what == "pending":
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/16 nodes are available: 1 Insufficient nvidia.com/gpu.",
                }
            ]
            self.cluster.put("pods", pod)
            return
        image = pod["spec"]["containers"][0]["image"]
        if what == "imagepull":
            waiting = {
                "reason": "ErrImagePull",
                "message": "rpc error: code = NotFound desc = failed to pull and "
                'unpack image "registry.local/gpucert-probe:missing": not found',
            }
            pod["status"]["containerStatuses"] = [container_status(image, {"waiting": waiting})]
            self.cluster.put("pods", pod)
            return
        self.cluster.put("pods", pod)
        threading.Thread(target=self._execute, args=(job, pod, node, ns, name, what), daemon=True).start()

    # ---- the Indexed Job of the all-reduce across nodes -----------------------------------------------------------

    def _run_indexed(self, job: dict[str, Any]) -> None:
        affinity = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        nodes = term["matchFields"][0]["values"]
        with socket.socket() as probe:  # the port the fake DNS maps the rendezvous to
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        for i in range(job["spec"]["completions"]):
            pod = self._pod(job)
            pod["metadata"]["name"] = f"{job['metadata']['name']}-{i}-{uuid.uuid4().hex[:5]}"
            pod["metadata"]["annotations"] = {INDEX: str(i)}
            pod["metadata"]["labels"][INDEX] = str(i)
            pod["spec"]["hostname"] = f"{job['metadata']['name']}-{i}"
            node = nodes[i]
            if self.fabric_behaviour.get(node) == "pending":
                pod["status"]["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": f"0/16 nodes are available: 1 node(s) had untolerated taint; {node} is cordoned.",
                    }
                ]
                self.cluster.put("pods", pod)
                continue
            pod["spec"]["nodeName"] = node
            self.cluster.put("pods", pod)
            threading.Thread(target=self._execute_rank, args=(job, pod, port), daemon=True).start()

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

    def _execute_rank(self, job: dict[str, Any], pod: dict[str, Any], port: int) -> None:
        ns, name, node = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["spec"]["nodeName"]
        container = pod["spec"]["containers"][0]
        image, cmd = container["image"], container["command"]
        arg = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
        assert arg["--rank"] == "$(RANK)"
        assert env["RANK"] == f"metadata.annotations['{INDEX}']"
        rank = int(pod["metadata"]["annotations"][INDEX])
        running = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
        pod["status"] = {"phase": "Running", "containerStatuses": [container_status(image, running, ready=True)]}
        self.cluster.put("pods", copy.deepcopy(pod), "MODIFIED")
        if self.fabric_behaviour.get(node) == "oom":
            self.cluster.logs[(ns, name)] = "probe: starting\nprobe: nccl 8 GiB buffers\n"
            terminated = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            pod["status"] = {"phase": "Failed", "containerStatuses": [container_status(image, terminated)]}
            self.cluster.put("pods", pod, "MODIFIED")
            return
        plan = self._plan(ns, pod, node, Sizes(nccl_sizes=[1 << 16, 1 << 20]))
        assert plan is not None
        host = self._resolve(ns, arg["--rendezvous"].rpartition(":")[0])
        try:
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
            log = f"gpucert.probes: error: {type(exc).__name__}: {exc}\n"
            phase, state = "Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}
        self.cluster.logs[(ns, name)] = log
        pod["status"] = {"phase": phase, "containerStatuses": [container_status(image, state)]}
        if self.cluster.get("pods", ns, name) is not None:
            self.cluster.put("pods", pod, "MODIFIED")

    def _plan(self, ns: str, pod: dict[str, Any], node: str, sizes: Sizes) -> dict[str, Any] | None:
        """The plan the pod mounts, made small: two NumPy devices, three repetitions, small buffers."""
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
        )
        return plan

    def _execute(self, job: dict[str, Any], pod: dict[str, Any], node: str, ns: str, name: str, what: str) -> None:
        image = pod["spec"]["containers"][0]["image"]
        running = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
        pod["status"] = {"phase": "Running", "containerStatuses": [container_status(image, running, ready=True)]}
        self.cluster.put("pods", copy.deepcopy(pod), "MODIFIED")
        sizes = Sizes(memory_bytes=1 << 20, gemm_n=32, pcie_bytes=1 << 18, p2p_bytes=1 << 18, nccl_sizes=[1 << 16])
        plan = self._plan(ns, pod, node, sizes)
        if plan is None:
            return
        if self.slow_s:
            time.sleep(self.slow_s)
        if self.cluster.get("pods", ns, name) is None:
            return  # deleted while it ran
        if self.simulator is not None:
            from gpucert.targets.base import MeasurePlan

            probes = tuple(self.simulator.spec.certify.probes)
            evidence = self.simulator.measure_node(node, MeasurePlan(plan["run_id"], probes, plan["dcgm"]["level"]))
            evidence = evidence.model_copy(update={"target": "kubernetes"})
        else:
            evidence = run_plan(ProbePlan.model_validate(plan))
        log = "probe: starting\n" + frame(evidence.model_dump_json(by_alias=True))
        if what == "oom":
            self.cluster.logs[(ns, name)] = "probe: starting\nprobe: memory 1 GiB x 2 buffers\n"
            pod["status"] = {
                "phase": "Failed",
                "containerStatuses": [
                    container_status(image, {"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
                ],
            }
        else:
            self.cluster.logs[(ns, name)] = log[: len(log) // 2] if what == "truncate" else log
            pod["status"] = {
                "phase": "Succeeded",
                "containerStatuses": [container_status(image, {"terminated": {"exitCode": 0, "reason": "Completed"}})],
            }
        if self.cluster.get("pods", ns, name) is not None:
            self.cluster.put("pods", pod, "MODIFIED")
