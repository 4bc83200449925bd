"""Recertification's hold on a live node: a Lease per node, cordon, wait for (or evict) GPU pods, label and annotate.

The Lease (coordination.k8s.io/v1, in the run namespace) is what makes a second recertification of the same node
refuse: it is created, or taken over only once its holder stopped renewing it, and renewed while the run lasts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from gpucert.errors import ClusterAccessError, IncompleteRunError, NodeBusyError
from gpucert.measure.targets.base import NodeState
from gpucert.measure.targets.kubernetes.api import Cluster

__all__ = ["LEASE_SECONDS", "KubernetesNodeControl", "gpu_pods", "holds_gpus"]

LEASE_SECONDS = 60
GPU_RESOURCE = "nvidia.com/gpu"


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> datetime:
    """A MicroTime or RFC 3339 time as another client may have written it (with or without fractions)."""
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _status(exc: ClusterAccessError) -> int | None:
    return getattr(exc.__cause__, "status", None)


def holds_gpus(pod: dict[str, Any], *, run_label: str | None = None) -> bool:
    """Whether the pod holds GPUs and has not finished: gpucert's own probe pods aside, or with `run_label` only
    that run's (another gpucert run's probe pod does hold the GPUs)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    labels = meta.get("labels") or {}
    if labels.get("gpucert.io/run" if run_label else "app.kubernetes.io/managed-by") == (run_label or "gpucert"):
        return False
    return any(
        GPU_RESOURCE in ((c.get("resources") or {}).get(kind) or {})
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for kind in ("limits", "requests")
    )


def gpu_pods(pods: list[dict[str, Any]], *, run_label: str | None = None) -> list[str]:
    """`namespace/name` of the pods that hold GPUs (holds_gpus)."""
    return [
        f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in pods if holds_gpus(p, run_label=run_label)
    ]


