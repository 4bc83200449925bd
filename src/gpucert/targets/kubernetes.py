"""A live cluster through the official `kubernetes` client: GPU nodes, the stack's pods, ClusterPolicy.

The only module that imports the client. Transport errors are translated here, once: 401 becomes a
ClusterAccessError about the credentials (expired or for another cluster), 403 one naming the verb, the resource
and the identity (fix: deploy/rbac.yaml); connection failures, timeouts, 429 (after its Retry-After) and 5xx are
retried with exponential backoff, then become an IncompleteRunError naming the endpoint. Every request, watches
included, has a client-side timeout, so a hung API server is a retried failure, never a hung run.
Lists are paginated (limit/continue) and read as raw JSON, one page at a time, so the objects reach
stack/observe.py exactly as the API serves them and a 5,000-node cluster is read in bounded memory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucert.errors import ClusterAccessError, ConfigError, IncompleteRunError
from gpucert.evidence import FabricEvidence
from gpucert.spec import ClusterSpec, KubernetesTargetSpec
from gpucert.targets.base import EvidenceSink, MeasurePlan

if TYPE_CHECKING:
    from gpucert.targets.kubernetes_nodes import KubernetesNodeControl

__all__ = ["RBAC_HINT", "KubernetesTarget"]

RBAC_HINT = "grant it with deploy/rbac.yaml (kubectl apply -f deploy/rbac.yaml) and run as that service account"
CREDENTIALS_HINT = (
    "the token or client certificate is expired, revoked or for another cluster: refresh the kubeconfig's "
    "credentials (or the pod's service account token) and run again"
)
PAGE_SIZE = 500
MAX_RETRY_AFTER_S = 120.0  # a Retry-After beyond this is capped: the run keeps its own bound


def retry_after_s(exc: Any) -> float | None:
    """The seconds a 429's Retry-After header asks for (seconds form; the HTTP-date form is rare from the API)."""
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


def _message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", "")) or str(body)
    except (TypeError, ValueError):
        return str(body or "")


