"""What `gpucert init` reads of a cluster before any spec exists: the GPU nodes and the GPU Operator's pods, through
the same target code as `gpucert configure` (so the same requests, and the same RBAC: deploy/rbac.yaml), or the
same objects from a simulated fleet. The draft itself is draft.py's; this room only opens the target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucert.errors import ConfigError
from gpucert.measure.targets.base import Target
from gpucert.spec.cluster import API_VERSION, ClusterSpec
from gpucert.spec.simulated_fleet import SimulatedFleet, load_fleet
from gpucert.stack.components import DEFAULT_SOURCES, OPERATOR_DEPENDENCIES
from gpucert.stack.observe import StackObservation, observe_stack

__all__ = ["survey", "survey_kubernetes", "survey_simulated"]


def _stand_in(target: dict[str, Any], components: dict[str, str]) -> ClusterSpec:
    """A spec that only says where to look and which components to read: no expectation of it is ever checked."""
    doc = {
        "apiVersion": API_VERSION,
        "kind": "ClusterSpec",
        "metadata": {"name": "gpucert-init"},
        "target": target,
        "pools": [
            {"name": "all", "expect": {"nodes": 1, "gpusPerNode": 1, "gpuProduct": "-"}, "baseline": "-"},
        ],
        "stack": {
            "components": [
                {"name": c, "version": v, "after": [d for d in OPERATOR_DEPENDENCIES.get(c, ()) if d in components]}
                for c, v in components.items()
            ]
        },
        "certify": {},
    }
    return ClusterSpec.model_validate(doc)


def survey(target: Target) -> StackObservation:
    """The nodes and stack as `gpucert configure` would observe them, every GPU Operator component read."""
    nodes, pods = target.observe()
    stack = observe_stack(nodes, pods, DEFAULT_SOURCES)
    policy = getattr(target, "cluster_policy", None)
    return stack.model_copy(update={"cluster_policy": policy}) if policy is not None else stack


def survey_kubernetes(context: str | None, node_selector: dict[str, str]) -> StackObservation:
    from gpucert.measure.targets.kubernetes.target import KubernetesTarget

    target: dict[str, Any] = {"kind": "kubernetes", "nodeSelector": node_selector}
    if context is not None:
        target["context"] = context
    # every component in the operator's namespace: the same pods list configure makes, nothing more
    spec = _stand_in(target, dict.fromkeys(DEFAULT_SOURCES, "0"))
    return survey(KubernetesTarget.from_spec(spec))


def _installed(fleet: SimulatedFleet, path: Path) -> dict[str, str]:
    versions = {**fleet.stack}
    for group in fleet.groups():
        for component, version in group.stack.items():
            versions.setdefault(component, version)
    known = {c: v for c, v in versions.items() if c in DEFAULT_SOURCES}
    if not known:
        raise ConfigError(
            "the fleet does not say what the simulated cluster runs: add `stack: {driver: ..., container-toolkit: "
            f"..., ...}}` (components: {', '.join(DEFAULT_SOURCES)})",
            path=path,
            key="stack",
        )
    return known


def survey_simulated(fleet_path: Path, baselines: Path) -> tuple[StackObservation, SimulatedFleet]:
    """A simulated fleet's cluster objects as `gpucert configure` would read them (its `stack` says what runs)."""
    from gpucert.measure.targets.simulated import SimulatedTarget, sku_baselines

    fleet = load_fleet(fleet_path)
    spec = _stand_in({"kind": "simulated", "fleet": str(fleet_path)}, _installed(fleet, fleet_path))
    return survey(SimulatedTarget(spec, fleet, sku_baselines(fleet, [baselines]))), fleet
