"""A fake Kubernetes API server with an object store, watches and cascading deletes (fakekubelet.py adds the
scheduler and kubelet that run the probe pods).

Served by pytest-httpserver's threaded server, so a watch stream and other requests proceed at once. Faults are
injected per request: a status (with headers, e.g. Retry-After), a hang (a request answered only after a delay),
a watch whose resourceVersion has expired (410 Gone as an ERROR event), a watch that hangs without a byte, and a
pod whose log the kubelet cannot serve.

A pod is admitted as a real API server admits it: Pod Security by its namespace's labels (fakeadmission.py), dry
runs (`dryRun=All`) included, which are admitted or refused and never stored. A SelfSubjectAccessReview is answered
from deploy/'s RBAC for the gpucert service account (rbac.py), less the grants a test takes away in `denied`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from werkzeug import Request, Response

from . import rbac
from .fakeadmission import forbidden

INDEX = "batch.kubernetes.io/job-completion-index"

USER = "system:serviceaccount:gpucert:gpucert"  # who the fake says is asking (deploy/'s service account)
ROUTES = [
    ("nodes", re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+))?$")),
    ("namespaces", re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")),
    ("selfsubjectaccessreviews", re.compile(r"^/apis/authorization\.k8s\.io/v1/selfsubjectaccessreviews$")),
    ("runtimeclasses", re.compile(r"^/apis/node\.k8s\.io/v1/runtimeclasses(?:/(?P<name>[^/]+))?$")),
    ("pods", re.compile(r"^/api/v1/pods$")),  # every namespace
    (
        "core",
        re.compile(
            r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|configmaps|services|secrets)"
            r"(?:/(?P<name>[^/]+)(?:(?P<log>/log)|(?P<eviction>/eviction))?)?$"
        ),
    ),
    ("jobs", re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs(?:/(?P<name>[^/]+))?$")),
    ("leases", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$")),
    ("clusterpolicies", re.compile(r"^/apis/nvidia\.com/v1/clusterpolicies$")),
    (
        "customresourcedefinitions",
        re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions(?:/(?P<name>[^/]+))?$"),
    ),
    (
        "jobsets",
        re.compile(r"^/apis/jobset\.x-k8s\.io/v1alpha2/namespaces/(?P<ns>[^/]+)/jobsets(?:/(?P<name>[^/]+))?$"),
    ),
    (
        "localqueues",
        re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/localqueues(?:/(?P<name>[^/]+))?$"),
    ),
    (
        "workloads",
        re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/workloads(?:/(?P<name>[^/]+))?$"),
    ),
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
    for term in filter(None, fields.split(",")):  # the pod fields gpucert selects on, `=` or `!=`, ANDed
        key, op, value = term.partition("!=") if "!=" in term else term.partition("=")
        field = {"spec.nodeName": ("spec", "nodeName"), "status.phase": ("status", "phase")}.get(key)
        assert field is not None, f"the fake serves no field selector on {key}"
        if ((obj.get(field[0]) or {}).get(field[1], "") == value) != (op == "="):
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


def _status(
    code: int, message: str, headers: dict[str, str] | None = None, details: dict[str, str] | None = None
) -> Response:
    reason = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Gone",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }.get(code, "Error")
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return Response(json.dumps(body), status=code, content_type="application/json", headers=headers)


def _default_host_ports(spec: dict[str, Any]) -> None:
    """The API's defaulting, on decoding and so before admission: with hostNetwork every container port's hostPort
    is its containerPort (kubernetes pkg/apis/core/v1/defaults.go, SetDefaults_PodSpec, defaultHostNetworkPorts)."""
    if not spec.get("hostNetwork"):
        return
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in c.get("ports") or []:
            port.setdefault("hostPort", port.get("containerPort"))


@dataclass
class FakeCluster:
    objects: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[int, str, str | None, str, dict[str, Any]]] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    failures: dict[tuple[str, str], list[tuple[int, str, dict[str, str]]]] = field(default_factory=dict)
    hangs: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    log_errors: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (ns, pod) -> kubelet's answer
    expired_watches: int = 0  # the next N watches from a resourceVersion get 410 Gone (compacted away)
    hung_watches: int = 0  # the next N watches send nothing for `hang_s` (a hung API server)
    dropped_watches: int = 0  # the next N watches end after their first event (a proxy cutting the stream)
    failed_watches: int = 0  # the next N watches are answered 503 (an API server that lists but cannot watch)
    hang_s: float = 0.0
    # a deleted pod stays, Terminating (deletionTimestamp set), through this many lists of pods before it is gone: 0
    # removes it at once. A cluster's Background deletion of a Job removes the Job at once and leaves its pods to
    # the garbage collector, which deletes them later (attemptToDeleteItem), and a running pod's delete is graceful,
    # the kubelet's to finish (kubernetes pkg/registry/core/pod/strategy.go, CheckGracefulDelete)
    grace_lists: int = 0
    terminating: dict[tuple[str, str | None, str], int] = field(default_factory=dict)  # pod -> the lists it has left
    requests: list[tuple[str, str]] = field(default_factory=list)
    on_request: Callable[[str, str], None] | None = None  # (method, path), before the request is answered
    max_jobs: int = 0
    denied: set[tuple[str, str, str]] = field(default_factory=set)  # (apiGroup, resource, verb) RBAC refuses
    # kind -> what its schema refuses in a created object (a custom resource's CRD): refused with 422 Invalid
    validators: dict[str, Callable[[dict[str, Any]], list[str]]] = field(default_factory=dict)
    rv: int = 1000
    in_flight: dict[str, int] = field(default_factory=dict)  # method -> requests being answered now
    most_in_flight: dict[str, int] = field(default_factory=dict)  # method -> the most answered at once
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

    def update(self, kind: str, obj: dict[str, Any], event: str = "MODIFIED") -> dict[str, Any] | None:
        """Replace `obj` only while that very object (its uid) is still stored, as an update does (a controller's
        PUT or PATCH, the kubelet's pod status update): one deleted meanwhile is 404 Not Found, never created again
        (`put` stores whatever it is given). None when it was gone. The real ones: kubernetes
        pkg/registry/core/pod/strategy.go (podStrategy.AllowCreateOnUpdate is false, so the generic store's Update
        of a missing pod is NotFound), and pkg/kubelet/status/status_manager.go syncPod (on IsNotFound: "Pod does
        not exist on the server", the status update is dropped)."""
        with self.cond:
            meta = obj["metadata"]
            current = self.objects.get((kind, meta.get("namespace"), meta["name"]))
            if current is None or current["metadata"]["uid"] != meta.get("uid", current["metadata"]["uid"]):
                return None
            if current["metadata"].get("deletionTimestamp"):  # an update never takes a deletion back
                meta["deletionTimestamp"] = current["metadata"]["deletionTimestamp"]
            return self.put(kind, obj, event)

    def delete(self, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        """Delete an object and, at once, its dependents; with `grace_lists`, a pod only becomes Terminating (a
        second delete of it changes nothing, as kube-apiserver's Store.Delete answers a pending graceful deletion)."""
        with self.cond:
            key = (kind, ns, name)
            obj = self.objects.get(key)
            if obj is None or kind != "pods" or not self.grace_lists:
                return self._remove(kind, ns, name)
            if key not in self.terminating:
                self.terminating[key] = self.grace_lists
                obj["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self.put(kind, obj, "MODIFIED")
            return copy.deepcopy(obj)

    def listed_pods(self) -> None:
        """A list of pods was answered: each Terminating pod has one list fewer left, and goes after its last."""
        with self.cond:
            for key, left in list(self.terminating.items()):
                if left > 1:
                    self.terminating[key] = left - 1
                else:
                    del self.terminating[key]
                    self._remove(*key)

    def _remove(self, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        with self.cond:
            self.terminating.pop((kind, ns, name), None)
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

    def fail(self, method: str, kind: str, status: int, times: int = 1, message: str = "", **headers: str) -> None:
        """The next `times` requests `method kind` get `status` (headers: Retry_After="2" sends Retry-After: 2)."""
        named = {k.replace("_", "-"): v for k, v in headers.items()}
        self.failures.setdefault((method, kind), []).extend([(status, message, named)] * times)

    def hang(self, method: str, kind: str, seconds: float, times: int = 1) -> None:
        """The next `times` requests `method kind` are answered only after `seconds` (a hung API server)."""
        self.hangs.setdefault((method, kind), []).extend([seconds] * times)

    # ---- HTTP ----------------------------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        with self.cond:
            now = self.in_flight[request.method] = self.in_flight.get(request.method, 0) + 1
            self.most_in_flight[request.method] = max(now, self.most_in_flight.get(request.method, 0))
        try:
            return self._handle(request)
        finally:
            with self.cond:
                self.in_flight[request.method] -= 1

    def _handle(self, request: Request) -> Response:
        self.requests.append((request.method, request.full_path))
        if self.on_request is not None:
            self.on_request(request.method, request.path)
        found = next(((k, p.match(request.path)) for k, p in ROUTES if p.match(request.path)), None)
        if found is None:
            return _status(404, f"no route for {request.path}")
        kind, m = found
        assert m is not None
        groups = m.groupdict()
        if kind == "core":
            kind = groups["res"]
        ns, name = groups.get("ns"), groups.get("name")
        refused = self._rbac_refusal(request, name)
        if refused:
            return _status(403, refused, details={"name": name or "", "kind": refused.split()[0].split(".")[0]})
        injected = self._injected(request.method, kind)
        if injected is not None:
            return injected
        if request.method == "GET":
            return self._get(request, kind, ns, name, groups)
        if request.method == "POST":
            return self._post(request, kind, ns, name, groups)
        if request.method in ("PATCH", "PUT") and name:
            return self._update(request, kind, ns, name)
        if request.method == "DELETE":
            return self._delete(request, kind, ns, name)
        return _status(405, f"{request.method} not supported by the fake")

    def _injected(self, method: str, kind: str) -> Response | None:
        """The failure the test queued for this request (`fail`), after the delay it queued (`hang`)."""
        with self.cond:  # requests are answered at once (a fabric round's creates)
            pending = self.failures.get((method, kind))
            failure = pending.pop(0) if pending else None
        if failure is not None:
            code, message, headers = failure
            return _status(code, message or f"injected {code}", headers)
        with self.cond:
            stall = self.hangs.get((method, kind))
            seconds = stall.pop(0) if stall else 0.0
        if seconds:
            time.sleep(seconds)
        return None

    def _get(self, request: Request, kind: str, ns: str | None, name: str | None, groups: dict[str, Any]) -> Response:
        """A pod's log, one object, a watch, or a list (paged by limit and continue)."""
        args = request.args
        if groups.get("log"):
            if (ns or "", name or "") in self.log_errors:
                return _status(*self.log_errors[(ns or "", name or "")])
            log = self.logs.get((ns or "", name or ""))
            if log is None:
                return _status(404, f'pods "{name}" has no log')
            data = log.encode()
            if args.get("limitBytes"):  # the kubelet cuts the line that passes it (kuberuntime/logs/logs.go, write)
                data = data[: int(args["limitBytes"])]
            return Response(data, content_type="text/plain")
        if name:
            obj = self.get(kind, ns, name)
            return (
                Response(json.dumps(obj), content_type="application/json")
                if obj
                else _status(404, f'{kind} "{name}" not found')
            )
        if args.get("watch") in ("true", "True", "1"):
            if self.failed_watches > 0:
                self.failed_watches -= 1
                return _status(503, "the watch cache is not ready")
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
        items = self.list(kind, ns, args.get("labelSelector", ""), args.get("fieldSelector", ""))
        start, limit = int(args.get("continue") or 0), int(args.get("limit") or 0) or len(items) or 1
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if kind == "pods":
            self.listed_pods()
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return Response(
            json.dumps({"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items[start : start + limit]}),
            content_type="application/json",
        )

    def _post(self, request: Request, kind: str, ns: str | None, name: str | None, groups: dict[str, Any]) -> Response:
        """An eviction, an access review, or a create (admitted first; with dryRun=All, not stored)."""
        if groups.get("eviction"):  # no PodDisruptionBudgets here: evicted at once
            gone = self.delete("pods", ns, name or "")
            return (
                Response(json.dumps({"kind": "Status", "status": "Success"}), status=201)
                if gone
                else _status(404, f'pods "{name}" not found')
            )
        if kind == "selfsubjectaccessreviews":
            return self._review(json.loads(request.data))
        body = json.loads(request.data)
        body["metadata"]["namespace"] = ns
        if kind == "pods":
            _default_host_ports(body.get("spec") or {})
        refusal = self.admit(ns or "", body) if kind == "pods" else ""
        if refusal:
            return _status(403, refusal, details={"name": body["metadata"]["name"], "kind": "pods"})
        invalid = self.validators[kind](body) if kind in self.validators else []
        if invalid:
            return _status(422, f'{kind} "{body["metadata"]["name"]}" is invalid: {"; ".join(invalid)}')
        if request.args.get("dryRun") == "All":  # admitted, and not stored
            return Response(json.dumps(body), status=201, content_type="application/json")
        if self.get(kind, ns, body["metadata"]["name"]):
            return _status(409, f'{kind} "{body["metadata"]["name"]}" already exists')
        return Response(json.dumps(self.put(kind, body)), status=201, content_type="application/json")

    def _update(self, request: Request, kind: str, ns: str | None, name: str) -> Response:
        """A merge patch, or a replace that must name the object's current resourceVersion (when it names one)."""
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
        stored = self.update(kind, current)
        if stored is None:  # deleted since it was read
            return _status(404, f'{kind} "{name}" not found')
        return Response(json.dumps(stored), content_type="application/json")

    def _delete(self, request: Request, kind: str, ns: str | None, name: str | None) -> Response:
        """One object, or every object a label selector picks (a collection delete)."""
        if name:
            obj = self.delete(kind, ns, name)
            return (
                Response(json.dumps(obj), content_type="application/json")
                if obj
                else _status(404, f'{kind} "{name}" not found')
            )
        selected = self.list(kind, ns, request.args.get("labelSelector", ""))
        gone = [self.delete(kind, ns, o["metadata"]["name"]) for o in selected]
        return Response(json.dumps({"kind": "List", "items": gone}), content_type="application/json")

    def admit(self, ns: str, pod: dict[str, Any]) -> str:
        """ "" when the API server admits `pod`, else its Forbidden message: the RuntimeClass plugin first (it
        mutates, so it runs before validation: plugin/pkg/admission/runtimeclass/admission.go, `pod rejected:
        RuntimeClass %q not found` through admission.NewForbidden), then Pod Security."""
        runtime = (pod.get("spec") or {}).get("runtimeClassName")
        if runtime and self.get("runtimeclasses", None, runtime) is None:
            return f'pods "{pod["metadata"]["name"]}" is forbidden: pod rejected: RuntimeClass "{runtime}" not found'
        return forbidden(self.get("namespaces", None, ns), pod)

    def _rbac_refusal(self, request: Request, name: str | None) -> str:
        """The authorizer's Forbidden message for a request `denied` takes away, else "": apierrors.NewForbidden of
        the group-qualified resource and the URL's name (none for a create), with forbiddenMessage's words
        (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go)."""
        group, resource, verb, ns = rbac.verb(request.method, request.full_path)
        if (group, resource, verb) not in self.denied:
            return ""
        qualified = resource.split("/")[0] + (f".{group}" if group else "")
        where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        said = f'User "{USER}" cannot {verb} resource "{resource}" in API group "{group}" {where}'
        named = f' "{name}"' if name else ""  # a create has none in its URL
        return f"{qualified}{named} is forbidden: {said}"

    def _review(self, body: dict[str, Any]) -> Response:
        """A SelfSubjectAccessReview: what deploy/'s RBAC grants the gpucert service account, less `denied`."""
        attrs = body["spec"]["resourceAttributes"]
        resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        asked = (attrs.get("group", ""), resource, attrs["verb"], attrs.get("namespace") or None)
        roles = rbac.roles_of("gpucert", "gpucert")
        allowed = not rbac.not_granted({asked}, roles) and asked[:3] not in self.denied
        status = {"allowed": allowed, **({} if allowed else {"reason": ""})}
        answer = {**body, "status": status}
        return Response(json.dumps(answer), status=201, content_type="application/json")

    def _watch_fault(self, rv: str | None) -> Iterator[bytes] | None:
        """A watch the test made hang (not a byte, past the watch's own timeout: only a client-side read timeout
        ends it) or expire (410 Gone, for one that resumes from a resourceVersion); None for a working watch."""
        with self.cond:
            hung = self.hung_watches > 0
            self.hung_watches -= hung
            expired = bool(rv) and self.expired_watches > 0
            self.expired_watches -= expired
        if hung:
            time.sleep(self.hang_s)
            return iter(())
        if expired:
            gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
            gone["message"] = f"too old resource version: {rv} ({self.rv})"
            return iter([(json.dumps({"type": "ERROR", "object": gone}) + "\n").encode()])
        return None

    def _dropped(self) -> bool:
        """Whether this watch is one the test had cut after its first event."""
        with self.cond:
            dropped = self.dropped_watches > 0
            self.dropped_watches -= dropped
            return dropped

    def _watch(
        self, kind: str, ns: str | None, selector: str, rv: str | None, timeout: float, fields: str = ""
    ) -> Iterator[bytes]:
        deadline = time.monotonic() + timeout
        fault = self._watch_fault(rv)
        if fault is not None:
            yield from fault
            return
        dropped = self._dropped()
        # the headers at once, before any event, as kube-apiserver does (WatchServer.HandleHTTP in
        # staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go: WriteHeader(200), then flusher.Flush());
        # werkzeug 3.1's server sends the headers and no chunk for an empty write
        yield b""
        with self.cond:
            if rv:
                seen = int(rv)
            else:
                seen = self.rv
                initial = self.list(kind, ns, selector, fields)
        if not rv:
            for obj in initial:
                yield (json.dumps({"type": "ADDED", "object": obj}) + "\n").encode()
        yield from self._events(kind, ns, selector, fields, seen, deadline, dropped)

    def _events(
        self, kind: str, ns: str | None, selector: str, fields: str, seen: int, deadline: float, dropped: bool
    ) -> Iterator[bytes]:
        """The events after resourceVersion `seen` until `deadline` (only the first of them when `dropped`)."""
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
                    if dropped:
                        return
