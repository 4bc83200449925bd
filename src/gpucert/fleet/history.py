"""Each node's performance history: per GPU (by serial) and metric, the median, spread and sample count of every
signed certification and recertification, with the run, its time, its certificate and the driver and firmware.

The store is `<reports>/.history/<spec>/<node>.jsonl`, one line per run of the node, appended after the run is
signed. An entry is evidence only as far as its run stands behind it: `verify_entry` finds the run, checks its
certificate is the one the entry names and is signed by a key given, that the node's evidence is the file that
certificate signed, and recomputes the figures; an entry that fails any of these is refused, and the reason is
said. History of another spec or SKU baseline is never compared; a board whose serial changed starts a new history
(`board_history` says it was replaced).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from gpucert.errors import ConfigError, EvidenceError
from gpucert.evaluate.stats import mad, median
from gpucert.files import write_atomic
from gpucert.plan.history_records import HISTORY_SCHEMA, SNAPSHOT_SCHEMA, Figure, GpuEntry, HistoryEntry
from gpucert.plan.layout import run_id_time
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.spec.cluster import DEFAULT_POOL
from gpucert.spec.handover import sha256_of
from gpucert.spec.names import NameError_, check_node_name, inside

__all__ = [
    "HISTORY_DIR",
    "HISTORY_SCHEMA",
    "HistoryEntry",
    "entry_of",
    "history_path",
    "load_history",
    "read_entries",
    "record_run",
    "snapshot",
    "use_history",
    "verify_entry",
]

HISTORY_DIR = ".history"
MAD_TO_SD = 1.4826


def _figures(samples: Sequence[float]) -> Figure:
    m = median(samples)
    return Figure(median=m, spread=MAD_TO_SD * mad(samples, m) / m if m else 0.0, n=len(samples))


def _pool_of(folder: RunFolder, node: str) -> str:
    try:
        nodes = folder.read_verdict().get("nodes") or {}
    except EvidenceError:
        return DEFAULT_POOL
    pool = (nodes.get(node) or {}).get("pool") if isinstance(nodes.get(node), dict) else None
    return pool if isinstance(pool, str) else DEFAULT_POOL


def entry_of(folder: RunFolder, node: str, certificate: str) -> HistoryEntry | None:
    """The node's history entry from a run folder (None when the run measured nothing of it)."""
    ev = folder.read_evidence(node)
    if ev is None or not ev.collected:
        return None
    pool = _pool_of(folder, node)
    try:
        copy = folder.baseline_copy_for(pool)
        baseline = sha256_of(copy) if copy.is_file() else None
    except NameError_:
        baseline = None
    at = run_id_time(folder.id)
    gpus = [
        GpuEntry(
            index=g.index,
            serial=g.serial,
            firmware=g.vbios,
            metrics={m: _figures(meas.samples) for m, meas in sorted(g.measurements.items()) if meas.samples},
        )
        for g in ev.gpus
    ]
    return HistoryEntry(
        spec=folder.spec_name() or "",
        baseline=baseline,
        node=node,
        pool=pool,
        run=folder.id,
        time=at.strftime("%Y-%m-%dT%H:%M:%SZ") if at is not None else ev.finished,
        certificate=certificate,
        evidence=attest.sha256_file(folder.evidence_path(node)),
        driver=ev.system.driver_version if ev.system is not None else None,
        gpus=gpus,
    )


def history_path(reports: Path, spec: str, node: str) -> Path:
    try:
        check_node_name(node)
        return inside(inside(reports / HISTORY_DIR, spec), f"{node}.jsonl")
    except NameError_ as exc:
        raise ConfigError(f"no history file can be named for it: {exc}", key="NODE") from None


def record_run(folder: RunFolder, reports: Path) -> list[Path]:
    """Append each measured node's entry of a signed run to its history; an unsigned run adds nothing (its figures
    could not be checked later). Returns the history files written."""
    certificate = attest.certificate_digest(folder.path)
    spec = folder.spec_name()
    if certificate is None or spec is None:
        return []
    written = []
    for path in sorted(folder.evidence_dir.glob("*.json")) if folder.evidence_dir.is_dir() else []:
        entry = entry_of(folder, path.stem, certificate)
        if entry is None:
            continue
        out = history_path(reports, spec, entry.node)
        if any(e.run == entry.run for e in read_entries(out)[0]):
            continue  # recorded already (a run signed again)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry.model_dump(mode="json", by_alias=True), sort_keys=True) + "\n")
        written.append(out)
    return written


def read_entries(path: Path) -> tuple[list[HistoryEntry], dict[str, str]]:
    """The entries of one node's history file, oldest first (none when it does not exist), and each line that is
    not an entry, set aside by "line N" with why: a run reads what it can and says what it could not."""
    if not path.is_file():
        return [], {}
    out, bad = [], {}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = HistoryEntry.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            bad[f"line {i}"] = f"{path}:{i}: not a history entry ({first['msg']}{f' at {key}' if key else ''})"
            continue
        stray = _stray(entry, path)
        if stray:
            bad[f"line {i}"] = f"{path}:{i}: {stray}"
        else:
            out.append(entry)
    return sorted(out, key=lambda e: e.time), bad


