"""`accept` with a burn-in required (spec `acceptance.soakHours`): every node must have a signed soak that it
passed with at least that many clean hours. Soak runs are given to `gpucert accept` beside the certification runs;
each must verify (signed by one of the keys, every file as signed) like them.

A node without such a soak fails the acceptance, with why; the soaks seen are listed in the record. Without
`soakHours` the soaks given are listed and nothing is required of them.

A soak counts only as a burn-in of what was accepted:
- of the same definition (`judged_by`): the soak section in force (all but its duration: accept judges the hours
  against `soakHours` itself), the pools (name, selector, expectations, fabric), each pool's baseline by the
  digest of its signed copy, `certify.multinode` and the target's kind must equal the certification's; the rest of
  the spec (stack pins, certify probes, waivers, acceptance) may have changed in between. Else it is refused.
- of the same boards: each node's GPU serials over its clean rounds must be those of the run that covers it; a
  node whose boards differ has no soak hours (named in the record).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.errors import EvidenceError
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.soak_verdict import SOAK_PREDICATE_TYPE
from gpucert.spec.cluster import load_spec
from gpucert.spec.durations import duration_seconds
from gpucert.spec.soak import SoakSpec

__all__ = ["SeenSoak", "boards_of_run", "judged_by", "open_soak", "require_soak", "split_soak_runs"]

Boards = tuple[str | None, ...]  # a node's GPU serials by index


@dataclass(frozen=True)
class SeenSoak:
    run: str
    spec: str
    certificate: str
    nodes: dict[str, dict[str, Any]]  # node -> {result, cleanHours}, as signed
    path: Path = Path()
    judged: dict[str, str] = field(default_factory=dict)  # what its rounds were judged by (judged_by)
    boards: dict[str, Boards | None] = field(default_factory=dict)  # over the node's clean rounds; None: changed


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def judged_by(folder: RunFolder, soak: dict[str, Any] | None = None) -> dict[str, str]:
    """What a soak of this run's spec is judged by, each part by its digest: the soak section in force less its
    duration (`soak`: a soak's own, from its plan; else the spec's with its defaults), the pools, their baselines
    (the signed copies in inputs/), `certify.multinode` and the target's kind."""
    spec = load_spec(folder.spec_copy)
    in_force = dict(soak if soak is not None else (spec.soak or SoakSpec()).model_dump(by_alias=True, mode="json"))
    in_force.pop("duration", None)
    multinode = spec.certify.multinode
    parts = {
        "soak section": _digest(in_force),
        "target kind": spec.target.kind,
        "certify.multinode": _digest(multinode.model_dump(by_alias=True, mode="json") if multinode else None),
    }
    for pool in spec.pools:
        what = pool.model_dump(by_alias=True, mode="json", include={"name", "node_selector", "expect", "fabric"})
        parts[f"pool {pool.name}"] = _digest(what)
        try:
            baseline = hashlib.sha256(folder.baseline_copy_for(pool.name).read_bytes()).hexdigest()
        except OSError:
            baseline = "missing"
        parts[f"baseline of pool {pool.name}"] = baseline
    return parts


def boards_of_run(folder: RunFolder, node: str) -> Boards | None:
    """The node's GPU serials as the run measured them (None: no evidence of it)."""
    ev = folder.read_evidence(node)
    if ev is None:
        return None
    return tuple(g.serial for g in sorted(ev.gpus, key=lambda g: g.index))


def _soak_boards(folder: RunFolder, nodes: dict[str, dict[str, Any]], round_h: float) -> dict[str, Boards | None]:
    """Per node, the serials over the rounds its clean hours count (its last ones run): None when they changed
    within them or a round's file cannot be read."""
    rounds = sorted(p for p in (folder.path / "soak" / "rounds").glob("[0-9]*") if p.is_dir())
    out: dict[str, Boards | None] = {}
    for node, v in nodes.items():
        counted = max(1, round(float(v["cleanHours"]) / round_h)) if round_h > 0 else 1
        raws = [p / f"{node}.json" for p in rounds if (p / f"{node}.json").is_file()][-counted:]
        seen: set[Boards] = set()
        try:
            for raw in raws:
                gpus = json.loads(raw.read_bytes())["gpus"]
                seen.add(tuple(g.get("serial") for g in sorted(gpus, key=lambda g: int(g["index"]))))
        except (OSError, ValueError, KeyError, TypeError):
            seen = set()
        out[node] = next(iter(seen)) if len(seen) == 1 else None
    return out


def _predicate_type(path: Path) -> str | None:
    try:
        envelope = attest.read_envelope(RunFolder(path).envelope_path)
        return str(envelope.statement().get("predicateType"))
    except (EvidenceError, OSError, ValueError):
        return None  # not signed, or not readable: `open_run` says why


