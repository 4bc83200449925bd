"""The acceptance record (`gpucert accept RUN_DIR...`): the whole cluster, node by node, over several runs.

Every run given must verify (its signature by one of the keys, every file, and a re-test's carried evidence against
its source run). Each node is covered by the latest run that judged it (runs ordered by when they started): its
status is `passed`, `repaired` (passed after failing in an earlier run), `waived` (passed with a waived finding),
or `failed`; a waiver that has expired by the time of acceptance no longer covers its finding. The cluster passes
when every node of the spec is covered and passes, and the latest run of the whole cluster passed its fleet checks.

`acceptance/<id>/` holds acceptance.json, report.html and a DSSE envelope over both (certificate.intoto.json),
signed by the vendor here; `gpucert countersign` adds the buyer's signature to the same envelope.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.acceptance.retest import verify_carried
from gpucert.errors import ConfigError, EvidenceError, GpucertError
from gpucert.files import write_json
from gpucert.plan.layout import Mode, run_id
from gpucert.plan.records import read_run_info
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.derivation import verdict_differences
from gpucert.report.html import natural_key
from gpucert.report.verdict import node_passed, verdict_problems
from gpucert.report.verdict_model import Verdict, VerdictFinding, parse_verdict
from gpucert.spec.cluster import load_spec
from gpucert.spec.waivers import load_waivers, waiver_id

__all__ = ["ACCEPTANCE_SCHEMA", "PREDICATE_TYPE", "RECORD", "REPORT", "STATUSES", "SeenRun", "accept", "open_run"]

ACCEPTANCE_SCHEMA = "gpucert.io/acceptance/v2"  # v2: `soak` (null, or the soak that counts per node)
PREDICATE_TYPE = "https://gpucert.io/acceptance/v1"
RECORD = "acceptance.json"
REPORT = "report.html"
STATUSES = ("passed", "repaired", "waived", "failed")
MEASURED_MODES = tuple(m.value for m in Mode.recorded() if m.measures)  # the run modes that measured the hardware


@dataclass(frozen=True)
class SeenRun:
    """One run given to `accept`, verified."""

    folder: RunFolder
    verdict: Verdict
    certificate: str
    signers: list[str]
    started: str
    waivers: dict[str, dict[str, Any]] = field(default_factory=dict)  # by id, from the run's signed inputs

    @property
    def id(self) -> str:
        return self.verdict.run

    @property
    def kind(self) -> str:
        if self.verdict.recertify is not None:
            return "recertification"
        return "retest" if self.verdict.retest is not None else "certification"


def open_run(path: Path, keys: list[Ed25519PublicKey]) -> SeenRun:
    """A run folder that verifies: signed by one of `keys`, every file as signed, carried evidence as its source
    signed it. EvidenceError (exit 2) naming what does not verify otherwise."""
    try:
        folder = RunFolder(path.resolve(strict=True))
    except (OSError, RuntimeError) as exc:
        raise EvidenceError(f"cannot open: {exc}", path=path) from None
    env = attest.read_envelope(folder.envelope_path)
    signers = [c.verified_by for c in env.check(keys) if c.verified_by]
    if not signers:
        fps = ", ".join(attest.fingerprint(k) for k in keys)
        raise EvidenceError(f"signed by none of the keys given ({fps}): accept only runs you can verify", path=path)
    statement = env.statement()
    if statement.get("predicateType") != attest.PREDICATE_TYPE:
        raise EvidenceError("not a run's certificate (its predicate is not a certification)", path=path)
    mode = (statement.get("predicate", {}).get("scope") or {}).get("mode")
    if mode not in MEASURED_MODES:
        raise EvidenceError(
            f"a {mode} run measured no GPU: only a certification, a re-test or a recertification covers a node",
            path=path,
        )
    changed, missing, added, odd = attest.compare_files(folder.path, env)
    problems = [f"changed: {n}" for n in changed] + [f"missing: {n}" for n in missing]
    problems += [f"added: {n}" for n in added] + [f"not a plain file: {n}" for n in odd]
    problems += verify_carried(folder.path, keys)
    if problems:
        raise EvidenceError(
            f"does not verify ({'; '.join(problems[:4])}): accept only runs that verify (`gpucert verify`)", path=path
        )
    raw = folder.read_verdict()
    inconsistent = verdict_problems(raw)
    if inconsistent:
        raise EvidenceError(
            f"its signed verdict.json is not one gpucert writes ({'; '.join(inconsistent[:3])}): it is not accepted",
            path=path,
        )
    verdict = parse_verdict(raw, folder.verdict_path)
    differences = verdict_differences(folder, verdict)
    if differences:
        raise EvidenceError(
            f"its signed verdict.json does not follow from its evidence ({'; '.join(differences.named()[:3])}): it "
            "is not accepted",
            path=path,
        )
    started = read_run_info(folder).started or ""
    terms = signed_waivers(folder)
    return SeenRun(folder, verdict, attest.certificate_digest(folder.path) or "", signers, started, terms)


def signed_waivers(folder: RunFolder) -> dict[str, dict[str, Any]]:
    """The terms of each waiver of a run, by id, as its own signed inputs state them (inputs/waivers.yaml): what
    the verdict quotes of a waiver is not what the parties signed."""
    if not folder.waivers_copy.is_file():
        return {}
    doc = load_waivers(folder.waivers_copy)
    return {waiver_id(i): w.to_json() for i, w in enumerate(doc.waivers)}


def _history(runs: list[SeenRun]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        for node, s in r.verdict.nodes.items():
            out.setdefault(node, []).append(
                {
                    "run": r.id,
                    "result": s.result,
                    "failing": list(s.failing),
                    "waived": list(s.waived_checks),
                    "carried": s.carried_from is not None,
                }
            )
    return out


def _expired(waiver: dict[str, Any], now: datetime) -> bool:
    try:
        return date.fromisoformat(str(waiver.get("expires"))) < now.date()
    except ValueError:
        return True  # an expiry that cannot be read is no waiver in force


def _waived_on(
    node: str, last: SeenRun, now: datetime, waivers: dict[tuple[str, str], dict[str, Any]]
) -> tuple[list[VerdictFinding], str | None]:
    """The node's waived findings in the run that covers it, each entered in `waivers` with the terms the run's
    own inputs state (not the verdict's quote); and why one of them no longer covers its finding, if one does not."""
    waived = [f for f in last.verdict.waived() if f.node == node]
    why = None
    for f in waived:
        wid = str(f.waiver.id if f.waiver else None)
        signed = last.waivers.get(wid)
        w = {"id": wid, **(signed or {})}
        entry = waivers.setdefault((last.id, wid), {**w, "run": last.id, "covers": []})
        entry["covers"].append(f"{f.check}@{f.where}")
        entry["inForce"] = signed is not None and not _expired(w, now)
        if signed is None:
            why = f"waiver {wid} of run {last.id} is not in that run's signed waivers (inputs/waivers.yaml)"
        elif not entry["inForce"]:
            why = f"waiver {wid} of run {last.id} expired on {w.get('expires')}, before this acceptance"
    return waived, why


def _node_entry(
    node: str, hist: list[dict[str, Any]], last: SeenRun, now: datetime, waivers: dict[tuple[str, str], dict[str, Any]]
) -> dict[str, Any]:
    """A node as the latest run that judged it covers it: passed, repaired, waived, or failed (and why)."""
    s = last.verdict.nodes[node]
    waived, why = _waived_on(node, last, now, waivers)
    if not s.passed_result:
        status, why = "failed", f"{s.result} in {last.id}: {', '.join(s.failing) or 'incomplete'}"
    elif why is not None:
        status = "failed"
    elif waived:
        status = "waived"
    elif not all(node_passed(h["result"]) for h in hist[:-1]):
        status = "repaired"
    else:
        status = "passed"
    return {
        "status": status,
        "run": last.id,
        "certificate": last.certificate,
        "result": s.result,
        "measured": s.measured,
        "carriedFrom": s.carried_from.to_json() if s.carried_from is not None else None,
        "waived": [{"check": f.check, "gpu": f.gpu, "waiver": f.waiver.id if f.waiver else None} for f in waived],
        "history": hist,
        **({"why": why} if why else {}),
    }


def _fleet(runs: list[SeenRun], problems: list[str]) -> dict[str, Any] | None:
    """The fleet's own checks as the latest run of the whole cluster judged them (a recertification judges one
    node); a problem where they did not pass, or where no run judged the whole cluster."""
    whole = [r for r in runs if r.kind != "recertification"]
    if not whole:
        problems.append("no run certifies the cluster as a whole (only recertifications of single nodes)")
        return None
    latest = whole[-1]
    group = latest.verdict.fleet
    result, failing = (group.result, list(group.failing)) if group else ("incomplete", [])
    if not node_passed(result):
        problems.append(f"the cluster's own checks of {latest.id} did not pass ({', '.join(failing) or 'incomplete'})")
    return {"run": latest.id, "result": result, "failing": failing}


def build_record(runs: list[SeenRun], *, expected: int, spec: str, now: datetime, id_: str) -> dict[str, Any]:
    """acceptance.json: `runs` in the order they ran; the latest run that judged a node covers it."""
    history = _history(runs)
    by_id = {r.id: r for r in runs}
    waivers: dict[tuple[str, str], dict[str, Any]] = {}
    nodes = {
        node: _node_entry(node, history[node], by_id[history[node][-1]["run"]], now, waivers)
        for node in sorted(history, key=natural_key)
    }
    totals = {"expected": expected, "nodes": len(nodes), **{st: 0 for st in STATUSES}}
    for n in nodes.values():
        totals[n["status"]] += 1
    problems = [f"{n}: {v['why']}" for n, v in nodes.items() if v["status"] == "failed"]
    if len(nodes) != expected:
        problems.append(f"the runs cover {len(nodes)} nodes; the spec expects {expected}")
    fleet = _fleet(runs, problems)
    return {
        "schema": ACCEPTANCE_SCHEMA,
        "id": id_,
        "spec": spec,
        "created": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "result": "fail" if problems else "pass",
        "problems": problems,
        "totals": totals,
        "fleet": fleet,
        "soak": None,  # the soaks given, per node (acceptance/soak.py), when any was given or required
        "runs": [
            {
                "run": r.id,
                "kind": r.kind,
                "started": r.started,
                "result": r.verdict.result,
                "certificate": r.certificate,
                "signers": r.signers,
                "target": r.verdict.target,
                **({"retest": r.verdict.retest.to_json()} if r.verdict.retest is not None else {}),
            }
            for r in runs
        ],
        "nodes": nodes,
        "waivers": sorted(waivers.values(), key=lambda w: (w["run"], str(w.get("id")))),
    }


def accept(
    run_dirs: list[Path], out: Path, *, sign_key: Path, keys: list[Ed25519PublicKey]
) -> tuple[Path, dict[str, Any], str]:
    """Verify the runs, write `out/<id>/` (acceptance.json, report.html) and sign it. Returns the folder, the
    record and the signer's fingerprint."""
    from gpucert.acceptance.html import render_acceptance
    from gpucert.acceptance.index import handover_index

    if not run_dirs:
        raise ConfigError("accept needs the run folders to accept: gpucert accept RUN_DIR... --sign-key KEY")
    from gpucert.acceptance.soak import boards_of_run, judged_by, open_soak, require_soak, split_soak_runs

    soak_dirs, run_dirs = split_soak_runs(run_dirs)
    soaks = [open_soak(p, keys) for p in soak_dirs]
    if not run_dirs:
        raise ConfigError("accept needs the certification runs beside the soaks: gpucert accept RUN_DIR... SOAK_DIR...")
    seen = sorted((open_run(p, keys) for p in run_dirs), key=lambda r: (r.started, r.id))
    if len({r.id for r in seen}) != len(seen):
        raise ConfigError("the same run is given twice; give each run folder once")
    specs = sorted({r.verdict.spec for r in seen})
    if len(specs) != 1:
        raise ConfigError(f"the runs certify different specs ({', '.join(specs)}): accept the runs of one spec")
    latest_spec = load_spec(seen[-1].folder.spec_copy)
    now = datetime.now(UTC)
    id_ = run_id(specs[0], now)  # an acceptance record is named as a run is: its time, then its spec
    expected = sum(p.expect.nodes for p in latest_spec.pools)
    record = build_record(seen, expected=expected, spec=specs[0], now=now, id_=id_)
    by_run = {r.id: r.folder for r in seen}
    if soaks or latest_spec.acceptance.soak_hours is not None:
        covering = {n: by_run[v["run"]] for n, v in record["nodes"].items()}
        require_soak(
            record,
            soaks,
            latest_spec.acceptance.soak_hours,
            judged=judged_by(seen[-1].folder),
            boards={n: boards_of_run(f, n) for n, f in covering.items()},
            cert_run=seen[-1].id,
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the acceptance folder here: {exc.strerror}", path=out, key="--out") from None
    folder = out / id_
    for n in range(2, 1000):
        try:
            folder.mkdir()
            break
        except FileExistsError:
            folder = out / f"{id_}-{n}"
    try:
        write_json(folder / RECORD, record)
        index = handover_index({r.id: r.folder for r in seen}, record)
        (folder / REPORT).write_text(render_acceptance(record, index), encoding="utf-8")
        predicate = {k: record[k] for k in ("id", "spec", "created", "result", "totals")}
        predicate["runs"] = {r["run"]: r["certificate"] for r in record["runs"]}
        predicate["nodes"] = {n: v["status"] for n, v in record["nodes"].items()}
        _, fp = attest.sign_folder(folder, sign_key, PREDICATE_TYPE, predicate)
    except (GpucertError, OSError, KeyboardInterrupt):
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)
        raise
    return folder, record, fp
