"""The Target protocol: what a place to certify must answer (the package root, targets/__init__.py, opens the one
a spec names)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gpucert.measure.evidence import FabricEvidence, NodeEvidence
from gpucert.measure.probes.probe_plan import FabricRails
from gpucert.spec.cluster import Probe

__all__ = [
    "EvidenceSink",
    "FabricTarget",
    "IdentityTarget",
    "MeasurePlan",
    "NodeControl",
    "NodeState",
    "NodeTarget",
    "Target",
]

EvidenceSink = Callable[[NodeEvidence], None]


@dataclass(frozen=True, slots=True)
class MeasurePlan:
    """What to measure on every node: the probes to run and their parameters."""

    run_id: str
    probes: tuple[Probe, ...]
    dcgm_level: int
    samples: Mapping[str, int] = field(default_factory=dict)  # per probe, the fewest repetitions to take
    # GPUs each node's pool expects (a probe pod requests them all); nodes not listed: the target's own count
    gpus: Mapping[str, int] = field(default_factory=dict)
    fabric: bool = False  # a pool has a fabric section: read each node's fabric, measure pairs' RDMA per rail
    # which ports are the rails, per pool with a fabric section (its HCAs), and each node's pool: a node's fabric
    # pods measure its own pool's rails, pairs are of one pool
    rails: Mapping[str, FabricRails] = field(default_factory=dict)
    pools: Mapping[str, str] = field(default_factory=dict)
    # each fabric pool's RDMA device plugin resource (its rails.resource): what a pod touching its NICs requests
    rdma: Mapping[str, str] = field(default_factory=dict)

    def rails_for(self, node: str) -> FabricRails | None:
        """The rails of the node's pool (None: its pool has no fabric section, or the node is in no pool)."""
        pool = self.pools.get(node)
        return self.rails.get(pool) if pool is not None else None

    def rdma_for(self, node: str, fallback: Mapping[str, str]) -> dict[str, str]:
        """What a pod on `node` that touches its pool's NICs requests: one of its pool's RDMA device plugin resource
        (rails.resource, which puts /dev/infiniband in the container), else `fallback` (target.fabricResources)."""
        pool = self.pools.get(node)
        resource = self.rdma.get(pool) if pool is not None else None
        return {resource: "1"} if resource else dict(fallback)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "probes": [p.value for p in self.probes],
            "dcgm_level": self.dcgm_level,
            "samples": dict(self.samples),
        }


class Target(Protocol):
    """A cluster (or a stand-in for one) that gpucert can plan against and measure."""

    kind: str

    def observe(self) -> tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]:
        """The GPU Nodes and the stack's Pods, as the Kubernetes API serves them in JSON (pods are read first)."""
        ...

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        """Measure every node, calling `sink` with each node's evidence as soon as it is complete.

        A node that cannot be measured still yields a document (`collected: false`, with the reason in `errors`).
        """
        ...


@runtime_checkable
class IdentityTarget(Protocol):
    """A target that reads a node's identity alone (its driver, and each GPU's UUID, serial, VBIOS and bus id:
    what `identity_change` compares) more cheaply than measuring it with the health probe; any other target is
    asked for that measurement. A node whose identity cannot be read still yields a document (`collected: false`)."""

    def read_identities(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None: ...


@runtime_checkable
class FabricTarget(Target, Protocol):
    """A target that can run one all-reduce across several of its nodes (`certify.multinode`)."""

    def measure_fabrics(self, groups: list[list[str]], plan: MeasurePlan) -> list[FabricEvidence]:
        """One all-reduce over every GPU of each group of nodes (no node in two groups), the groups at once."""
        ...


@dataclass(frozen=True, slots=True)
class NodeState:
    """A GPU node as it stands now: whether it is cordoned, and its labels and annotations (gpucert's marks among
    them)."""

    name: str
    unschedulable: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


class NodeControl(Protocol):
    """What recertification does to the node itself: hold it, take it out of service, put it back."""

    def nodes(self) -> list[NodeState]:
        """The target's GPU nodes (the spec's selection) as they stand now."""
        ...

    def gpu_pods(self, node: str) -> list[str]:
        """`namespace/name` of the pods that hold GPUs on the node now (gpucert's own aside)."""
        ...

    def lock(self, node: str, holder: str) -> AbstractContextManager[None]:
        """Hold the node for one recertification; raises NodeBusyError while another one holds it."""
        ...

    def holder(self, node: str) -> str | None:
        """Who holds the node now (checked before the node is marked: a run whose hold lapsed marks nothing)."""
        ...

    def cordon(self, node: str) -> bool:
        """Mark the node unschedulable; returns whether it already was."""
        ...

    def wait_idle(self, node: str, *, drain: bool, timeout_s: float) -> list[str]:
        """Wait until no GPU pod runs on the node (evicting them with `drain`); returns the pods waited for."""
        ...

    def mark(self, node: str, *, labels: dict[str, str], annotations: dict[str, str], uncordon: bool) -> None:
        """Label and annotate the node, and make it schedulable again when `uncordon`."""
        ...


@runtime_checkable
class NodeTarget(Target, Protocol):
    """A target whose nodes can be held, cordoned and marked (`gpucert recertify`)."""

    def node_control(self, reports: Path) -> NodeControl:
        """The hold on this target's nodes; `reports` is where a target without a cluster keeps their state."""
        ...