def split_soak_runs(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(soak runs, the other runs) among the folders given to accept."""
    soaks = [p for p in paths if _predicate_type(p) == SOAK_PREDICATE_TYPE]
    return soaks, [p for p in paths if p not in soaks]


def open_soak(path: Path, keys: list[Ed25519PublicKey]) -> SeenSoak:
    """A soak run that verifies (EvidenceError naming what does not)."""
    folder = RunFolder(path.resolve())
    env = attest.read_envelope(folder.envelope_path)
    if not [c for c in env.check(keys) if c.verified_by]:
        raise EvidenceError("signed by none of the keys given: accept only soaks you can verify", path=path)
    changed, missing, added, odd = attest.compare_files(folder.path, env)
    problems = [f"changed: {n}" for n in changed] + [f"missing: {n}" for n in missing]
    problems += [f"added: {n}" for n in added] + [f"not a plain file: {n}" for n in odd]
    if problems:
        raise EvidenceError(f"does not verify ({'; '.join(problems[:4])}): run `gpucert verify` on it", path=path)
    predicate = env.statement().get("predicate", {})
    nodes = {str(n): dict(v) for n, v in predicate["nodes"].items()}
    try:
        plan = json.loads((folder.path / "soak" / "plan.json").read_bytes())
        str(plan["soak"]["round"])
    except (OSError, ValueError, KeyError, TypeError):
        raise EvidenceError("has no readable soak/plan.json: it is not a soak gpucert wrote", path=path) from None
    return SeenSoak(
        run=str(predicate["run"]["id"]),
        spec=str(predicate["spec"]["name"]),
        certificate=attest.certificate_digest(folder.path) or "",
        nodes=nodes,
        path=folder.path,
        judged=judged_by(folder, plan["soak"]),
        boards=_soak_boards(folder, nodes, duration_seconds(str(plan["soak"]["round"])) / 3600),
    )


def _differ(soak: Boards | None, cert: Boards | None) -> str | None:
    """Why the boards a soak burned in are not the certification's (None: the same, GPU for GPU)."""
    if cert is None or None in cert:
        return "the certification holds no serial of its GPUs"
    if soak is None:
        return "its boards changed during the soak's clean hours (or a round cannot be read)"
    if len(soak) != len(cert):
        return f"the soak burned in {len(soak)} GPUs, the certification measured {len(cert)}"
    pairs = enumerate(zip(soak, cert, strict=True))
    diff = [f"gpu{i} {a} (soak) vs {b} (certification)" for i, (a, b) in pairs if a != b]
    return ("other boards: " + ", ".join(diff[:3]) + (", ..." if len(diff) > 3 else "")) if diff else None


def _best(soaks: list[SeenSoak], boards: dict[str, Boards | None]) -> dict[str, dict[str, Any]]:
    """Per node, its best soak: one of the certified boards before one of others, a passed one before a failed
    one, then the most clean hours. `heldHours` are the clean hours that count: none on other boards."""
    best: dict[str, dict[str, Any]] = {}
    for s in soaks:
        for node, v in s.nodes.items():
            differ = _differ(s.boards.get(node), boards.get(node))
            mine = {
                "run": s.run,
                "certificate": s.certificate,
                "result": v["result"],
                "cleanHours": v["cleanHours"],
                "heldHours": 0.0 if differ else float(v["cleanHours"]),
                "boards": list(s.boards.get(node) or []),
                **({"boardsDiffer": differ} if differ else {}),
            }
            rank = (differ is None, v["result"] == "pass", v["cleanHours"])
            old = best.get(node)
            if old is None or rank > ("boardsDiffer" not in old, old["result"] == "pass", old["cleanHours"]):
                best[node] = mine
    return best


def _not_of_the_spec(soak: SeenSoak, judged: dict[str, str], cert_run: str) -> None:
    """Refuse a soak run under another definition than the certification's (EvidenceError naming what)."""
    differ = sorted(k for k in judged.keys() | soak.judged.keys() if judged.get(k) != soak.judged.get(k))
    if differ:
        raise EvidenceError(
            f"soak {soak.run} was not run under the spec {cert_run} certifies: its {', '.join(differ)} "
            "differ (a soak counts only under the same soak section, pools and baselines): run the soak again "
            "with the certification's spec",
            path=soak.path,
        )


def _why_not(soak: dict[str, Any] | None, hours: int) -> str | None:
    if soak is None:
        return f"no soak of it was given; the spec requires {hours} clean hours (acceptance.soakHours)"
    if "boardsDiffer" in soak:
        return f"its soak {soak['run']} holds no hours of the accepted boards: {soak['boardsDiffer']}"
    if soak["result"] != "pass" or soak["cleanHours"] < hours:
        return (
            f"its soak {soak['run']} was {soak['result']} with {soak['cleanHours']:g} clean hours; the spec "
            f"requires a passed soak of {hours} (acceptance.soakHours)"
        )
    return None


def require_soak(
    record: dict[str, Any],
    soaks: list[SeenSoak],
    hours: int | None,
    *,
    judged: dict[str, str],
    boards: dict[str, Boards | None],
    cert_run: str,
) -> None:
    """Add the soaks to the acceptance record; with `hours`, fail every node without a passing soak that long of
    its certified boards. A soak of another spec (by name or by what it is judged by) is refused."""
    if not soaks and hours is None:
        return
    for s in soaks:
        if s.spec != record["spec"]:
            raise EvidenceError(f"soak {s.run} is of spec {s.spec}, the runs of {record['spec']}: give one spec's runs")
        _not_of_the_spec(s, judged, cert_run)
    best = _best(soaks, boards)
    record["soak"] = {"requiredHours": hours, "runs": [s.run for s in soaks], "nodes": best}
    if hours is None:
        return
    for node, entry in record["nodes"].items():
        why = _why_not(best.get(node), hours)
        if why is None:
            continue
        if entry["status"] != "failed":
            record["totals"][entry["status"]] -= 1
            record["totals"]["failed"] += 1
            entry["status"] = "failed"
        entry["soak"] = why
        record["problems"].append(f"{node}: {why}")
    record["result"] = "fail" if record["problems"] else "pass"
