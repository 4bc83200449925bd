"""What a soak is judged by: the spec's `soak` with the command line's duration and round, and, on a resumed
soak, proof that the spec, the baselines and soak/plan.json are still the ones it started with (a soak is judged by
the inputs it started with, never by files edited since)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from gpucert.errors import ConfigError
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.soak import SoakSpec, check_rounds

__all__ = ["digest", "drift_not_judged", "recorded_soak", "same_baselines", "soak_spec"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def soak_spec(spec: ClusterSpec, duration: str | None, round_: str | None) -> SoakSpec:
    soak = spec.soak or SoakSpec()
    update = {k: v for k, v in (("duration", duration), ("round", round_)) if v is not None}
    try:
        if update:
            check_rounds(update.get("duration", soak.duration), update.get("round", soak.round))
        return soak.model_copy(update=update)
    except ValueError as exc:
        raise ConfigError(str(exc), path=spec.path, key="soak.duration / --duration, --round") from None


def same_baselines(spec: ClusterSpec, run: RunFolder) -> None:
    """Each pool's baseline file is the one the soak started with (inputs/): a baseline edited since is refused, as
    a changed spec is, never judged by."""
    for pool, given in spec.baseline_paths().items():
        kept = run.baseline_copy_for(pool)
        if not kept.is_file() or not given.is_file() or given.read_bytes() != kept.read_bytes():
            raise ConfigError(
                f"pool {pool}'s baseline is not the one this soak started with "
                f"(inputs/{kept.relative_to(run.inputs).as_posix()}): a soak is judged by one baseline; restore it, "
                "or start a new soak",
                path=given,
            )


def _differing(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys (dotted, leaves) where two documents differ."""
    out = []
    for k in sorted(a.keys() | b.keys()):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differing(x, y, f"{prefix}{k}.")
        elif x != y:
            out.append(prefix + k)
    return out


def recorded_soak(spec: ClusterSpec, plan: dict[str, Any], folder: SoakFolder) -> SoakSpec:
    """The soak the plan records, which must be the spec's `soak` with the command line's duration and round: a
    plan edited since the start (its criteria, duration or rounds) is refused, never judged by."""
    overrides = plan.get("overrides")
    if not isinstance(overrides, dict):  # a plan from before overrides were recorded: its duration and round
        overrides = {k: plan["soak"].get(k) for k in ("duration", "round")}
    given = [v if isinstance(v, str) else None for v in (overrides.get("duration"), overrides.get("round"))]
    expected = soak_spec(spec, *given)
    recorded = plan["soak"]
    want = expected.model_dump(by_alias=True, mode="json")
    if recorded != want or plan.get("rounds") != expected.rounds:
        keys = _differing(want, recorded) or ["rounds"]
        named = ", ".join(f"soak.{k}" for k in keys)
        raise ConfigError(
            f"soak/plan.json is not the soak this run started with (inputs/spec.yaml and the command line's "
            f"--duration/--round give another {named}): a soak is judged by the criteria it started with; "
            "restore the plan, or start a new soak",
            path=folder.path / "plan.json",
            key=f"soak.{keys[0]}",
        )
    return expected


def drift_not_judged(soak: SoakSpec) -> str | None:
    """Why a soak of so few rounds cannot judge drift (None: it can): a round is held to the median of the node's
    first referenceRounds rounds, so the soak needs one round more than those."""
    reference = soak.criteria.reference_rounds
    if soak.rounds > reference:
        return None
    return (
        f"soak.drift not judged: {soak.rounds} round(s) of {soak.round}, and a round is held to the node's first "
        f"{reference} (soak.criteria.referenceRounds): a soak needs at least {reference + 1} rounds (--duration, "
        "--round) to pass"
    )