class KubernetesNodeControl:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ns = cluster.options.namespace
        self.core = cluster.kube.core
        self.coord = cluster.kube.coordination
        # renewed every third of its duration; GPUCERT_LEASE_SECONDS shortens it (tests)
        self.lease_seconds = int(os.environ.get("GPUCERT_LEASE_SECONDS", LEASE_SECONDS))

    # ---- the lease -------------------------------------------------------------------------------------------------

    @staticmethod
    def lease_name(node: str) -> str:
        return f"gpucert-recertify-{hashlib.sha256(node.encode()).hexdigest()[:12]}"

    def _lease_body(self, node: str, holder: str, acquired: datetime, rv: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.lease_name(node),
            "namespace": self.ns,
            "labels": {"app.kubernetes.io/managed-by": "gpucert"},
            "annotations": {"gpucert.io/node": node},
        }
        if rv is not None:
            meta["resourceVersion"] = rv
        now = datetime.now(UTC)
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": _micro(acquired),
                "renewTime": _micro(now),
            },
        }

    def _busy(self, node: str, lease: dict[str, Any]) -> NodeBusyError:
        spec = lease.get("spec") or {}
        renewed = _parse(spec["renewTime"])
        expires = renewed + timedelta(seconds=spec.get("leaseDurationSeconds") or LEASE_SECONDS)
        return NodeBusyError(
            f"{node} is already being recertified by {spec.get('holderIdentity')} (Lease "
            f"{self.ns}/{lease['metadata']['name']}, acquired {spec.get('acquireTime')}, renewed {spec['renewTime']}); "
            f"nothing was changed. Wait for that run to finish; if it was killed, its lease lapses at "
            f"{expires.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        )

    def _read_lease(self, name: str) -> dict[str, Any] | None:
        """The Lease as the API has it now, or None when there is none."""
        try:
            resp = self.cluster.kube.call(
                "get", f"lease {name}", self.coord.read_namespaced_lease, name=name, namespace=self.ns
            )
        except ClusterAccessError as exc:
            if _status(exc) == 404:
                return None
            raise
        lease: dict[str, Any] = json.loads(resp.data)
        return lease

    def _acquire(self, node: str, holder: str, reclaim: bool = False) -> None:
        name = self.lease_name(node)
        acquired = datetime.now(UTC)
        try:
            self.cluster.kube.call(
                "create",
                f"leases in namespace {self.ns}",
                self.coord.create_namespaced_lease,
                namespace=self.ns,
                body=self._lease_body(node, holder, acquired),
            )
            return
        except ClusterAccessError as exc:
            if _status(exc) != 409:
                raise
        lease = self._read_lease(name)
        if lease is None:  # released between our create and our read: create it again
            return self._acquire(node, holder, reclaim)
        spec = lease.get("spec") or {}
        renew = spec.get("renewTime")
        alive = renew and _parse(renew) + timedelta(seconds=spec.get("leaseDurationSeconds") or 0) > acquired
        if spec.get("holderIdentity") and alive and not (reclaim and spec["holderIdentity"] == holder):
            raise self._busy(node, lease)
        try:  # a lapsed lease: take it over, unless someone else does first (the resourceVersion decides)
            self.cluster.kube.call(
                "update",
                f"lease {name}",
                self.coord.replace_namespaced_lease,
                name=name,
                namespace=self.ns,
                body=self._lease_body(node, holder, acquired, lease["metadata"]["resourceVersion"]),
            )
        except ClusterAccessError as exc:
            if _status(exc) == 409:
                raise self._busy(node, self._read_lease(name) or lease) from None
            raise

    @contextlib.contextmanager
    def lock(self, node: str, holder: str, *, reclaim: bool = False) -> Iterator[None]:
        """Hold the node's Lease as `holder` while the block runs; refused (NodeBusyError) while another holder's
        lease lives. `reclaim`: a live lease of the same holder is taken over too (a resumed soak's, whose run
        lock already made it the run's one controller: the lease is its own killed controller's)."""
        self._acquire(node, holder, reclaim)
        name = self.lease_name(node)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.lease_seconds / 3):
                with contextlib.suppress(ClusterAccessError, IncompleteRunError):
                    self.cluster.kube.call(
                        "patch",
                        f"lease {name}",
                        self.coord.patch_namespaced_lease,
                        name=name,
                        namespace=self.ns,
                        body={"spec": {"renewTime": _micro(datetime.now(UTC))}},
                    )

        renewer = threading.Thread(target=renew, name=f"lease-{node}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join(5)
            with contextlib.suppress(ClusterAccessError, IncompleteRunError):
                if self.holder(node) == holder:  # a lease taken over by another run is theirs to release
                    self.cluster.kube.call(
                        "delete", f"lease {name}", self.coord.delete_namespaced_lease, name=name, namespace=self.ns
                    )

    def holder(self, node: str) -> str | None:
        lease = self._read_lease(self.lease_name(node))
        holder: str | None = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return holder

    # ---- the node --------------------------------------------------------------------------------------------------

    def nodes(self) -> list[NodeState]:
        selector = ",".join(f"{k}={v}" for k, v in self.cluster.options.node_selector.items())
        out = []
        for node in self.cluster.kube.pages("list", "nodes", self.core.list_node, label_selector=selector):
            meta = node.get("metadata") or {}
            out.append(
                NodeState(
                    name=meta["name"],
                    unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
                    labels=dict(meta.get("labels") or {}),
                    annotations=dict(meta.get("annotations") or {}),
                )
            )
        return out

    def gpu_pods(self, node: str) -> list[str]:
        return gpu_pods(self._pods_on(node)[0])

    def cordon(self, node: str) -> bool:
        resp = self.cluster.kube.call("get", f"node {node}", self.core.read_node, name=node)
        was = bool((json.loads(resp.data).get("spec") or {}).get("unschedulable"))
        if not was:
            self.cluster.kube.call(
                "patch", f"node {node}", self.core.patch_node, name=node, body={"spec": {"unschedulable": True}}
            )
        return was

    def _pods_on(self, node: str) -> tuple[list[dict[str, Any]], str]:
        resp = self.cluster.kube.call(
            "list",
            f"pods on node {node}",
            self.core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
        )
        data = json.loads(resp.data)
        return data.get("items") or [], str((data.get("metadata") or {}).get("resourceVersion", ""))

    def wait_idle(self, node: str, *, drain: bool, timeout_s: float) -> list[str]:
        from kubernetes import watch

        pods, _ = self._pods_on(node)
        busy = gpu_pods(pods)
        waited = list(busy)
        if drain:
            for ref in busy:
                ns, name = ref.split("/", 1)
                body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
                try:
                    self.cluster.kube.call(
                        "create",
                        f"the eviction of pod {ref}",
                        self.core.create_namespaced_pod_eviction,
                        name=name,
                        namespace=ns,
                        body=body,
                    )
                except ClusterAccessError as exc:
                    if _status(exc) == 404:
                        continue  # already gone
                    if _status(exc) == 429:  # a PodDisruptionBudget says not now: wait for it like any other pod
                        continue
                    raise
        deadline = time.monotonic() + timeout_s
        while True:
            pods, rv = self._pods_on(node)
            busy = gpu_pods(pods)
            if not busy:
                return waited
            left = deadline - time.monotonic()
            if left <= 0:
                raise IncompleteRunError(
                    f"{len(busy)} GPU pod(s) still run on {node} after {timeout_s:.0f} s: {', '.join(busy)}"
                )
            w = watch.Watch()
            slice_s = max(1, min(int(left), 5))
            with contextlib.suppress(Exception):  # any event, or the slice ending, means: look again
                for _ in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=f"spec.nodeName={node}",
                    resource_version=rv,
                    timeout_seconds=slice_s,
                    _request_timeout=self.cluster.kube.watch_timeout(slice_s),
                ):
                    w.stop()

    def mark(self, node: str, *, labels: dict[str, str], annotations: dict[str, str], uncordon: bool) -> None:
        body: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}}
        if uncordon:
            body["spec"] = {"unschedulable": False}
        self.cluster.kube.call("patch", f"node {node}", self.core.patch_node, name=node, body=body)
