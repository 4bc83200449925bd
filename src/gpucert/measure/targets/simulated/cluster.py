"""The simulated cluster's objects: Nodes (GFD labels, allocatable GPUs, readiness) and the GPU Operator's pods
(images, start and Ready times), shaped as the Kubernetes API serves them, with the fleet's faults in them."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from graphlib import CycleError, TopologicalSorter
from typing import Any

from gpucert.measure.targets.simulated.world import T0, World, cuda_of, iso

__all__ = ["IMAGES", "SimulatedCluster"]

IMAGES = {
    "driver": "nvcr.io/nvidia/driver:{v}-ubuntu22.04",
    "container-toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v{v}-ubuntu20.04",
    "device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v{v}",
    "gpu-feature-discovery": "nvcr.io/nvidia/k8s-device-plugin:v{v}",
    "dcgm": "nvcr.io/nvidia/cloud-native/dcgm:{v}-1-ubuntu22.04",
    "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:{v}-ubuntu22.04",
}


# the times a cluster's objects carry are T0's and its pods', a minute's worth of start times in all (a node's pods
# start at its number's second past T0): each spelled once, not five times a node
_iso = lru_cache(maxsize=1024)(iso)


@lru_cache(maxsize=256)
def _uid(name: str) -> str:
    """The uid the API server gives the object `name` (a DaemonSet: the same for every pod it owns)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


class SimulatedCluster(World):
    """What a live API server would list for the fleet."""

    def _rdma_resource(self, node: str) -> dict[str, str]:
        """The RDMA device plugin's resource a node with a fabric offers (the shared device plugin's 63 slots)."""
        fabric = self.fleet.fabric_of(node)
        return {fabric.resource: "63"} if fabric is not None and fabric.resource else {}

    def _node_object(self, node: str) -> dict[str, Any]:
        nf = self.faults[node]
        count = len(self._present(node))
        driver = self._version(node, "driver")
        labels = {
            **self.labels(node),
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.memory": str(self.baseline_of(node).memory_mib),
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.runtime-version.full": cuda_of(driver) or "",
        }
        for name, source in self.spec.stack.sources().items():
            if source.label is not None:
                labels[source.label] = self._version(node, name)
        healthy = count - len(nf.unhealthy - nf.missing)
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastTransitionTime": _iso(T0),
        }
        if nf.unreachable:
            ready = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": _iso(T0),
            }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": labels, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, node))},
            "status": {
                "capacity": {"cpu": "224", "memory": "2113435500Ki", "nvidia.com/gpu": str(count)},
                "allocatable": {
                    "cpu": "223",
                    "memory": "2102949740Ki",
                    "nvidia.com/gpu": str(healthy),
                    **self._rdma_resource(node),
                },
                "conditions": [ready],
                "nodeInfo": {
                    "kubeletVersion": self._version(node, "kubelet"),
                    "containerRuntimeVersion": self._version(node, "containerRuntime"),
                    "kernelVersion": self._version(node, "kernel"),
                    "osImage": self._version(node, "osImage"),
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                },
            },
        }

    @cached_property
    def _start_order(self) -> tuple[dict[str, set[str]], list[str]]:
        """The recipe's components with what each starts after, and the order they come up in: the spec's, the
        same on every node (sorted once, not once a node)."""
        graph = {c.name: set(c.after) for c in self.spec.stack.components}
        try:
            order = list(TopologicalSorter(graph).static_order())
        except CycleError:  # a cyclic recipe is the static gate's finding; bring components up in spec order
            order = list(graph)
        return graph, order

    def _pod_times(self, node: str, number: int) -> dict[str, tuple[datetime, datetime]]:
        """Start and Ready time of each component: after its dependencies became Ready, unless a fault says not."""
        graph, order = self._start_order
        base = T0 + timedelta(minutes=5, seconds=number % 60)
        times: dict[str, tuple[datetime, datetime]] = {}
        for name in order:
            deps = [times[d][1] for d in graph.get(name, ()) if d in times]
            start = max(deps, default=base) + timedelta(seconds=5)
            times[name] = (start, start + timedelta(seconds=20))
        for f in self.faults[node].ordering:
            if f.before in times and f.component in times:
                start = times[f.before][1] - timedelta(seconds=45)
                times[f.component] = (start, start + timedelta(seconds=10))
        return times

    def _pods(self, node: str, number: int) -> list[dict[str, Any]]:
        times = self._pod_times(node, number)
        pods = []
        sources = self.spec.stack.sources()
        for comp in self.spec.stack.components:
            source = sources.get(comp.name)
            if source is None or source.label is not None or comp.name not in times:
                continue
            if comp.name in self.faults[node].missing_components:
                continue
            start, ready_at = times[comp.name]
            app = source.app or source.daemonset or comp.name
            image = IMAGES.get(comp.name, "nvcr.io/nvidia/" + comp.name + ":v{v}").format(
                v=self._version(node, comp.name)
            )
            suffix = hashlib.sha256(f"{node}/{comp.name}".encode()).hexdigest()[:5]
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{app}-{suffix}",
                        "namespace": source.namespace,
                        "labels": {"app": app},
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "DaemonSet",
                                "name": app,
                                "uid": _uid(app),
                            }
                        ],
                    },
                    "spec": {"nodeName": node, "containers": [{"name": source.container, "image": image}]},
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _iso(ready_at)}],
                        "containerStatuses": [
                            {
                                "name": source.container,
                                "image": image,
                                "ready": True,
                                "restartCount": 0,
                                "state": {"running": {"startedAt": _iso(start)}},
                            }
                        ],
                    },
                }
            )
        return pods

    def observe(self) -> tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]:
        nodes: list[Mapping[str, Any]] = [self._node_object(n) for n in self.names]
        pods: list[Mapping[str, Any]] = [p for i, n in enumerate(self.names, 1) for p in self._pods(n, i)]
        return nodes, pods