class KubernetesTarget:
    kind = "kubernetes"

    def __init__(
        self,
        spec: ClusterSpec,
        api_client: Any,
        *,
        identity: str,
        retries: int = 4,
        backoff_s: float = 0.5,
        timeout_s: tuple[float, float] = (5.0, 60.0),
        page_size: int = PAGE_SIZE,
    ) -> None:
        assert isinstance(spec.target, KubernetesTargetSpec)
        self.spec = spec
        self.target = spec.target
        self.api = api_client
        self.identity = identity
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.page_size = page_size
        self.endpoint = str(api_client.configuration.host)
        self.cluster_policy: dict[str, Any] | None = None
        self.hostnames: dict[str, str] = {}  # node -> its kubernetes.io/hostname label, as the nodes are listed

    @classmethod
    def from_spec(cls, spec: ClusterSpec, **kwargs: Any) -> KubernetesTarget:
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        assert isinstance(spec.target, KubernetesTargetSpec)
        context = spec.target.context
        # read $KUBECONFIG now: the client reads it once, when first imported
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        from kubernetes import client

        configuration = client.Configuration()
        # one retry loop, ours (`_call`): urllib3's own would make each of our tries up to four, a hung API server
        # four read timeouts per try, and the "N tries" of our messages untrue
        configuration.retries = False
        try:
            api = config.new_client_from_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            ctx = next((c for c in contexts if c["name"] == context), active)
            identity = f"user {ctx['context'].get('user', '?')} of context {ctx['name']}"
        except (ConfigException, FileNotFoundError, TypeError) as kube_exc:
            if context is not None:
                raise ConfigError(
                    f"cannot load kubeconfig context {context!r}: {kube_exc}; check $KUBECONFIG or target.context",
                    path=spec.path,
                    key="target.context",
                ) from None
            try:
                config.load_incluster_config(client_configuration=configuration)
                api = client.ApiClient(configuration)
                identity = "this pod's service account"
            except ConfigException:
                raise ConfigError(
                    "no kubeconfig ($KUBECONFIG or ~/.kube/config) and not running in a pod; "
                    "point $KUBECONFIG at the cluster or set target.context",
                    path=spec.path,
                    key="target",
                ) from None
        backoff = os.environ.get("GPUCERT_API_BACKOFF_S")
        if backoff is not None:
            kwargs.setdefault("backoff_s", float(backoff))
        read_timeout = os.environ.get("GPUCERT_API_TIMEOUT_S")
        if read_timeout is not None:
            kwargs.setdefault("timeout_s", (5.0, float(read_timeout)))
        return cls(spec, api, identity=identity, **kwargs)

    # ---- transport -------------------------------------------------------------------------------------------

    def _call(self, verb: str, resource: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        last: Exception | None = None
        wait: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(wait if wait is not None else self.backoff_s * 2 ** (attempt - 1))
            wait = None
            try:
                return fn(_request_timeout=self.timeout_s, _preload_content=False, **kwargs)
            except ApiException as exc:
                if exc.status == 401:
                    raise ClusterAccessError(
                        f"cannot {verb} {resource} at {self.endpoint}: the API server rejected the credentials of "
                        f"{self.identity} (401 Unauthorized: {_message(exc.body)}); {CREDENTIALS_HINT}"
                    ) from exc
                if exc.status == 403:
                    raise ClusterAccessError(
                        f"cannot {verb} {resource} at {self.endpoint}: forbidden for {self.identity} "
                        f"({_message(exc.body)}); {RBAC_HINT}"
                    ) from exc
                if exc.status is not None and (exc.status >= 500 or exc.status == 429):
                    last = exc
                    wait = retry_after_s(exc) if exc.status == 429 else None
                    continue
                raise ClusterAccessError(
                    f"cannot {verb} {resource} at {self.endpoint}: HTTP {exc.status} {exc.reason}: {_message(exc.body)}"
                ) from exc
            except (HTTPError, OSError) as exc:
                last = exc
        detail = (
            f"HTTP {last.status} {last.reason}" if isinstance(last, ApiException) else f"{type(last).__name__}: {last}"
        )
        raise IncompleteRunError(
            f"cannot {verb} {resource}: the Kubernetes API at {self.endpoint} did not answer "
            f"after {self.retries + 1} tries ({detail})"
        ) from last

    def _pages(self, verb: str, resource: str, fn: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = dict(kwargs, limit=self.page_size)
            if token:
                page["_continue"] = token
            resp = self._call(verb, resource, fn, **page)
            data = json.loads(resp.data)
            yield from data.get("items") or []
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return

    # ---- Target ----------------------------------------------------------------------------------------------

    def _nodes(self) -> Iterator[dict[str, Any]]:
        from kubernetes import client

        selector = ",".join(f"{k}={v}" for k, v in self.target.node_selector.items())
        core = client.CoreV1Api(self.api)
        for node in self._pages("list", "nodes", core.list_node, label_selector=selector):
            meta = node.get("metadata") or {}
            self.hostnames[meta["name"]] = (meta.get("labels") or {}).get("kubernetes.io/hostname", meta["name"])
            yield node

    def _pods(self) -> Iterator[dict[str, Any]]:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        for ns in sorted({s.namespace for s in self.spec.stack.sources().values() if s.label is None}):
            yield from self._pages("list", f"pods in namespace {ns}", core.list_namespaced_pod, namespace=ns)

    def read_cluster_policy(self) -> dict[str, Any] | None:
        """The GPU Operator's ClusterPolicy status, when the operator is installed."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.CustomObjectsApi(self.api)
        try:
            resp = self._call(
                "list",
                "clusterpolicies.nvidia.com",
                api.list_cluster_custom_object,
                group="nvidia.com",
                version="v1",
                plural="clusterpolicies",
            )
        except ClusterAccessError as exc:
            if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                return None  # no GPU Operator CRD: a stack of other DaemonSets
            raise
        items = json.loads(resp.data).get("items") or []
        if not items:
            return None
        policy = items[0]
        return {"name": policy["metadata"]["name"], "state": (policy.get("status") or {}).get("state")}

    def observe(self) -> tuple[Iterator[Mapping[str, Any]], Iterator[Mapping[str, Any]]]:
        self.cluster_policy = self.read_cluster_policy()
        return self._nodes(), self._pods()

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        from gpucert.targets.kubernetes_jobs import ProbeJobs

        ProbeJobs(self, plan, sink, gpus_per_node=self.spec.expect.gpus_per_node).run(nodes)

    def measure_fabrics(self, groups: list[list[str]], plan: MeasurePlan) -> list[FabricEvidence]:
        from gpucert.targets.kubernetes_fabric import FabricJobs

        jobs = FabricJobs(self, plan, lambda ev: None, gpus_per_node=self.spec.expect.gpus_per_node)
        out: list[FabricEvidence] = []
        batch: list[list[str]] = []
        for group in groups:  # at most maxParallel nodes busy at once, as in the per-node phase
            if batch and sum(map(len, batch)) + len(group) > self.target.max_parallel:
                out += jobs.run_fabrics(batch)
                batch = []
            batch.append(group)
        return out + (jobs.run_fabrics(batch) if batch else [])

    def node_control(self, reports: Path) -> KubernetesNodeControl:
        from gpucert.targets.kubernetes_nodes import KubernetesNodeControl

        return KubernetesNodeControl(self)

    def cleanup(self) -> int:
        """Delete what earlier gpucert runs left in the run namespace; returns how many objects went."""
        from gpucert.targets.kubernetes_jobs import cleanup_runs

        return cleanup_runs(self, self.target.namespace)
