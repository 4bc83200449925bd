"""The `kubernetes` target of a ClusterSpec, and what a pool says of its nodes that only a cluster has (taints, GPU
sharing): how gpucert reaches the cluster and what its pods ask for. Part of the spec contract (spec.py)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, field_validator

from gpucert.spec.documents import Document, Problem

__all__ = ["GangSpec", "GpuSharing", "KubernetesTargetSpec", "ProbeResources", "Taint", "gang_unused", "topology_key"]

# a Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity): a number and an optional suffix
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# a DNS-1123 label (a LocalQueue's name, which goes in a label value: 63 characters at most)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# a label key: an optional DNS-subdomain prefix and `/`, then a name of 63 characters at most
# (k8s.io/apimachinery pkg/util/validation/validation.go, IsQualifiedName)
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class GpuSharing(StrEnum):
    NONE = "none"  # whole GPUs, one nvidia.com/gpu each
    MIG = "mig"  # MIG instances (GFD: nvidia.com/mig.strategy single or mixed, a -MIG- product)
    TIME_SLICING = "time-slicing"  # replicas of each GPU (GFD: nvidia.com/gpu.replicas > 1)
    MPS = "mps"  # replicas of each GPU under CUDA MPS (GFD: nvidia.com/gpu.sharing-strategy=mps, replicas > 1)


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class Taint(Document):
    """A taint a pool's nodes carry; gpucert's pods tolerate it (a NoExecute one would evict them)."""

    key: Annotated[str, Field(min_length=1)]
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    def toleration(self) -> dict[str, str]:
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


def _quantity(v: str) -> str:
    if not QUANTITY.match(v):
        raise ValueError(f"{v!r} is not a Kubernetes quantity; write e.g. 4, 500m, 16Gi")
    return v


class ProbeResources(Document):
    """The CPU and memory each probe pod requests (and is limited to: requests equal limits, Guaranteed QoS)."""

    cpu: str | None = None
    memory: str | None = None

    @field_validator("cpu", "memory")
    @classmethod
    def _is_quantity(cls, v: str | None) -> str | None:
        return v if v is None else _quantity(v)


class GangSpec(Document):
    """Gang admission of the all-reduce across nodes: where JobSet and Kueue are installed, the run is one JobSet
    that Kueue admits whole (every rank or none) from this LocalQueue of the run namespace; elsewhere it is the
    Indexed Job it always was (measure/targets/kubernetes/gang.py)."""

    local_queue: str = Field(alias="localQueue")
    # a node label naming a topology domain (a rack, a block): each pool's nodes grouped by it, one all-reduce per
    # domain, each its own check (plan/domains.py) placed there alone (JobSet's exclusive placement); absent: one
    # ring of the pool's nodes, wherever they are
    topology_key: str | None = Field(None, alias="topologyKey")
    # how long the JobSet may wait suspended for Kueue's admission before the all-reduce is reported not admitted
    admission_timeout_seconds: Annotated[int, Field(ge=1)] = Field(600, alias="admissionTimeoutSeconds")

    @field_validator("local_queue")
    @classmethod
    def _queue_name(cls, v: str) -> str:
        if not DNS_LABEL.match(v):
            raise ValueError(
                f"{v!r} is not a LocalQueue name (lower-case letters, digits and '-', 63 at most); "
                "name the LocalQueue of the run namespace (`kubectl get localqueues -n NAMESPACE`)"
            )
        return v

    @field_validator("topology_key")
    @classmethod
    def _label_key(cls, v: str | None) -> str | None:
        if v is not None and not LABEL_KEY.match(v):
            raise ValueError(f"{v!r} is not a node label key; write e.g. topology.kubernetes.io/zone")
        return v


class KubernetesTargetSpec(Document):
    kind: Literal["kubernetes"]
    context: str | None = None
    namespace: str = "gpucert"
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"}, alias="nodeSelector"
    )
    image: str | None = None
    # how the image must be pinned: `digest` (REF@sha256:...) or `tag` (a tag other than latest, or a digest)
    image_pin: Literal["digest", "tag"] = Field("digest", alias="imagePin")
    image_pull_secrets: list[str] = Field(default_factory=list, alias="imagePullSecrets")
    max_parallel: Annotated[int, Field(ge=1, le=1024)] = Field(32, alias="maxParallel")
    # the most nodes the fabric stage measures at once (its pairs, two nodes each); None: every pair of a round at
    # once. maxParallel does not bound it: the run already holds every node then, and a round has each node once
    fabric_parallel: Annotated[int, Field(ge=2)] | None = Field(None, alias="fabricParallel")
    tolerations: list[dict[str, str]] = Field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    pending_timeout_seconds: Annotated[int, Field(ge=1)] = Field(600, alias="pendingTimeoutSeconds")
    # how long a probe pod waits for a node whose GPUs other pods hold (the scheduler says Insufficient
    # nvidia.com/gpu); 0: report it busy, naming the pods, at pendingTimeoutSeconds
    busy_timeout_seconds: Annotated[int, Field(ge=0)] = Field(0, alias="busyTimeoutSeconds")
    # the probe Job's deadline; None: derived from the plan (probes/deadline.py), so that the probe, not the
    # kubelet, reports what overran. One set shorter than the plan needs is an error
    active_deadline_seconds: Annotated[int, Field(ge=60)] | None = Field(None, alias="activeDeadlineSeconds")
    # extra limits for the all-reduce across nodes, e.g. the RDMA device plugin's {rdma/rdma_shared_device_a: 1}
    fabric_resources: dict[str, str] = Field(default_factory=dict, alias="fabricResources")
    # the all-reduce pods on the nodes' network namespace (NCCL then sees every host interface and RDMA device)
    fabric_host_network: bool = Field(False, alias="fabricHostNetwork")
    # the RuntimeClass of every gpucert pod, where nvidia is not the container runtime's default handler
    runtime_class_name: str | None = Field(None, alias="runtimeClassName")
    # each probe pod's CPU and memory (requests = limits); sized from the plan when absent
    resources: ProbeResources | None = None
    # the all-reduce across nodes admitted whole through Kueue (a JobSet), where the cluster has JobSet and Kueue
    gang: GangSpec | None = None

    @field_validator("gang", mode="before")
    @classmethod
    def _gang_written(cls, v: object) -> object:
        """`gang:` left empty is YAML's null: it read as no gang admission at all, without a word."""
        if v is None:
            raise ValueError("it is empty: give its localQueue (e.g. `gang: {localQueue: gpucert}`), or remove gang")
        return v

    @field_validator("tolerations")
    @classmethod
    def _tolerations_the_api_accepts(cls, v: list[dict[str, str]]) -> list[dict[str, str]]:
        """What the API server's pod validation refuses (422) in a toleration, refused here first (kubernetes
        pkg/apis/core/validation/validation.go, ValidateTolerations)."""
        for i, t in enumerate(v):
            unknown = set(t) - {"key", "operator", "value", "effect"}
            op, effect = t.get("operator", "Equal"), t.get("effect", "")
            if unknown:
                raise ValueError(f"toleration {i}: unknown keys {sorted(unknown)} (key, operator, value, effect)")
            if op not in ("Equal", "Exists"):
                raise ValueError(f"toleration {i}: operator {op!r} is not Equal or Exists")
            if effect not in ("", *TAINT_EFFECTS):
                raise ValueError(f"toleration {i}: effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
            if op == "Exists" and t.get("value"):
                raise ValueError(f"toleration {i}: value must be empty when operator is Exists")
            if not t.get("key") and op != "Exists":
                raise ValueError(f"toleration {i}: operator must be Exists when key is empty (it matches every taint)")
        return v


def topology_key(target: object) -> str | None:
    """The node label whose domains each get their own all-reduce across nodes (target.gang.topologyKey of a
    kubernetes target; None for any other target, or without the key)."""
    gang = getattr(target, "gang", None)
    return gang.topology_key if isinstance(gang, GangSpec) else None


def gang_unused(target: KubernetesTargetSpec, multinode: bool) -> list[Problem]:
    """`target.gang` admits the all-reduce across nodes only (certify's, and a soak round's): in a spec without
    certify.multinode it would be read and do nothing, and the user believe the collective gang-admitted."""
    if target.gang is None or multinode:
        return []
    why = "gang admits the all-reduce across nodes, which this spec does not run: add certify.multinode, or remove it"
    return [(("target", "gang"), why)]
