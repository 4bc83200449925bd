"""Following a run's pods: a list of them as they are now, then watch slices from the list's resourceVersion, and a
fresh list whenever a watch fails or its resourceVersion expired. Transport failures are retried with the client's
backoff; past its retries the run is incomplete."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpucert.errors import IncompleteRunError
from gpucert.measure.targets.kubernetes.api import Cluster

__all__ = ["WATCH_SLICE_S", "PodHandler", "PodWatch"]

WATCH_SLICE_S = 5

PodHandler = Callable[[dict[str, Any], bool], bool]  # (pod, deleted) -> stop watching now


@dataclass(frozen=True)
class PodWatch:
    """The pods of one namespace that `selector` (a label selector) picks."""

    cluster: Cluster
    ns: str
    selector: str

    def read(self, handler: PodHandler) -> str:
        """Read the run's pods as they are now; returns the list's resourceVersion to watch from.

        Watch events come in resourceVersion order, so a watch stopped half-way resumes from the last event it
        handled; the objects of a list do not, which is why (re)starting is a list followed by a watch.
        """
        resp = self.cluster.kube.call(
            "list",
            f"pods in namespace {self.ns}",
            self.cluster.kube.core.list_namespaced_pod,
            namespace=self.ns,
            label_selector=self.selector,
        )
        data = json.loads(resp.data)
        for pod in data.get("items") or []:
            handler(pod, False)
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_slice(self, resource_version: str | None, seconds: int, handler: PodHandler) -> str | None:
        """Handle the run's pod events for up to `seconds`; returns the resourceVersion to resume from."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        if not resource_version:
            resource_version = self.read(handler)
        w = watch.Watch()
        connect, read = self.cluster.kube.timeout_s
        kwargs: dict[str, Any] = {
            "namespace": self.ns,
            "label_selector": self.selector,
            "timeout_seconds": seconds,
            "resource_version": resource_version,
            "_request_timeout": (connect, seconds + read),  # a hung API server ends the slice, not the run
        }
        try:
            for event in w.stream(self.cluster.kube.core.list_namespaced_pod, **kwargs):
                raw = event.get("raw_object") or {}
                if event.get("type") == "ERROR":
                    return None  # 410 Gone and friends: resume from a fresh list
                resource_version = (raw.get("metadata") or {}).get("resourceVersion", resource_version)
                if handler(raw, event.get("type") == "DELETED"):
                    w.stop()  # something finished: go and act on it
        except ApiException as exc:
            if exc.status == 410:  # the resourceVersion expired: list again
                return None
            raise
        return resource_version

    def follow(self, handler: PodHandler, step: Callable[[], bool]) -> None:
        """Watch the run's pods with `handler` while `step()` (called between watch slices) says there is more."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        rv: str | None = None
        failures = 0
        while True:
            try:
                if not rv:  # first, and after a failed or expired watch: the pods as they are now, before `step`
                    rv = self.read(handler)  # judges anything (a Pending timeout) on what it knew before
                if not step():
                    return
                rv = self.watch_slice(rv, WATCH_SLICE_S, handler)
                failures = 0
            except (ApiException, HTTPError, OSError, IncompleteRunError) as exc:
                failures += 1
                if failures > self.cluster.kube.retries:
                    raise IncompleteRunError(
                        f"watching the probe pods at {self.cluster.kube.endpoint} failed {failures} times: {exc}"
                    ) from exc
                time.sleep(self.cluster.kube.backoff(failures))
                rv = None
