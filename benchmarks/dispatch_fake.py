"""A fake Kubernetes API fast enough for 4,096 nodes, and an instant kubelet, for benchmarks/dispatch_scale.py.

tests/integration/fakecluster.py is the faithful fake (admission, RBAC, a scheduler, faults); it scans every object
on each list and every event on each watch wake-up, which is fine for sixteen nodes and quadratic at thousands.
This one serves only what a probe-Job run asks for, from dicts keyed by name, and a watch keeps its place in an
append-only event log. Its kubelet answers at once: a probe Job's pod is added Pending and turns Succeeded in the
same instant, its log the recorded evidence of a simulated node under the pod's node name.

Every request is counted by verb and resource (a watch is `watch pods`, a pod's log `get pods/log`), so the
benchmark can say what the controller asked per node.
"""

from __future__ import annotations

import bisect
import json
import logging
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from werkzeug import Request, Response
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

ROUTE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>[a-z]+)"
    r"(?:/(?P<name>[^/]+)(?P<sub>/log)?)?$"
)
HOSTNAME = "kubernetes.io/hostname"
NODE_LABEL = "gpucert.io/node"


def gpu_node(name: str, gpus: int = 8) -> dict[str, Any]:
    """A GPU node as NFD and GPU feature discovery label it, with the device plugin's allocatable GPUs."""
    labels = {
        HOSTNAME: name,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.full": "570.124.06",
        "nvidia.com/cuda.runtime-version.full": "12.8",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/gpu.replicas": "1",
    }
    resources = {"cpu": "192", "memory": "2097152000Ki", "pods": "110", "nvidia.com/gpu": str(gpus)}
    info = {
        "kernelVersion": "5.15.0-131-generic",
        "osImage": "Ubuntu 22.04.5 LTS",
        "containerRuntimeVersion": "containerd://1.7.24",
        "kubeletVersion": "v1.31.4",
        "kubeProxyVersion": "v1.31.4",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": info,
        },
    }


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, _, v in (t.partition("=") for t in filter(None, selector.split(","))))


def _status(code: int, message: str) -> Response:
    reason = {404: "NotFound", 409: "AlreadyExists", 410: "Gone"}.get(code, "Error")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    return Response(json.dumps({**body, "code": code}), status=code, content_type="application/json")


