"""Starting and resuming a soak: the run folder and its plan, the target that runs the rounds, and, on a resume,
proof that the inputs are the ones the soak started with (fleet/soak/inputs.py); then the controller's rounds and
the seal."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucert.errors import ConfigError, NodeBusyError
from gpucert.fleet.soak.controller import RoundTarget, SoakController
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.fleet.soak.inputs import digest, recorded_soak, same_baselines, soak_spec
from gpucert.fleet.soak.model import Progress, SoakResult
from gpucert.fleet.soak.seal import seal
from gpucert.plan import run as runner
from gpucert.plan.inputs import run_inputs
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import ClusterSpec, KubernetesTargetSpec, SimulatedTargetSpec
from gpucert.spec.pools import PoolMap
from gpucert.spec.soak import CRITERIA_SOURCES, SoakSpec

__all__ = ["PLAN_SCHEMA", "resume_soak", "start_soak"]

PLAN_SCHEMA = "gpucert.io/soak-plan/v1"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _round_target(
    spec: ClusterSpec,
    soak: SoakSpec,
    run_id: str,
    nodes: Sequence[dict[str, Any]] = (),
    reports: Path | None = None,
) -> RoundTarget:
    """What runs the rounds of `spec`'s target (`nodes`: the plan's, each with its pool; `reports`: the folder
    of the run, where a simulated fleet keeps its nodes' locks)."""
    if isinstance(spec.target, KubernetesTargetSpec):
        from gpucert.measure.targets.kubernetes.soak import KubernetesSoak
        from gpucert.measure.targets.kubernetes.target import KubernetesTarget

        # a probe pod, and a process of the all-reduce, requests every GPU its node's pool expects
        gpus = {n["node"]: spec.pool(n["pool"]).expect.gpus_per_node for n in nodes if n["pool"] is not None}
        # and the all-reduce's pods request their pool's RDMA resource (rails.resource, else fabricResources)
        pools = {n["node"]: n["pool"] for n in nodes if n["pool"] is not None}
        rdma = runner.rdma_resources(spec)
        target = KubernetesTarget.from_spec(spec)
        return KubernetesSoak(target, soak.probes, run_id, soak.round_s, gpus, pools=pools, rdma=rdma)
    if not isinstance(spec.target, SimulatedTargetSpec):
        raise ConfigError(
            f"a soak runs rounds on a cluster: a {spec.target.kind} target has none; use a kubernetes or simulated "
            "target",
            path=spec.path,
            key="target.kind",
        )
    from gpucert.measure.targets.simulated import SimulatedTarget
    from gpucert.measure.targets.simulated.soak import SimulatedSoak

    return SimulatedSoak(SimulatedTarget.from_spec(spec), soak.probes, run_id, reports)


def start_soak(
    spec_path: Path,
    reports: Path,
    *,
    duration: str | None = None,
    round_: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    sign_key: Path | None = None,
) -> SoakResult:
    """A new soak of the spec's nodes in a new run folder under `reports`, run to its end, its verdict written
    (and signed with `sign_key`)."""
    spec, baselines = runner.load_inputs(spec_path)
    soak = soak_spec(spec, duration, round_)
    if not isinstance(spec.target, SimulatedTargetSpec | KubernetesTargetSpec):
        _round_target(spec, soak, "")  # says why, before a run folder is made
    run = RunFolder.create(reports, spec.metadata.name, suffix="soak")
    run.copy_inputs(spec.path, spec.baseline_paths())
    from gpucert.measure.targets import open_target

    inventory = runner.plan(open_target(spec), spec, run)
    stack = run.read_stack()
    pools = PoolMap(spec, {n: s.labels for n, s in stack.nodes.items()}, inventory.names)
    folder = SoakFolder(run)
    assert spec.path is not None
    nodes = [{"node": n, "pool": pools.name_of(n)} for n in inventory.names]
    folder.write_plan(
        {
            "schema": PLAN_SCHEMA,
            "spec": {"name": spec.metadata.name, "path": str(spec.path), "sha256": digest(spec.path)},
            "target": spec.target.kind,
            "soak": soak.model_dump(by_alias=True, mode="json"),
            "overrides": {"duration": duration, "round": round_},  # what the command line gave over the spec's
            "sources": CRITERIA_SOURCES,
            "rounds": soak.rounds,
            "nodes": nodes,
            "started": _now(),
        }
    )
    target = _round_target(spec, soak, run.id, nodes, reports)
    try:
        result = SoakController(spec, baselines, folder, target, on_progress).run()
    except NodeBusyError:  # another soak or recertification holds a node: no round ran, no soak to resume
        if not (folder.path / "rounds").exists():
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    seal(folder, spec, result, sign_key)
    return result


def resume_soak(
    run_dir: Path,
    *,
    rejoin: Sequence[str] = (),
    on_progress: Callable[[Progress], None] | None = None,
    sign_key: Path | None = None,
) -> SoakResult:
    """Continue the soak in `run_dir` from its first round not committed (`rejoin`: repaired nodes, whose clock
    restarts at that round)."""
    folder = SoakFolder(RunFolder(run_dir))
    plan = folder.read_plan()
    path = Path(plan["spec"]["path"])
    kept = folder.run.spec_copy
    if (
        not path.is_file()
        or digest(path) != plan["spec"]["sha256"]
        or (kept.is_file() and digest(kept) != digest(path))
    ):
        raise ConfigError(
            "the spec this soak was started with is gone or changed since: a soak is judged by one spec; restore "
            "it, or start a new soak",
            path=path,
        )
    spec, _ = runner.load_inputs(path)
    same_baselines(spec, folder.run)
    _, baselines = run_inputs(folder.run)  # judged by what it started with (the same bytes as those given)
    soak = recorded_soak(spec, plan, folder)
    target = _round_target(spec, soak, folder.run.id, plan["nodes"], folder.run.path.parent)
    result = SoakController(spec, baselines, folder, target, on_progress).run(rejoin)
    seal(folder, spec, result, sign_key)
    return result
