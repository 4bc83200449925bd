"""Where inventory, stack objects and evidence come from: simulated, kubernetes, local (replay is recorded evidence,
re-evaluated by run.prepare). The protocols are in base.py; this root opens the target a spec names."""

from __future__ import annotations

from gpucert.errors import ConfigError
from gpucert.measure.targets.base import MeasurePlan, Target
from gpucert.spec.cluster import ClusterSpec, KubernetesTargetSpec, LocalTargetSpec, SimulatedTargetSpec

__all__ = ["MeasurePlan", "Target", "open_target"]


def open_target(spec: ClusterSpec) -> Target:
    """The target the spec declares."""
    if isinstance(spec.target, SimulatedTargetSpec):
        from gpucert.measure.targets.simulated import SimulatedTarget as Simulated

        return Simulated.from_spec(spec)
    if isinstance(spec.target, LocalTargetSpec):
        from gpucert.measure.targets.local import LocalTarget

        return LocalTarget.from_spec(spec)
    if isinstance(spec.target, KubernetesTargetSpec):
        from gpucert.measure.targets.kubernetes.target import KubernetesTarget

        return KubernetesTarget.from_spec(spec)
    raise ConfigError(
        f"a {spec.target.kind} target is recorded evidence: it has no cluster to observe, measure or hold; "
        "`gpucert certify` and `evaluate` re-evaluate it",
        path=spec.path,
        key="target.kind",
    )
