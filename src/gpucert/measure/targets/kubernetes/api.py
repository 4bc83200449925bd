"""The Kubernetes API as gpucert talks to it: calls, paging, retries, error translation and watch timeouts, in
one place, for the target, the probe and fabric Jobs and node control alike.

Transport errors are translated here, once: 401 becomes a ClusterAccessError about the credentials (expired or for
another cluster), 403 one naming the verb, the resource and the identity (fix: deploy/rbac.yaml); connection
failures, timeouts, 429 (after its Retry-After) and 5xx are retried with exponential backoff and jitter, then
become an IncompleteRunError naming the endpoint. Retries draw on one budget for the whole run (RetryBudget), so an
API server in trouble sees a few retries in all, not a few for each of thousands of requests. Every request,
watches included, has a client-side timeout, so a hung API server is a retried failure, never a hung run. Lists are
paginated (limit/continue) and read as raw JSON, one page at a time, so objects reach the rest of gpucert exactly
as the API serves them, in bounded memory. With
targets/kubernetes*.py, the only rooms that import the `kubernetes` client.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gpucert.errors import AdmissionError, ClusterAccessError, ConfigError, IncompleteRunError
from gpucert.spec.cluster import GpuSharing, KubernetesTargetSpec

__all__ = [
    "CREDENTIALS_HINT",
    "PAGE_SIZE",
    "RBAC_HINT",
    "Cluster",
    "KubeApi",
    "RetryBudget",
    "retry_after_s",
    "status_of",
]

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


def status_of(exc: ClusterAccessError) -> int | None:
    """The HTTP status behind a ClusterAccessError (404 for an object that is gone), or None."""
    return getattr(exc.__cause__, "status", None)


def _message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", "")) or str(body)
    except (TypeError, ValueError):
        return str(body or "")


def _rbac_denial(body: Any) -> bool:
    """Whether a 403 is the authorizer's (RBAC) rather than admission's. Both are apierrors.NewForbidden, `RESOURCE
    ["NAME"] is forbidden: WHY`; the authorizer's WHY says who cannot do what (`User "u" cannot create resource
    "pods" ...`: k8s.io/apiserver endpoints/handlers/responsewriters/errors.go, forbiddenMessage), admission's
    names the object it refuses and why (Pod Security: `violates PodSecurity ...`; the RuntimeClass plugin: `pod
    rejected: RuntimeClass "x" not found`; a webhook: `admission webhook "w" denied the request: ...`)."""
    m = re.search(r'"[^"]*" is forbidden: (.*)', _message(body))
    return m is None or m.group(1).startswith("User ")


class RetryBudget:
    """The retries one run may make, shared by all its requests (gRPC's retry throttling, gRFC A6): a failed try
    costs a token, a success earns back `ratio` of one, and a retry is made only while more than half the tokens are
    left. A healthy API server never runs it down; one that fails everything gets about `tokens / 2` retries from the
    whole run, then each request fails at its first try."""

    def __init__(self, tokens: float = 20.0, ratio: float = 0.1) -> None:
        self.capacity = tokens
        self.tokens = tokens
        self.ratio = ratio
        self.spent = 0  # retries made
        self.refused = 0  # retries refused
        self._lock = threading.Lock()  # the pod watch's thread draws on it too

    def take(self) -> bool:
        """Whether a retry may be made now (it is then paid for)."""
        with self._lock:
            self.tokens = max(0.0, self.tokens - 1)
            allowed = self.tokens > self.capacity / 2
            self.spent += allowed
            self.refused += not allowed
            return allowed

    def earn(self) -> None:
        with self._lock:
            self.tokens = min(self.capacity, self.tokens + self.ratio)


def _group(name: str) -> cached_property[Any]:
    """A KubeApi attribute: the client's API group `kubernetes.client.<name>` on its connection, made when first
    used (the `kubernetes` package is imported only by a run that talks to a cluster)."""

    def group(api: KubeApi) -> Any:
        from kubernetes import client

        return getattr(client, name)(api.client)

    return cached_property(group)


CONNECTIONS = 32  # the API connections kept open: more than the requests a run has in flight at once


class KubeApi:
    """One API server, with the identity gpucert talks to it as."""

    def __init__(
        self,
        api_client: Any,
        *,
        identity: str,
        retries: int = 4,
        backoff_s: float = 0.5,
        timeout_s: tuple[float, float] = (5.0, 60.0),
        page_size: int = PAGE_SIZE,
        budget: RetryBudget | None = None,
    ) -> None:
        self.client = api_client
        self.identity = identity
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.page_size = page_size
        self.budget = budget or RetryBudget()
        self.endpoint = str(api_client.configuration.host)

    @classmethod
    def connect(cls, context: str | None, spec_path: Path | None, **kwargs: Any) -> KubeApi:
        """The API of the kubeconfig's `context` ($KUBECONFIG or ~/.kube/config), else of this pod's service
        account; ConfigError (exit 2) when neither is there."""
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        # read $KUBECONFIG now: the client reads it once, when first imported
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        configuration = client.Configuration()
        # one retry loop, ours (`call`): urllib3's own would make each of our tries up to four, a hung API server
        # four read timeouts per try, and the "N tries" of our messages untrue
        configuration.retries = False
        # a connection for every request in flight at once (a fabric round's creates and deletes, runs.IN_FLIGHT,
        # beside the run's watch and log reads): the client's default is 5 a CPU (kubernetes 37.0.2,
        # client/configuration.py), 10 on a 2-core controller, and urllib3 2.x discards each connection past it
        # with a "Connection pool is full" warning (connectionpool.py, _put_conn)
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, CONNECTIONS)
        try:
            with _kubeconfig_read(kubeconfig):
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
                    path=spec_path,
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
                    path=spec_path,
                    key="target",
                ) from None
        backoff = os.environ.get("GPUCERT_API_BACKOFF_S")
        if backoff is not None:
            kwargs.setdefault("backoff_s", float(backoff))
        read_timeout = os.environ.get("GPUCERT_API_TIMEOUT_S")
        if read_timeout is not None:
            kwargs.setdefault("timeout_s", (5.0, float(read_timeout)))
        return cls(api, identity=identity, **kwargs)

    # ---- the client's API groups -------------------------------------------------------------------------------

    core = _group("CoreV1Api")
    batch = _group("BatchV1Api")
    coordination = _group("CoordinationV1Api")
    authorization = _group("AuthorizationV1Api")
    node = _group("NodeV1Api")
    custom = _group("CustomObjectsApi")
    extensions = _group("ApiextensionsV1Api")

    # ---- requests ------------------------------------------------------------------------------------------------

    def call(self, verb: str, resource: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """`fn(**kwargs)` with the retries, timeouts and error translation above; the raw response."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        last: Exception | None = None
        wait: float | None = None
        tries = 0
        for attempt in range(self.retries + 1):
            if attempt:
                if not self.budget.take():
                    break
                time.sleep(wait if wait is not None else self.backoff(attempt))
            wait = None
            tries += 1
            try:
                resp = fn(_request_timeout=self.timeout_s, _preload_content=False, **kwargs)
                self.budget.earn()
                return resp
            except ApiException as exc:
                if exc.status == 401:
                    raise ClusterAccessError(
                        f"cannot {verb} {resource} at {self.endpoint}: the API server rejected the credentials of "
                        f"{self.identity} (401 Unauthorized: {_message(exc.body)}); {CREDENTIALS_HINT}"
                    ) from exc
                if exc.status == 403 and not _rbac_denial(exc.body):
                    said = _message(exc.body)  # admission: Pod Security, a policy webhook, a quota
                    raise AdmissionError(f"cannot {verb} {resource} at {self.endpoint}: {said}", said) from exc
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
        spent = "" if tries > self.retries else ", and the run's retry budget is spent: it stops rather than add load"
        raise IncompleteRunError(
            f"cannot {verb} {resource}: the Kubernetes API at {self.endpoint} did not answer "
            f"after {tries} tries ({detail}){spent}"
        ) from last

    def json(self, verb: str, resource: str, fn: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
        """The object (or list) an API call answers, as the API serves it in JSON."""
        data: dict[str, Any] = json.loads(self.call(verb, resource, fn, **kwargs).data)
        return data

    def pages(self, verb: str, resource: str, fn: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item of a list, a page (limit/continue) at a time."""
        token: str | None = None
        while True:
            page = dict(kwargs, limit=self.page_size)
            if token:
                page["_continue"] = token
            data = self.json(verb, resource, fn, **page)
            yield from data.get("items") or []
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry `attempt` (1, 2, ...): exponential from `backoff_s`, the upper half of it
        at random, so that clients failed together do not retry together ("equal jitter")."""
        ceiling = float(self.backoff_s * 2 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def watch_timeout(self, seconds: float) -> tuple[float, float]:
        """The client-side timeout of a watch of `seconds`: a hung API server ends the slice, not the run."""
        connect, read = self.timeout_s
        return (connect, seconds + read)


@contextmanager
def _kubeconfig_read(kubeconfig: str) -> Iterator[None]:
    """A kubeconfig that is not YAML, or not UTF-8 text, as one line naming it (ConfigError, exit 2), not a
    traceback. The client (kubernetes 37.0.2, config/kube_config.py, KubeConfigMerger.load_config) opens each
    $KUBECONFIG file as text and hands it to yaml.safe_load, and lets yaml.YAMLError and UnicodeDecodeError out;
    it catches neither, and neither is its ConfigException. Not a reason to try this pod's service account: the
    file that was named is broken."""
    import yaml

    try:
        yield
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        why = f"it is not YAML ({getattr(exc, 'problem', None) or type(exc).__name__}{where})"
        raise _broken_kubeconfig(kubeconfig, why) from None
    except UnicodeDecodeError as exc:
        raise _broken_kubeconfig(kubeconfig, f"it is not UTF-8 text (byte {exc.start} is not)") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise _broken_kubeconfig(kubeconfig, f"it cannot be read ({exc.strerror})") from None


def _broken_kubeconfig(kubeconfig: str, why: str) -> ConfigError:
    return ConfigError(
        f"the kubeconfig cannot be used: {why}; fix the file, or point $KUBECONFIG at the cluster's kubeconfig",
        path=Path(kubeconfig),
        key="KUBECONFIG",
    )


@dataclass
class Cluster:
    """What the probe Jobs, the fabric Jobs and node control need of a cluster: its API, the spec's target options,
    the spec file (for error messages), each node's kubernetes.io/hostname and labels as the nodes were listed,
    and the tolerations of the spec (the target's and its pools' taints)."""

    kube: KubeApi
    options: KubernetesTargetSpec
    spec_path: Path | None = None
    hostnames: dict[str, str] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # each node's labels, as listed
    tolerations: list[dict[str, str]] = field(default_factory=list)  # of every gpucert pod (the cordon's added)
    sharing: dict[str, GpuSharing] = field(default_factory=dict)  # what each node's pool expects of its GPUs
    gang_installed: bool | None = None  # whether JobSet and Kueue are installed, once gang.py asked (once a run)
