"""A fake Kubernetes API server (pytest-httpserver) that the real `kubernetes` client talks to.

pytest-httpserver over kmock: the tests need a plain HTTP server that serves recorded-shape JSON, paginates,
filters by label selector and injects failures (403, 500, dropped connections) per request; a handler function
on pytest-httpserver does all of that in a few lines and adds no framework of its own.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from werkzeug import Request, Response

from .fakecluster import FakeCluster, _selected
from .gpu_operator import NS, node

PATHS = {
    "nodes": re.compile(r"^/api/v1/nodes$"),
    "pods": re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$"),
    "clusterpolicies": re.compile(r"^/apis/nvidia\.com/v1/clusterpolicies$"),
}


class FakeKubeApi:
    """Serves nodes, pods and ClusterPolicies with limit/continue paging, and fails on request."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.cluster_policies: list[dict[str, Any]] | None = []
        self.failures: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self.requests: list[tuple[str, dict[str, str]]] = []

    def fail(self, resource: str, status: int, times: int = 1, message: str = "") -> None:
        self.failures[resource] += [(status, message)] * times

    def handle(self, request: Request) -> Response:
        args = {k: v for k, v in request.args.items()}
        self.requests.append((request.path, args))
        found = next(((r, p.match(request.path)) for r, p in PATHS.items() if p.match(request.path)), None)
        if found is None:
            return self._status(404, f"the server could not find the requested resource ({request.path})")
        resource, m = found
        assert m is not None
        if self.failures[resource]:
            status, message = self.failures[resource].pop(0)
            return self._status(status, message or f"injected {status}")
        if resource == "nodes":
            items = [n for n in self.nodes if _selected(n, args.get("labelSelector", ""))]
            kind = "NodeList"
        elif resource == "pods":
            items = [p for p in self.pods if p["metadata"]["namespace"] == m.group("ns")]
            kind = "PodList"
        else:
            if self.cluster_policies is None:
                return self._status(404, "the server could not find the requested resource")
            items, kind = self.cluster_policies, "ClusterPolicyList"
        start = int(args.get("continue") or 0)
        limit = int(args.get("limit") or 0) or len(items)
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": "90210"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(items) - start - limit
        return Response(
            json.dumps({"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page}),
            content_type="application/json",
        )

    @staticmethod
    def _status(code: int, message: str) -> Response:
        reason = {403: "Forbidden", 401: "Unauthorized", 404: "NotFound", 500: "InternalError"}.get(code, "Error")
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        return Response(json.dumps(body), status=code, content_type="application/json")


def point_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: str, context: str = "fake") -> None:
    """$KUBECONFIG: one context `context` whose cluster is `endpoint`, a bearer token, short API backoffs."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": context,
        "clusters": [{"name": context, "cluster": {"server": endpoint}}],
        "users": [{"name": "gpucert-ci", "user": {"token": "fake-token"}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": "gpucert-ci"}}],
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.setenv("GPUCERT_API_BACKOFF_S", "0.01")


@pytest.fixture
def fake_api(httpserver: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKubeApi:
    api = FakeKubeApi()
    httpserver.expect_request(re.compile(".*")).respond_with_handler(api.handle)
    point_kubeconfig(tmp_path, monkeypatch, httpserver.url_for("").rstrip("/"))
    return api


def cluster_policy(state: str = "ready") -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"operator": {"defaultRuntime": "containerd"}},
        "status": {"namespace": NS, "state": state},
    }


def _quick_stop() -> type[Any]:
    from pytest_httpserver import HTTPServer

    class QuickStop(HTTPServer):
        """pytest-httpserver's server, stopped in a twentieth of a second rather than half of one: its thread runs
        werkzeug's serve_forever at socketserver's default poll_interval of 0.5 s, and stop() waits for that loop
        to look ("about 0.5 seconds in worst case", pytest_httpserver 1.2.1 httpserver.py, HTTPServer.stop). Every
        test on the served cluster paid it at teardown."""

        def thread_target(self) -> None:
            assert self.server is not None
            self.server.serve_forever(poll_interval=0.05)

    return QuickStop


@pytest.fixture
def served_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """A FakeCluster with only the run namespace (labelled as deploy/rbac.yaml labels it) behind a threaded HTTP
    server, with $KUBECONFIG pointing at it (context `fake`)."""
    fake = FakeCluster()
    labels = {"kubernetes.io/metadata.name": "gpucert", "pod-security.kubernetes.io/enforce": "restricted"}
    fake.put("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpucert", "labels": labels}})
    server = _quick_stop()(threaded=True)
    server.expect_request(re.compile(".*")).respond_with_handler(fake.handle)  # every path, every method
    server.start()
    point_kubeconfig(tmp_path, monkeypatch, server.url_for("").rstrip("/"))
    yield fake
    server.clear()
    if server.is_running():
        server.stop()


@pytest.fixture
def cluster(served_cluster: FakeCluster) -> FakeCluster:
    """The served fake cluster with sixteen GPU nodes, gpu-01 .. gpu-16 (eight H100s each)."""
    for i in range(1, 17):
        served_cluster.put("nodes", node(f"gpu-{i:02d}"))
    return served_cluster
