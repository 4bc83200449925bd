"""A live cluster as a Target: GPU nodes by the spec's selector, the stack's pods, the ClusterPolicy; measured by
probe Jobs (kubernetes_jobs), across nodes by fabric Jobs (kubernetes_fabric), held for recertification by node
control (kubernetes_nodes). Every request goes through KubeApi (kubeapi.py), which owns the transport."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucert.errors import ClusterAccessError
from gpucert.measure.evidence import FabricEvidence
from gpucert.measure.targets.base import EvidenceSink, MeasurePlan
from gpucert.measure.targets.kubernetes.api import RBAC_HINT, Cluster, KubeApi, status_of
from gpucert.measure.targets.kubernetes.podspec import spec_tolerations
from gpucert.spec.cluster import ClusterSpec, KubernetesTargetSpec

if TYPE_CHECKING:
    from gpucert.measure.targets.kubernetes.nodes import KubernetesNodeControl

__all__ = ["RBAC_HINT", "KubernetesTarget"]


class KubernetesTarget:
    kind = "kubernetes"

    def __init__(self, spec: ClusterSpec, kube: KubeApi) -> None:
        assert isinstance(spec.target, KubernetesTargetSpec)
        self.spec = spec
        self.options = spec.target
        self.kube = kube
        self.cluster = Cluster(kube, spec.target, spec.path, tolerations=spec_tolerations(spec))
        self.cluster_policy: dict[str, Any] | None = None

    @classmethod
    def from_spec(cls, spec: ClusterSpec, **kwargs: Any) -> KubernetesTarget:
        assert isinstance(spec.target, KubernetesTargetSpec)
        return cls(spec, KubeApi.connect(spec.target.context, spec.path, **kwargs))

    # ---- Target ----------------------------------------------------------------------------------------------

    def _nodes(self) -> Iterator[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in self.options.node_selector.items())
        for node in self.kube.pages("list", "nodes", self.kube.core.list_node, label_selector=selector):
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            self.cluster.hostnames[meta["name"]] = labels.get("kubernetes.io/hostname", meta["name"])
            self.cluster.labels[meta["name"]] = labels
            pools = [p for p in self.spec.pools if p.selects(labels)]
            if len(pools) == 1:
                self.cluster.sharing[meta["name"]] = pools[0].expect.gpu_sharing
            yield node

    def _pods(self) -> Iterator[dict[str, Any]]:
        core = self.kube.core
        for ns in sorted({s.namespace for s in self.spec.stack.sources().values() if s.label is None}):
            yield from self.kube.pages("list", f"pods in namespace {ns}", core.list_namespaced_pod, namespace=ns)

    def read_cluster_policy(self) -> dict[str, Any] | None:
        """The GPU Operator's ClusterPolicy status, when the operator is installed."""
        try:
            data = self.kube.json(
                "list",
                "clusterpolicies.nvidia.com",
                self.kube.custom.list_cluster_custom_object,
                group="nvidia.com",
                version="v1",
                plural="clusterpolicies",
            )
        except ClusterAccessError as exc:
            if status_of(exc) == 404:
                return None  # no GPU Operator CRD: a stack of other DaemonSets
            raise
        items = data.get("items") or []
        if not items:
            return None
        policy = items[0]
        return {"name": policy["metadata"]["name"], "state": (policy.get("status") or {}).get("state")}

    def observe(self) -> tuple[Iterator[Mapping[str, Any]], Iterator[Mapping[str, Any]]]:
        self.cluster_policy = self.read_cluster_policy()
        return self._nodes(), self._pods()

    def _gpus(self, node: str, plan: MeasurePlan) -> int:
        """The GPUs a probe pod on `node` requests: all its pool expects (one pool: the spec's only count)."""
        return plan.gpus.get(node, self.spec.pools[0].expect.gpus_per_node)

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        from gpucert.measure.targets.kubernetes.jobs import ProbeJobs

        ProbeJobs(self.cluster, plan, sink, gpus_per_node=self._gpus(nodes[0] if nodes else "", plan)).run(nodes)

    def measure_fabrics(self, groups: list[list[str]], plan: MeasurePlan) -> list[FabricEvidence]:
        from gpucert.measure.targets.kubernetes.fabric import FabricJobs

        first = groups[0][0] if groups and groups[0] else ""
        jobs = FabricJobs(self.cluster, plan, lambda ev: None, gpus_per_node=self._gpus(first, plan))
        # a round whole by default: its groups share no node, and the run holds every node by now, so the operator's
        # bound on probe Jobs at once (maxParallel) is not this stage's; target.fabricParallel bounds it if set
        bound = self.options.fabric_parallel or sum(map(len, groups))
        out: list[FabricEvidence] = []
        batch: list[list[str]] = []
        for group in groups:
            if batch and sum(map(len, batch)) + len(group) > bound:
                out += jobs.run_fabrics(batch)
                batch = []
            batch.append(group)
        return out + (jobs.run_fabrics(batch) if batch else [])

    def node_control(self, reports: Path) -> KubernetesNodeControl:
        from gpucert.measure.targets.kubernetes.nodes import KubernetesNodeControl

        return KubernetesNodeControl(self.cluster)

    def cleanup(self) -> int:
        """Delete what earlier gpucert runs left in the run namespace; returns how many objects went."""
        from gpucert.measure.targets.kubernetes.jobs import cleanup_runs

        return cleanup_runs(self.kube, self.options.namespace)
