"""`accept` with a burn-in required (spec `acceptance.soakHours`): every node must have a signed soak that it
passed with at least that many clean hours. Soak runs are given to `gpucert accept` beside the certification runs;
each must verify (signed by one of the keys, every file as signed) like them.

A node without such a soak fails the acceptance, with why; the soaks seen are listed in the record. Without
`soakHours` the soaks given are listed and nothing is required of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.errors import EvidenceError
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.soak_verdict import SOAK_PREDICATE_TYPE

__all__ = ["SeenSoak", "open_soak", "require_soak", "split_soak_runs"]


@dataclass(frozen=True)
class SeenSoak:
    run: str
    spec: str
    certificate: str
    nodes: dict[str, dict[str, Any]]  # node -> {result, cleanHours}, as signed


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
    return SeenSoak(
        run=str(predicate["run"]["id"]),
        spec=str(predicate["spec"]["name"]),
        certificate=attest.certificate_digest(folder.path) or "",
        nodes={str(n): dict(v) for n, v in predicate["nodes"].items()},
    )


def _best(soaks: list[SeenSoak]) -> dict[str, dict[str, Any]]:
    """Per node, its best soak: a passed one before a failed one, then the most clean hours."""
    best: dict[str, dict[str, Any]] = {}
    for s in soaks:
        for node, v in s.nodes.items():
            mine = {"run": s.run, "certificate": s.certificate, "result": v["result"], "cleanHours": v["cleanHours"]}
            old = best.get(node)
            if old is None or (v["result"] == "pass", v["cleanHours"]) > (old["result"] == "pass", old["cleanHours"]):
                best[node] = mine
    return best


def require_soak(record: dict[str, Any], soaks: list[SeenSoak], hours: int | None) -> None:
    """Add the soaks to the acceptance record; with `hours`, fail every node without a passing soak that long."""
    if not soaks and hours is None:
        return
    for s in soaks:
        if s.spec != record["spec"]:
            raise EvidenceError(f"soak {s.run} is of spec {s.spec}, the runs of {record['spec']}: give one spec's runs")
    best = _best(soaks)
    record["soak"] = {"requiredHours": hours, "runs": [s.run for s in soaks], "nodes": best}
    if hours is None:
        return
    for node, entry in record["nodes"].items():
        soak = best.get(node)
        if soak is None:
            why = f"no soak of it was given; the spec requires {hours} clean hours (acceptance.soakHours)"
        elif soak["result"] != "pass" or soak["cleanHours"] < hours:
            why = (
                f"its soak {soak['run']} was {soak['result']} with {soak['cleanHours']:g} clean hours; the spec "
                f"requires a passed soak of {hours} (acceptance.soakHours)"
            )
        else:
            continue
        if entry["status"] != "failed":
            record["totals"][entry["status"]] -= 1
            record["totals"]["failed"] += 1
            entry["status"] = "failed"
        entry["soak"] = why
        record["problems"].append(f"{node}: {why}")
    record["result"] = "fail" if record["problems"] else "pass"