def _stray(entry: HistoryEntry, path: Path) -> str | None:
    """Why an entry does not belong in the file it was read from (None when it does): a node's file
    (SPEC/NODE.jsonl) holds only that node's entries of that spec, so a renamed file or lines appended from
    another history are never taken for the node's own past (nor for a board swap)."""
    node, spec = path.stem, path.parent.name
    if entry.node == node and entry.spec == spec:
        return None
    return (
        f"not an entry of this file (its node is {entry.node} and spec {entry.spec}; this is the history of {node} "
        f"under spec {spec}): a renamed file or a line copied from another history, it belongs in "
        f"{path.parent.parent / entry.spec / f'{entry.node}.jsonl'}"
    )


def load_history(path: Path) -> list[HistoryEntry]:
    """The entries of one node's history file, oldest first; none when it does not exist. A line that is not an
    entry is a ConfigError naming the file and line."""
    entries, bad = read_entries(path)
    if bad:
        where, why = next(iter(bad.items()))
        raise ConfigError(
            f"{why.split(': ', 1)[1]}; remove the line, history is rebuilt by certifying again",
            path=path,
            line=int(where.removeprefix("line ")),
        )
    return entries


def verify_entry(entry: HistoryEntry, reports: Path, keys: Sequence[Ed25519PublicKey]) -> str | None:
    """Why the entry cannot be used (None when its signed run stands behind every figure in it)."""
    try:
        run_dir = inside(reports, entry.run)
    except NameError_ as exc:
        return f"it names no run folder ({exc})"
    if not (run_dir / attest.ENVELOPE).is_file():
        return f"its run {entry.run} is not under {reports}, or is not signed"
    if attest.certificate_digest(run_dir) != entry.certificate:
        return f"it names certificate {entry.certificate}, but run {entry.run}'s is another"
    if not keys:
        return f"no key was given to check run {entry.run}'s signature (--sign-key or --key PUB)"
    env = attest.read_envelope(run_dir / attest.ENVELOPE)
    if not any(c.verified_by for c in env.check(list(keys))):
        return f"run {entry.run}'s certificate is signed by none of the keys given"
    folder = RunFolder(run_dir)
    evidence = folder.evidence_path(entry.node)
    name = evidence.relative_to(folder.path).as_posix()
    digest = attest.sha256_file(evidence) if evidence.is_file() else None
    if digest is None or env.signed_digests().get(name) != digest or digest != entry.evidence:
        return f"run {entry.run}'s {name} is not the file its certificate signed and the entry names"
    again = entry_of(folder, entry.node, entry.certificate)
    if again is None or again.gpus != entry.gpus or again.driver != entry.driver:
        return f"its figures are not those run {entry.run} measured (edited)"
    return None


def snapshot(reports: Path, spec: str, nodes: Sequence[str], keys: Sequence[Ed25519PublicKey]) -> dict[str, object]:
    """What a run is judged against: each node's history entries (of `spec`) verified against their signed runs
    now, and those refused with the reason; nodes without history are left out. Written into the run folder
    (inputs/history.json) and signed with it, so the run's verdict can be re-derived from the folder alone."""
    out: dict[str, object] = {}
    for node in nodes:
        read, damaged = read_entries(history_path(reports, spec, node))
        entries = [e for e in read if e.spec == spec]
        if not entries and not damaged:
            continue
        reasons = {e.run: verify_entry(e, reports, keys) for e in entries}
        refused: dict[str, str] = dict(damaged)
        refused.update((run, why) for run, why in reasons.items() if why is not None)
        out[node] = {
            "entries": [e.model_dump(mode="json", by_alias=True) for e in entries if reasons[e.run] is None],
            "refused": refused,
        }
    return {"schema": SNAPSHOT_SCHEMA, "spec": spec, "nodes": out}


def use_history(
    folder: RunFolder, reports: Path, spec: str, keys: Sequence[Ed25519PublicKey], say: Callable[[str], None]
) -> None:
    """Put the history of the run's nodes, verified with `keys`, into the run (inputs/history.json) for the
    `drift` checks. Without a key nothing can be verified: no history is used, and that is said."""
    nodes = folder.read_inventory().names
    if not keys:
        if any(history_path(reports, spec, n).is_file() for n in nodes):
            say("  history        not used: its entries are checked against their signed runs (pass --sign-key)")
        return
    doc = snapshot(reports, spec, nodes, keys)
    if doc["nodes"]:
        folder.history_copy.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(folder.history_copy, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    for node, held in sorted(doc["nodes"].items()):  # type: ignore[attr-defined]
        for what, why in sorted(held["refused"].items()):
            say(f"  history        {node}: {what} refused, not compared: {why}")
