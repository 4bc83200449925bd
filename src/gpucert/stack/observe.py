"""Turn Kubernetes objects (Nodes, Pods, as the API serves them in JSON) into what configure checks read.

One code path for every target: the simulated fleet and a live API server both hand this module plain API-shaped
dicts (`ApiClient.sanitize_for_serialization` of the client's models), so a fault reads the same on both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpucert.files import read_json, validate, write_atomic
from gpucert.plan.inventory import Inventory, Node
from gpucert.stack.components import DEFAULT_SOURCES, ComponentSource, version_from_image

__all__ = [
    "STACK_SCHEMA",
    "ComponentObservation",
    "NodeStack",
    "StackObservation",
    "inventory_from_nodes",
    "observe_stack",
    "read_stack",
    "write_stack",
]

STACK_SCHEMA = "gpucert.io/stack/v1"
GPU_RESOURCE = "nvidia.com/gpu"
GFD_PREFIXES = ("nvidia.com/",)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComponentObservation(_Model):
    pod: str
    image: str
    version: str | None
    phase: str | None = None
    ready: bool = False
    started_at: str | None = None  # the component container's state.running.startedAt
    ready_at: str | None = None  # the pod's Ready condition lastTransitionTime, when Ready


class NodeStack(_Model):
    node: str
    ready: bool
    ready_reason: str = ""
    kubelet_version: str | None = None
    container_runtime: str | None = None
    kernel: str | None = None
    os_image: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)  # nvidia.com/* (GFD, operator) and pool-selector labels
    allocatable_gpus: int = 0
    # the other extended resources the node offers (`vendor/name`: an RDMA device plugin's, e.g.
    # rdma/rdma_shared_device_a or nvidia.com/hostdev), with their allocatable count
    resources: dict[str, int] = Field(default_factory=dict)
    components: dict[str, ComponentObservation] = Field(default_factory=dict)


class StackObservation(_Model):
    schema_: str = Field(STACK_SCHEMA, alias="schema")
    nodes: dict[str, NodeStack]
    cluster_policy: dict[str, Any] | None = None  # the GPU Operator's ClusterPolicy name and state, when present

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _ready_condition(obj: Mapping[str, Any]) -> tuple[bool, str, str | None]:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ok = cond.get("status") == "True"
            reason = cond.get("reason") or ""
            if cond.get("message"):
                reason = f"{reason}: {cond['message']}" if reason else cond["message"]
            return ok, reason, cond.get("lastTransitionTime")
    return False, "no Ready condition", None


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _extended(allocatable: Mapping[str, Any]) -> dict[str, int]:
    """The extended resources (`vendor/name`) besides GPUs, by allocatable count."""
    return {k: _int(v) for k, v in sorted(allocatable.items()) if "/" in k and k != GPU_RESOURCE}


def _observe_pod(pod: Mapping[str, Any], source: ComponentSource) -> ComponentObservation | None:
    containers = pod.get("spec", {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == source.container), None)
    if container is None:
        return None
    status = pod.get("status", {})
    started = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == source.container:
            started = (cs.get("state") or {}).get("running", {}).get("startedAt")
    ready, _, ready_at = _ready_condition(pod)
    image = container.get("image", "")
    return ComponentObservation(
        pod=pod["metadata"]["name"],
        image=image,
        version=version_from_image(image),
        phase=status.get("phase"),
        ready=ready,
        started_at=started,
        ready_at=ready_at if ready else None,
    )


def _components_of(pod: Mapping[str, Any], sources: Mapping[str, ComponentSource]) -> list[str]:
    """The components a pod runs: one pod may hold several, each in its own container (the driver's DaemonSet
    runs nvidia-peermem beside the driver)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    owners = [(o.get("kind", ""), o.get("name", "")) for o in meta.get("ownerReferences") or []]
    namespace = str(meta.get("namespace", ""))
    return [name for name, s in sources.items() if s.matches(namespace, labels, owners)]


def observe_stack(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    sources: Mapping[str, ComponentSource] = DEFAULT_SOURCES,
    *,
    keep_labels: Iterable[str] = (),
) -> StackObservation:
    """What each node runs: kubelet, runtime and the component pods scheduled on it (streamed: only the
    observations are kept, so a large cluster is read in bounded memory). Of a node's labels, GFD's and the
    operator's (`nvidia.com/*`) are kept, and those in `keep_labels` (what the spec's pools select on)."""
    keep = set(keep_labels)
    components: dict[str, dict[str, ComponentObservation]] = {}
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if node is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for name in _components_of(pod, sources):
            obs = _observe_pod(pod, sources[name])
            if obs is not None:
                components.setdefault(node, {})[name] = obs
    out: dict[str, NodeStack] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        status = node.get("status", {})
        info = status.get("nodeInfo") or {}
        ready, reason, _ = _ready_condition(node)
        all_labels = node["metadata"].get("labels") or {}
        labels = {k: v for k, v in all_labels.items() if k.startswith(GFD_PREFIXES) or k in keep}
        observed = components.get(name, {})
        for comp, source in sources.items():
            if source.label is not None and source.label in all_labels:
                value = all_labels[source.label]
                observed[comp] = ComponentObservation(pod="", image=f"label {source.label}", version=value, ready=True)
        out[name] = NodeStack(
            node=name,
            ready=ready,
            ready_reason="" if ready else reason,
            kubelet_version=info.get("kubeletVersion"),
            container_runtime=info.get("containerRuntimeVersion"),
            kernel=info.get("kernelVersion"),
            os_image=info.get("osImage"),
            labels=labels,
            allocatable_gpus=_int((status.get("allocatable") or {}).get(GPU_RESOURCE)),
            resources=_extended(status.get("allocatable") or {}),
            components=dict(sorted(observed.items())),
        )
    return StackObservation(nodes=dict(sorted(out.items())))


def inventory_from_nodes(target: str, stack: StackObservation) -> Inventory:
    """The inventory the cluster reports: GPU count and product from GFD labels, allocatable from the node."""
    nodes = []
    for ns in stack.nodes.values():
        count = ns.labels.get("nvidia.com/gpu.count")
        nodes.append(
            Node(
                name=ns.node,
                gpu_count=_int(count) if count is not None else None,
                gpu_product=ns.labels.get("nvidia.com/gpu.product"),
                allocatable_gpus=ns.allocatable_gpus,
                ready=ns.ready,
                ready_reason=ns.ready_reason,
            )
        )
    return Inventory(target=target, nodes=tuple(nodes))


def write_stack(path: Path, stack: StackObservation) -> None:
    write_atomic(path, stack.model_dump_json(by_alias=True, indent=1) + "\n")


def read_stack(path: Path) -> StackObservation:
    data = read_json(path, missing="no stack.json; pass a run folder written by `gpucert certify`")
    return validate(path, data, StackObservation, strict=False)
