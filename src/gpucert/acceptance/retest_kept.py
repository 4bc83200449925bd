"""The decisions a re-test keeps from its source run (issue 28: a re-test pays for what it re-measures).

A carried node's check keeps the decision its source run signed (a pass: only a node that passed every check is
carried) when, and only when, deciding it again provably cannot decide otherwise:

1. the same code decided it: the source's run.json records the digest of gpucert's code (resources.code_digest),
   and it is this process's (a source without one, written before it, keeps nothing);
2. the same inputs: every file of the source's inputs/ (its spec, its SKU baselines; but inputs/history.json, which
   only the drift checks read) is byte for byte this run's, by the digests its certificate signed, and neither run
   has waivers (a waiver expires: with waivers every check is decided again);
3. the same node: its evidence is the file the source signed (its digest checked again here), its stack.json and
   inventory.json entries are the source's, and the source's verdict says it passed every check, as many as the
   node must pass now (no failure, error, skip or waiver);
4. the check's rule reads nothing but that node's own evidence, stack and inventory entries and the run's spec and
   baselines: `Rule.local` (evaluate/catalog.py says which families, and why the others are not).

The source's records are copied into retest/source/ when the re-test is prepared (`keep_source_records`); each is
held to the digest the source's certificate (retest/source.intoto.json, the one the re-test record names) signed
for it before anything is kept, and that certificate's signature must have been verified by the key signing the
re-test (the record's `signer`: without --sign-key nothing checks who signed the source, and an envelope anyone
wrote would decide the carried nodes' checks; so a re-evaluation, `gpucert evaluate`, which copies the record with
the re-test's evidence and is given no key, keeps nothing), and the re-test's own certificate covers the copies.
Anything that cannot be read or does not match keeps nothing: those checks are decided by the rules (fail closed to
the slow path, never to a pass the rules would not give).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucert.errors import GpucertError
from gpucert.evaluate.catalog import REGISTRY
from gpucert.evaluate.held import parse_figures, told_of
from gpucert.evaluate.told import Told
from gpucert.evaluate.view import RunView
from gpucert.measure.evidence_held import HeldEvidence
from gpucert.plan import layout
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.records import RetestRecord, RunInfo, parse_record, read_run_info
from gpucert.plan.runfolder import RunFolder
from gpucert.plan.runfolder_paths import link_or_copy
from gpucert.report import attest
from gpucert.report.envelope import read_envelope
from gpucert.report.verdict_model import Group, parse_verdict
from gpucert.resources import code_digest

__all__ = ["KEPT_RECORDS", "Kept", "held_figures", "keep_source_records", "kept_decisions"]

KEPT_RECORDS = (layout.RUN_INFO, layout.VERDICT, layout.STACK, layout.INVENTORY)
HISTORY = f"{layout.INPUTS}/{layout.HISTORY}"  # the GPUs' history: read by the drift checks only, none of them local
WAIVERS = f"{layout.INPUTS}/{layout.WAIVERS}"
PASS = CheckStatus.PASS
UNVERIFIED = (
    "the source's signature was not verified (the re-test is not signed: no --sign-key): a verdict no key is known "
    "to have made decides nothing"
)
REEVALUATED = (
    "a re-evaluation of a re-test's evidence (gpucert evaluate) verifies no signature: the record's signer is the "
    "re-test's word, copied with it, and a source no key verified here decides nothing"
)


def _unverified(folder: RunFolder, record: RetestRecord) -> str | None:
    """Why no key of this run verified the source's certificate, or None: the re-test was not signed (no signer),
    or this is a re-evaluation, whose retest/ was copied from the re-test it re-evaluates (plan/recorded.py) with its
    record: what that record says its own key verified, no key here did (and anyone can write a record)."""
    if record.source.signer is None:
        return UNVERIFIED
    try:
        again = read_run_info(folder).reevaluates is not None
    except GpucertError as exc:
        return f"its run.json cannot be read: {exc}"
    return REEVALUATED if again else None


def keep_source_records(source: RunFolder, folder: RunFolder) -> None:
    """Keep the source run's run.json, verdict.json, stack.json and inventory.json (and figures.json, where it wrote
    one) in the re-test's retest/source/, byte for byte (what `kept_decisions` and `held_figures` hold to the
    source's signed digests): as its carried evidence is kept, a hard link where the file system makes one, else a
    copy (`link_or_copy`; figures.json is 8.8 MB at 1,024 x 8); without an fsync each: the re-test's preparation
    syncs them with its carried copies, before the record that names the source (files.sync)."""
    for name in (*KEPT_RECORDS, layout.FIGURES):
        path = source.path / name
        if path.is_file():
            link_or_copy(path, folder.retest_kept_dir / name)


@dataclass(frozen=True)
class Kept:
    """Which carried nodes keep their local checks' signed decisions, from which run; `refused` says why none are
    kept (the run's gates), `why_not` why a carried node is not (its own)."""

    run: str = ""
    nodes: frozenset[str] = frozenset()
    refused: str | None = None
    why_not: dict[str, str] = field(default_factory=dict)
    # each check id's rule is local (gate 4), asked of the registry once per check id: a re-test's carried checks
    # are ~190,000 keys of a few dozen ids
    _local: dict[str, bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    def said(self) -> str:
        """One line for the command's output: how many carried nodes kept their local checks' signed decisions, or
        why every carried check was decided again (a re-test slower than expected says why)."""
        if self.refused is not None:
            return f"re-test: every carried check decided again by the rules: {self.refused}"
        line = f"re-test: {len(self.nodes)} carried nodes kept their local checks' signed decisions from {self.run}"
        if self.why_not:
            node, why = next(iter(self.why_not.items()))
            more = f" and {len(self.why_not) - 1} more" if len(self.why_not) > 1 else ""
            line += f"; {len(self.why_not)} decided again ({node}: {why}{more})"
        return line

    def keeps(self, key: CheckKey) -> bool:
        """Whether `key` keeps its signed decision: a check of a kept node whose rule is local (gate 4). A check no
        rule decides keeps nothing: decided by the rules, whose error says so (fail closed)."""
        return key.node in self.nodes and self._is_local(key.check)

    def kept_checks(self, node: str, keys: Sequence[CheckKey]) -> frozenset[str]:
        """The check ids of one node's `keys` (each of `node`) that keep their signed decisions there: `keeps` of
        a key is whether its check is one of them (a re-test splits a carried node's keys by their check)."""
        if node not in self.nodes:
            return frozenset()
        return frozenset(check for check in {k.check for k in keys} if self._is_local(check))

    def _is_local(self, check: str) -> bool:
        local = self._local.get(check)
        if local is None:
            try:
                local = REGISTRY.rule_for(check).local
            except ValueError:  # no rule decides it
                local = False
            self._local[check] = local
        return local

    def findings(self, keys: Sequence[CheckKey]) -> list[Finding]:
        """The kept decision of each key (a carried node's kept checks, handed over as the node's list): a pass that
        says where it was decided (no figures: the source's pass messages are in no signed document, and the reports
        show of a passed check its id and GPUs, never its message). The words are those of the key's place (node,
        GPU, detail), the same for each check there: worded once per place (a node's ~90 kept checks are ~10)."""
        said = f": passed in {self.run}, kept: the same evidence, stack, inputs and gpucert code"
        words = {
            (node, gpu, detail): (f"{node}/gpu{gpu}" if gpu is not None else str(node))
            + (f" ({detail})" if detail else "")
            + said
            for node, gpu, detail in {k[1:] for k in keys}
        }
        return [Finding(check, PASS, node, gpu, words[node, gpu, detail]) for check, node, gpu, detail in keys]


class _Unmatched(Exception):
    """A kept record that is not what the source signed."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _inputs(folder: RunFolder) -> dict[str, str]:
    """The run's inputs/ files by their name in the folder (`inputs/spec.yaml`), with their sha256."""
    root = folder.inputs
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    return {p.relative_to(folder.path).as_posix(): attest.sha256_file(p) for p in files}


def _judged_alike(folder: RunFolder, signed: dict[str, str], info: RunInfo) -> str | None:
    """Why the source was not judged as this run is (gates 1 and 2), or None."""
    if info.gpucert_code is None:
        return "the source's run.json records no digest of gpucert's code (a run before it)"
    if info.gpucert_code != code_digest():
        return f"the source was decided by other gpucert code ({info.gpucert_code}, this is {code_digest()})"
    now = {n: d for n, d in _inputs(folder).items() if n != HISTORY}
    then = {n: d for n, d in signed.items() if n.startswith(f"{layout.INPUTS}/") and n != HISTORY}
    if WAIVERS in now or WAIVERS in then:
        return "the run has waivers (a waiver expires): every check is decided again"
    if now != then:
        differ = sorted(n for n in now.keys() | then.keys() if now.get(n) != then.get(n))
        return f"its inputs differ from the source's: {', '.join(differ)}"
    return None


def _records(folder: RunFolder, record: RetestRecord) -> tuple[dict[str, str], dict[str, bytes]]:
    """The source's signed digests and its kept records' bytes, each held to its digest (_Unmatched otherwise)."""
    envelope = read_envelope(folder.retest_source_path)
    if "sha256:" + _sha256(folder.retest_source_path.read_bytes()) != record.source.certificate:
        raise _Unmatched("retest/source.intoto.json is not the certificate the re-test record names")
    signed = envelope.signed_digests()
    kept: dict[str, bytes] = {}
    for name in KEPT_RECORDS:
        data = (folder.retest_kept_dir / name).read_bytes()
        if signed.get(name) != _sha256(data):
            raise _Unmatched(f"retest/source/{name} is not the {name} its source signed")
        kept[name] = data
    return signed, kept


def _source_records(folder: RunFolder, record: RetestRecord) -> tuple[dict[str, str], dict[str, bytes], str | None]:
    """The source's signed digests and kept records (each held to its digest: _Unmatched otherwise), and why it was
    not judged as this run is (gates 1 and 2), or None: what kept decisions and held figures both stand on."""
    signed, kept = _records(folder, record)
    info = parse_record(RunInfo, json.loads(kept[layout.RUN_INFO]), "retest/source/run.json", "a run.json")
    return signed, kept, _judged_alike(folder, signed, info)


def _entries(doc: Any, key: str) -> dict[str, Any]:
    """stack.json's or inventory.json's entry of each node, as written (a dict by node, or a list naming each)."""
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if isinstance(nodes, dict):
        return nodes
    if isinstance(nodes, list):
        return {n[key]: n for n in nodes if isinstance(n, dict) and isinstance(n.get(key), str)}
    return {}


@dataclass(frozen=True)
class _Alike:
    """What a carried node is held to: the source's and this run's entries of it, and what it must pass now."""

    folder: RunFolder
    signed: dict[str, str]
    stack: tuple[dict[str, Any], dict[str, Any]]
    inventory: tuple[dict[str, Any], dict[str, Any]]
    verdict: Mapping[str, Group]
    required: Counter[str | None]

    def why_not(self, node: str, record: RetestRecord) -> str | None:
        """Why the node keeps nothing (gate 3), or None."""
        entry = record.carried[node]
        path = self.folder.evidence_path(node)
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        if not (self.signed.get(entry.file) == entry.sha256 == _sha256(data)):
            return "its evidence is not the file its source signed"
        for what, (then, now) in (("stack.json", self.stack), ("inventory.json", self.inventory)):
            if node not in then or then.get(node) != now.get(node):
                return f"its {what} entry differs from the source's"
        said = self.verdict.get(node)
        if said is None or said.result != "pass" or said.passed != self.required[node]:
            return "the source's verdict does not say it passed every check it must pass now"
        if said.failed or said.errors or said.skipped or said.waived or said.failing or said.waived_checks:
            return "the source's verdict says it did not pass every check"
        return None


def kept_decisions(view: RunView, record: RetestRecord, required: Mapping[str, int] | None = None) -> Kept:
    """Which of the re-test's carried nodes keep their local checks' signed decisions (gates 1 to 3 above; gate 4
    is `Kept.keeps`). Nothing kept, with why, where the source's records cannot be read or do not match.
    `required`: how many checks the plan requires of each carried node, where the caller has counted them (else
    counted here over the whole plan)."""
    run = record.source.run
    if not record.carried:
        return Kept(run, refused="no node was carried")
    folder = view.folder
    if (unverified := _unverified(folder, record)) is not None:
        return Kept(run, refused=unverified)
    try:
        signed, kept, refused = _source_records(folder, record)
        if refused is not None:
            return Kept(run, refused=refused)
        verdict = parse_verdict(json.loads(kept[layout.VERDICT]), "retest/source/verdict.json")
        if verdict.run != run:
            return Kept(run, refused=f"retest/source/verdict.json is run {verdict.run}'s, not {run}'s")
        alike = _Alike(
            folder,
            signed,
            (_entries(json.loads(kept[layout.STACK]), "node"), _entries(_read(folder.stack_path), "node")),
            (_entries(json.loads(kept[layout.INVENTORY]), "name"), _entries(_read(folder.inventory_path), "name")),
            verdict.nodes,
            Counter(k.node for k in view.plan.required) if required is None else Counter(required),
        )
        why_not = {n: why for n in sorted(record.carried) if (why := alike.why_not(n, record)) is not None}
    except (_Unmatched, GpucertError, OSError, ValueError, KeyError) as exc:  # decided by the rules, then
        return Kept(run, refused=f"the source's records cannot be held to its certificate: {exc}")
    return Kept(run, frozenset(record.carried) - why_not.keys(), None, why_not)


def _read(path: Path) -> Any:
    return json.loads(path.read_bytes())


def held_figures(view: RunView, record: RetestRecord | None) -> dict[str, tuple[HeldEvidence, Told]]:
    """The carried nodes whose evidence the re-test holds by its head, with the figures its source derived of it
    (evaluate/held.py), where deriving them again provably gives the same: the source's certificate verified by the
    re-test's key, the same code and inputs (gates 1 and 2), its figures.json the one it signed, and each node's
    entry of the very file carried (its bytes hashed now) under the same asks. Nothing (read every document) where
    any of it does not hold."""
    folder = view.folder
    if record is None or not record.carried or _unverified(folder, record) is not None:
        return {}
    try:
        signed, _kept, refused = _source_records(folder, record)
        path = folder.retest_kept_dir / layout.FIGURES
        if refused is not None or not path.is_file():
            return {}
        data = path.read_bytes()
        if signed.get(layout.FIGURES) != _sha256(data):
            return {}
        evidence = {}
        for node, entry in record.carried.items():
            file = folder.evidence_path(node)
            if signed.get(entry.file) == entry.sha256 and file.is_file() and not file.is_symlink():
                evidence[node] = (file, _sha256(file.read_bytes()))
        return told_of(parse_figures(data, path), evidence, view.pool_name_of, view.peers.asks)
    except (_Unmatched, GpucertError, OSError, ValueError, KeyError):
        return {}
