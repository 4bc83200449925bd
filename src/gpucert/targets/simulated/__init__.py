"""A simulated fleet: Kubernetes-shaped objects and noisy raw samples, with the faults of a SimulatedFleet.

It produces observations only (what a real cluster and real probes would report) and never says what is wrong:
the suites must find every injected fault, and nothing else. Its rooms: `world` (the fleet and its faults per
node), `cluster` (Nodes and the GPU Operator's pods), `probes` (each node's evidence), `nodes` (the hold, cordon
and marks of recertification).
"""

from __future__ import annotations

from pathlib import Path

from gpucert.baseline import load_baseline
from gpucert.evidence import FabricEvidence
from gpucert.fleet import load_fleet
from gpucert.spec import ClusterSpec, SimulatedTargetSpec
from gpucert.targets.base import EvidenceSink, MeasurePlan
from gpucert.targets.simulated.cluster import SimulatedCluster
from gpucert.targets.simulated.nodes import LOCK_MAX_AGE_S, SimulatedNodeControl
from gpucert.targets.simulated.probes import SimulatedProbes

__all__ = ["LOCK_MAX_AGE_S", "SimulatedNodeControl", "SimulatedTarget"]


class SimulatedTarget(SimulatedCluster, SimulatedProbes):
    """The target a spec with `target: {kind: simulated, fleet: ...}` opens."""

    kind = "simulated"

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> SimulatedTarget:
        assert isinstance(spec.target, SimulatedTargetSpec)
        fleet = load_fleet(spec.resolve(spec.target.fleet, "target.fleet"), spec=spec)
        sku_file = spec.resolve(spec.certify.baseline, "certify.baseline").parent / f"{fleet.sku}.yaml"
        return cls(spec, fleet, load_baseline(sku_file))

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        for node in nodes:
            sink(self.measure_node(node, plan))

    def node_control(self, reports: Path) -> SimulatedNodeControl:
        return SimulatedNodeControl(reports / ".simulated-nodes" / self.spec.metadata.name, tuple(self.names))

    def measure_fabrics(self, groups: list[list[str]], plan: MeasurePlan) -> list[FabricEvidence]:
        return [self._fabric(nodes, plan) for nodes in groups]