class FastFakeApi:
    """The objects of one cluster, its pod events, and the counters; `log_of(node)` is a Succeeded pod's log."""

    def __init__(self, nodes: list[dict[str, Any]], log_of: Callable[[str], str], fail_rate: float = 0.0) -> None:
        self.store: dict[tuple[str, str | None], dict[str, dict[str, Any]]] = {("nodes", None): {}}
        for n in nodes:
            self.store[("nodes", None)][n["metadata"]["name"]] = n
        self.log_of = log_of
        self.logs: dict[tuple[str, str], str] = {}  # (ns, pod) -> the node its log is of
        self.rv = 1000
        self.events: list[tuple[int, bytes]] = []  # (resourceVersion, one watch line) of the run's pods
        self.event_rvs: list[int] = []
        self.cond = threading.Condition()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.fail_rate = fail_rate  # the share of a node's requests (create, get, delete) answered 503
        self.failed: Counter[tuple[str, str]] = Counter()
        self.rng = random.Random(28)
        self.jobs_span: list[float] = []  # when the first Job was created and the last one deleted
        self.watches_open = 0
        self.max_watches_open = 0

    # ---- the store ---------------------------------------------------------------------------------------------

    def put(self, kind: str, ns: str | None, obj: dict[str, Any], event: str = "ADDED") -> dict[str, Any]:
        with self.cond:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            obj["metadata"].setdefault("uid", f"uid-{self.rv}")
            self.store.setdefault((kind, ns), {})[obj["metadata"]["name"]] = obj
            if kind == "pods":
                self._event(event, obj)
            return obj

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        line = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
        self.events.append((self.rv, line))
        self.event_rvs.append(self.rv)
        self.cond.notify_all()

    def remove(self, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.store.get((kind, ns), {}).pop(name, None)
            if obj is None:
                return None
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            if kind == "pods":
                self._event("DELETED", obj)
            if kind == "jobs":  # the garbage collector: the Job's pod goes with it
                self.remove("pods", ns, obj["metadata"]["name"] + "-pod")
            return obj

    # ---- the instant kubelet ---------------------------------------------------------------------------------

    def run_job(self, ns: str, job: dict[str, Any]) -> None:
        """The Job controller, scheduler and kubelet at once: the pod is placed, runs and succeeds."""
        tmpl = job["spec"]["template"]
        node = job["metadata"]["annotations"]["gpucert.io/node"]
        name = job["metadata"]["name"] + "-pod"
        labels = {**tmpl["metadata"]["labels"], "job-name": job["metadata"]["name"]}
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "x"}
        meta = {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner]}
        spec = {"nodeName": node, "containers": [{"name": "probe", "image": tmpl["spec"]["containers"][0]["image"]}]}
        self.logs[(ns, name)] = node
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
        self.put("pods", ns, pod)
        done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        status = {"name": "probe", "image": "", "imageID": "", "ready": False, "restartCount": 0, "state": done}
        succeeded = {**pod, "status": {"phase": "Succeeded", "containerStatuses": [status]}}
        self.put("pods", ns, succeeded, "MODIFIED")

    # ---- HTTP ----------------------------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        return self.handle(Request(environ))(environ, start_response)

    def handle(self, request: Request) -> Response:
        m = ROUTE.match(request.path)
        if m is None:
            return _status(404, f"no route for {request.path}")
        kind, ns, name, sub = m["kind"], m["ns"], m["name"], m["sub"]
        watch = request.args.get("watch") in ("true", "1")
        verb = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}.get(request.method)
        verb = verb or ("get" if name else "watch" if watch else "list")
        self.requests[(verb, kind + (sub or ""))] += 1
        if kind == "jobs" and verb in ("create", "delete"):
            now = time.monotonic()
            self.jobs_span = [self.jobs_span[0] if self.jobs_span else now, now]
        if kind == "clusterpolicies":
            return _status(404, "the server could not find the requested resource")
        if self.fail_rate and verb in ("create", "get", "delete") and self.rng.random() < self.fail_rate:
            self.failed[(verb, kind + (sub or ""))] += 1
            return _status(503, "etcdserver: request timed out")
        if request.method == "POST":
            return self._create(request, kind, ns)
        if request.method == "DELETE":
            gone = self.remove(kind, ns, name or "")
            return Response(json.dumps(gone), content_type="application/json") if gone else _status(404, "not found")
        if sub:
            node = self.logs.get((ns or "", name or ""))
            return Response(self.log_of(node), content_type="text/plain") if node else _status(404, "no log")
        if name:
            obj = self.store.get((kind, ns), {}).get(name)
            return Response(json.dumps(obj), content_type="application/json") if obj else _status(404, "not found")
        if watch:
            rv, timeout = request.args.get("resourceVersion"), float(request.args.get("timeoutSeconds", "300"))
            stream = self._watch(int(rv) if rv else self.rv, timeout)
            return Response(stream, content_type="application/json", direct_passthrough=True)
        return self._list(kind, ns, request.args)

    def _create(self, request: Request, kind: str, ns: str | None) -> Response:
        body = json.loads(request.data)
        if request.args.get("dryRun") == "All":
            return Response(json.dumps(body), status=201, content_type="application/json")
        if body["metadata"]["name"] in self.store.get((kind, ns), {}):
            return _status(409, f'{kind} "{body["metadata"]["name"]}" already exists')
        body["metadata"]["namespace"] = ns
        obj = self.put(kind, ns, body)
        if kind == "jobs":
            self.run_job(ns or "", obj)
        return Response(json.dumps(obj), status=201, content_type="application/json")

    def _list(self, kind: str, ns: str | None, args: Any) -> Response:
        with self.cond:
            items = [o for o in self.store.get((kind, ns), {}).values() if _selected(o, args.get("labelSelector", ""))]
            rv = self.rv
        start, limit = int(args.get("continue") or 0), int(args.get("limit") or 0) or len(items) or 1
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        page = {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items[start : start + limit]}
        return Response(json.dumps(page), content_type="application/json")

    def _watch(self, since: int, timeout: float) -> Iterator[bytes]:
        """Events after resourceVersion `since`, for up to `timeout` seconds; each watch keeps its place."""
        deadline = time.monotonic() + timeout
        with self.cond:
            self.watches_open += 1
            self.max_watches_open = max(self.max_watches_open, self.watches_open)
            pos = bisect.bisect_right(self.event_rvs, since)
        try:
            while True:
                with self.cond:
                    while pos >= len(self.events):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return
                        self.cond.wait(min(left, 0.5))
                    fresh = self.events[pos:]
                    pos = len(self.events)
                # every pod here is a run's pod: each carries the run's label the selector asks for
                yield b"".join(line for _, line in fresh)
        finally:
            with self.cond:
                self.watches_open -= 1


class _Handler(WSGIRequestHandler):
    # as a Go API server does: without it, a response's headers and body in two writes meet the client's delayed
    # ACK (Nagle), and every request costs 40 ms of nothing
    disable_nagle_algorithm = True


def serve(api: FastFakeApi) -> tuple[BaseWSGIServer, str]:
    """`api` behind a threaded HTTP/1.1 server on a free port of 127.0.0.1, serving in a thread; its URL."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, api, threaded=True, request_handler=_Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"
