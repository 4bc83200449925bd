"""A run's inputs: the spec, each pool's SKU baseline and the waivers, validated alone and against each other.

Read twice in a run's life and from two places: from the user's files when the run is prepared (`load_inputs`:
they say what to plan and measure, and are copied into the run folder's inputs/), and from inputs/ when the run
is judged (`run_inputs`: what the evaluation reads, once, and what the certificate signs). A run is never judged
by a file outside its folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpucert.errors import EvidenceError
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import GpuBaseline, check_baseline_for, load_baseline
from gpucert.spec.cluster import ClusterSpec, load_spec

__all__ = ["load_inputs", "run_inputs", "waivers_path"]


def _baselines(spec: ClusterSpec, path_of: Callable[[str], Path]) -> dict[str, GpuBaseline]:
    """Each pool's SKU baseline from `path_of(pool)`, each file read once, checked against its pool (ConfigError)."""
    baselines: dict[str, GpuBaseline] = {}
    loaded: dict[Path, GpuBaseline] = {}
    for pool in spec.pools:
        path = path_of(pool.name)
        if path not in loaded:
            loaded[path] = load_baseline(path)
        check_baseline_for(spec, pool, loaded[path], path)
        baselines[pool.name] = loaded[path]
    return baselines


def waivers_path(spec: ClusterSpec) -> Path | None:
    """The spec's waivers file (`acceptance.waivers`), resolved; None when the spec names none."""
    name = spec.acceptance.waivers
    return spec.resolve(name, "acceptance.waivers") if name is not None else None


def load_inputs(spec_path: Path) -> tuple[ClusterSpec, dict[str, GpuBaseline]]:
    """The spec, each pool's SKU baseline and the waivers as the user wrote them, each validated alone and against
    the other (ConfigError, exit 2)."""
    spec = load_spec(spec_path)
    paths = spec.baseline_paths()
    baselines = _baselines(spec, paths.__getitem__)
    waivers = waivers_path(spec)
    if waivers is not None:
        from gpucert.spec.waivers import load_waivers

        load_waivers(waivers, spec.acceptance.approvers)
    return spec, baselines


def run_inputs(folder: RunFolder) -> tuple[ClusterSpec, dict[str, GpuBaseline]]:
    """The spec and each pool's SKU baseline the run was prepared with (inputs/), validated as when they were
    given. The waivers are the evaluation's to read (inputs/waivers.yaml, at the run's time)."""
    if not folder.spec_copy.is_file():
        raise EvidenceError(
            f"no {folder.spec_copy.name} in inputs/: not a run folder gpucert prepared",
            path=folder.path,
        )
    spec = load_spec(folder.spec_copy)
    return spec, _baselines(spec, folder.baseline_copy_for)
