"""A simulated fleet: Kubernetes-shaped objects and noisy raw samples, with the faults of a SimulatedFleet.

It produces observations only (what a real cluster and real probes would report) and never says what is wrong:
the suites must find every injected fault, and nothing else. Its rooms: `world` (the fleet and its faults per
node), `cluster` (Nodes and the GPU Operator's pods), `probes` (each node's evidence), `nodes` (the hold, cordon
and marks of recertification).
"""

from __future__ import annotations

from pathlib import Path

from gpucert.errors import ConfigError
from gpucert.measure.evidence import FabricEvidence
from gpucert.measure.targets.base import EvidenceSink, MeasurePlan
from gpucert.measure.targets.simulated.cluster import SimulatedCluster
from gpucert.measure.targets.simulated.nodes import LOCK_MAX_AGE_S, SimulatedNodeControl
from gpucert.measure.targets.simulated.probes import SimulatedProbes
from gpucert.spec.baseline import GpuBaseline, load_baseline
from gpucert.spec.cluster import ClusterSpec, SimulatedTargetSpec
from gpucert.spec.simulated_fleet import NvlinkDownFault, NvlinkErrorsFault, SimulatedFleet, load_fleet

__all__ = ["LOCK_MAX_AGE_S", "SimulatedNodeControl", "SimulatedTarget", "sku_baselines"]


def sku_baselines(fleet: SimulatedFleet, folders: list[Path]) -> dict[str, GpuBaseline]:
    """The baseline of every SKU the fleet names (`<sku>.yaml`), from the first of `folders` that holds it."""
    out: dict[str, GpuBaseline] = {}
    for group in fleet.groups():
        if group.sku in out:
            continue
        found = [f / f"{group.sku}.yaml" for f in folders if (f / f"{group.sku}.yaml").is_file()]
        out[group.sku] = load_baseline(found[0] if found else folders[0] / f"{group.sku}.yaml")
    return out


def _nvlink_faults_fit(fleet: SimulatedFleet, skus: dict[str, GpuBaseline], path: Path) -> None:
    """An NVLink fault on a link the SKU does not have would change nothing: an error, not a no-op."""
    for i, f in enumerate(fleet.faults):
        if not isinstance(f, NvlinkDownFault | NvlinkErrorsFault):
            continue
        sku = fleet.pool_of[f.node].sku
        nvlink = skus[sku].nvlink
        links = nvlink.links if nvlink is not None else 0
        key, wanted = ("links", f.links) if isinstance(f, NvlinkDownFault) else ("link", f.link + 1)
        if wanted > links:
            raise ConfigError(
                f"{sku} GPUs have {links} NVLink links (its baseline's nvlink.links): "
                f"{'take down at most' if key == 'links' else 'name a link below'} {links}",
                path=path,
                key=f"faults[{i}].{key}",
            )


class SimulatedTarget(SimulatedCluster, SimulatedProbes):
    """The target a spec with `target: {kind: simulated, fleet: ...}` opens."""

    kind = "simulated"

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> SimulatedTarget:
        assert isinstance(spec.target, SimulatedTargetSpec)
        path = spec.resolve(spec.target.fleet, "target.fleet")
        fleet = load_fleet(path, spec=spec)
        folders = [spec.resolve(p.baseline).parent for p in spec.pools]
        skus = sku_baselines(fleet, folders)
        _nvlink_faults_fit(fleet, skus, path)
        return cls(spec, fleet, skus)

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        for node in nodes:
            sink(self.measure_node(node, plan))

    def read_identities(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        """A re-test's read of the nodes it may carry: each node's identity alone (probes.identity), not a whole
        node's health and figures drawn to be thrown away."""
        for node in nodes:
            sink(self.identity(node, plan))

    def node_control(self, reports: Path) -> SimulatedNodeControl:
        return SimulatedNodeControl(reports / ".simulated-nodes" / self.spec.metadata.name, tuple(self.names))

    def measure_fabrics(self, groups: list[list[str]], plan: MeasurePlan) -> list[FabricEvidence]:
        return [self._fabric(nodes, plan) for nodes in groups]
