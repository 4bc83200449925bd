"""What every gpucert run's objects share: the labels that find them, names, and the sweep that deletes them; and
the evidence of a node nothing could be measured on. kubernetes_jobs.py and kubernetes_fabric.py use them.

A sweep is done when the run's pods are gone, not when their deletes were answered. On a cluster a Job deleted with
propagationPolicy Background is removed at once and its pods are left to the garbage collector, which deletes them
afterwards from its queue (kubernetes pkg/controller/garbagecollector/garbagecollector.go, attemptToDeleteItem: an
object with no owner left is deleted, Background by default); a running pod's delete is graceful, so it stays,
Terminating, until its kubelet has stopped it, up to its terminationGracePeriodSeconds (30 s unless set:
pkg/registry/core/pod/strategy.go, CheckGracefulDelete; staging/src/k8s.io/apiserver/pkg/registry/generic/registry/
store.go, Store.Delete keeps an object whose grace period is not spent). A list right after the deletes still shows
them, and they still hold their GPUs: the sweep waits for them (bounded by GONE_TIMEOUT_S)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_EXCEPTION, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from typing import Any, TypeVar

from gpucert._version import __version__
from gpucert.errors import ClusterAccessError
from gpucert.measure.evidence import NodeEvidence, ProbeError
from gpucert.measure.targets.kubernetes.api import KubeApi, status_of

__all__ = [
    "GONE_TIMEOUT_S",
    "HOSTNAME",
    "IN_FLIGHT",
    "LABEL_ATTEMPT",
    "LABEL_MANAGED",
    "LABEL_NODE",
    "LABEL_RUN",
    "at_once",
    "await_pods_gone",
    "cleanup_runs",
    "failed_evidence",
    "now",
    "run_label",
    "short",
]

LABEL_RUN = "gpucert.io/run"
# which of the run's passes over its nodes (a certify stage, a soak round) a pod is of: a pass's watch sees its own
# pods only, never a pod of an earlier pass of the same run (its Jobs had the same names) that is still going
LABEL_ATTEMPT = "gpucert.io/attempt"
LABEL_NODE = "gpucert.io/node"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
HOSTNAME = "kubernetes.io/hostname"
IN_FLIGHT = 16  # API requests of one round (creates, deletes) in flight at once
# how long a sweep waits for its deleted pods to go: a pod's default grace period (30 s) twice over, and the
# garbage collector's lag on a busy cluster. A pod past it (its node down, its kubelet gone) is left to the cluster
GONE_TIMEOUT_S = 90.0

T = TypeVar("T")
R = TypeVar("R")


def at_once(fn: Callable[[T], R], items: Sequence[T], *, stop_on_error: bool, bound: int | None = None) -> list[R]:
    """`fn` over `items`, at most `bound` (IN_FLIGHT) calls in flight, each still through KubeApi.call (its retry
    budget is locked, its backoff per call). Every call that started has ended before this returns or raises, so a
    cleanup after it finds all it made; with `stop_on_error` the first error (or Ctrl-C) starts no more. The first
    error is raised once all have ended; else the results, in the order of `items`."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(max_workers=min(bound or IN_FLIGHT, len(items)), thread_name_prefix="gpucert-api")
    try:
        futures = [pool.submit(fn, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION if stop_on_error else ALL_COMPLETED)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()  # type: ignore[misc]
    return [f.result() for f in futures]


def run_label(run_id: str) -> str:
    """A label value for the run (labels are 63 characters at most; the full run id goes in an annotation)."""
    return "r" + hashlib.sha256(run_id.encode()).hexdigest()[:15]


def short(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def failed_evidence(node: str, message: str) -> NodeEvidence:
    """The evidence of a node nothing was measured on, and why."""
    t = now()
    errors = [ProbeError(probe="*", message=message)]
    return NodeEvidence(
        node=node, target="kubernetes", probe_version=__version__, started=t, finished=t, collected=False, errors=errors
    )


def cleanup_runs(kube: KubeApi, namespace: str, label: str | None = None) -> int:
    """Delete the Jobs, Pods, Services and ConfigMaps of one run (or, without `label`, of every gpucert run)."""
    core, batch = kube.core, kube.batch
    selector = f"{LABEL_RUN}={label}" if label else f"{LABEL_MANAGED}=gpucert"
    deleted = 0
    kinds: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
        ("jobs", batch.list_namespaced_job, batch.delete_namespaced_job),
        ("pods", core.list_namespaced_pod, core.delete_namespaced_pod),
        ("services", core.list_namespaced_service, core.delete_namespaced_service),
        ("configmaps", core.list_namespaced_config_map, core.delete_namespaced_config_map),
    ]
    for kind, lister, deleter in kinds:  # a kind's deletes at once, all of them even where one fails
        names = [
            obj["metadata"]["name"]
            for obj in kube.pages(
                "list", f"{kind} in namespace {namespace}", lister, namespace=namespace, label_selector=selector
            )
        ]

        def delete(name: str, kind: str = kind, deleter: Callable[..., Any] = deleter) -> bool:
            try:
                kube.call(
                    "delete", f"{kind} {name}", deleter, name=name, namespace=namespace, propagation_policy="Background"
                )
            except ClusterAccessError as exc:
                if status_of(exc) != 404:
                    raise
                return False
            return True

        deleted += sum(at_once(delete, names, stop_on_error=False))
    await_pods_gone(kube, namespace, selector)
    return deleted


def await_pods_gone(kube: KubeApi, namespace: str, selector: str, timeout_s: float = GONE_TIMEOUT_S) -> list[str]:
    """Wait until no pod `selector` picks is left (deleted ones go after their grace period, or once the garbage
    collector comes to them), listing them at growing intervals, at most `timeout_s`; the names still there then."""
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while True:
        left = [
            pod["metadata"]["name"]
            for pod in kube.pages(
                "list",
                f"pods in namespace {namespace}",
                kube.core.list_namespaced_pod,
                namespace=namespace,
                label_selector=selector,
            )
        ]
        wait = deadline - time.monotonic()
        if not left or wait <= 0:
            return left
        time.sleep(min(pause, wait))
        pause = min(2 * pause, 2.0)
