"""Signed certification: an in-toto Statement v1 over every file of a run folder, in a DSSE envelope (Ed25519).

The buyer checks it offline with standard tools: the DSSE pre-authentication encoding (PAE) is signed raw, so
`openssl pkeyutl -verify -rawin` verifies it, and the subjects are plain sha256 digests. An envelope may carry
several signatures over the same payload (DSSE allows it): the vendor signs, the buyer countersigns, and `verify`
requires a valid signature by each key it is given and reports every signature with the key that made it. An
acceptance folder is signed the same way, with its own predicate.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from gpucert._version import __version__
from gpucert.errors import ConfigError, EvidenceError, GpucertError
from gpucert.files import read_json_object, write_json
from gpucert.plan.records import read_run_info
from gpucert.plan.runfolder import ENVELOPE, RunFolder
from gpucert.report.envelope import PAYLOAD_TYPE, Envelope, SignatureCheck, pae, read_envelope
from gpucert.report.keys import PRIVATE_KEY, PUBLIC_KEY, fingerprint, generate_key, load_private_key, load_public_key
from gpucert.report.verdict import headline as verdict_headline
from gpucert.report.verdict import verdict_problems
from gpucert.report.verdict_model import Verdict, parse_verdict

__all__ = [
    "ENVELOPE",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "PRIVATE_KEY",
    "PUBLIC_KEY",
    "STATEMENT_TYPE",
    "Envelope",
    "SignatureCheck",
    "Verification",
    "certificate_digest",
    "compare_files",
    "countersign",
    "fingerprint",
    "generate_key",
    "load_private_key",
    "load_public_key",
    "pae",
    "read_envelope",
    "sha256_file",
    "sign_folder",
    "sign_run",
    "subjects",
    "verify",
    "verify_run",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://gpucert.io/certification/v1"


def sha256_file(path: Path) -> str:
    return _sha256(path)


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _walk(run_dir: Path) -> tuple[dict[str, Path], list[str], list[str]]:
    """The run folder's files (relative POSIX name -> path; the envelope at its root excepted), its empty folders,
    and what is neither a plain file nor a folder (links, devices): nothing is followed out of the folder.

    By os.scandir, whose entries know their type from the directory listing (no stat per file, where Path's
    is_symlink and is_file made two: a re-test's folder holds a file or two per node of the fleet). A folder that
    cannot be listed is an EvidenceError: os.walk skipped it silently, and a signature or a verification would
    have left its files out without a word."""
    files: dict[str, Path] = {}
    empty: list[str] = []
    odd: list[str] = []
    folders = [(run_dir, "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            raise EvidenceError(f"cannot list {prefix or './'}: {exc.strerror}", path=run_dir) from exc
        if not entries and prefix:
            empty.append(prefix)
        for entry in entries:
            name = prefix + entry.name
            if _is_dir(entry):  # as os.walk sorts them: a link to a folder is a folder here, and odd
                if entry.is_symlink():
                    odd.append(name)
                else:
                    folders.append((Path(entry.path), name + "/"))
            elif not prefix and entry.name == ENVELOPE:
                continue
            elif entry.is_symlink() or not entry.is_file():
                odd.append(name)
            else:
                files[name] = Path(entry.path)
    return dict(sorted(files.items())), sorted(empty), sorted(odd)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether the entry is a folder, a link followed (os.walk's test): one whose target cannot be looked at (a link
    to itself, ELOOP; into a folder that cannot be searched) is not, as os.walk has it (os.py, 3.11: `except OSError:
    is_dir = False`); DirEntry.is_dir raises every OSError but FileNotFoundError. Such a link is odd, never a crash."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def subjects(run_dir: Path) -> dict[str, str]:
    """Every file of the run folder (relative POSIX name -> sha256), the envelope at its root excepted."""
    files, _, odd = _walk(run_dir)
    if odd:
        raise EvidenceError(
            f"not plain files (links are not signed or followed): {', '.join(odd)}; remove them", path=run_dir
        )
    return {name: _sha256(p) for name, p in files.items()}


def _ready_to_sign(folder: RunFolder) -> tuple[Verdict, dict[str, str]]:
    """The run's verdict, when the folder is a completed run whose reports say what its verdict says (EvidenceError
    naming what is wrong otherwise): a hand-edited verdict.json, or a run cut short before its reports were all
    written, is not signed. With it, every file's digest (`subjects`), each file read once: the node documents'
    targets are checked by those digests (RunFolder.check), so the bytes checked are the bytes signed, and a
    re-test's fleet of documents is read and hashed once, not twice (1,024 x 8: 79 MB, ~0.08 s of CPU)."""
    if not folder.verdict_path.exists():
        raise EvidenceError("no verdict.json: only a completed run can be signed", path=folder.path)
    raw = folder.read_verdict()
    problems = verdict_problems(raw)
    if problems:
        raise EvidenceError(f"not a verdict gpucert wrote: {'; '.join(problems)}", path=folder.verdict_path)
    verdict = parse_verdict(raw, folder.verdict_path)
    digests = subjects(folder.path)
    folder.check(digests)
    missing = [p.name for p in (folder.report_path, folder.junit_path, folder.allure_dir) if not p.exists()]
    if missing or not read_run_info(folder).finished:
        raise EvidenceError(
            f"the run did not finish writing its reports ({', '.join(missing) or 'run.json'} missing): a run cut "
            "short is not signed; evaluate it again",
            path=folder.path,
        )
    said = re.search(r'name="gpucert_result" value="([a-z]+)"', folder.junit_path.read_text(encoding="utf-8"))
    html = folder.report_path.read_text(encoding="utf-8")
    if said is None or said.group(1) != verdict.result or escape(verdict_headline(verdict)) not in html:
        raise EvidenceError(
            f"verdict.json says {verdict.result}, but junit.xml ({said.group(1) if said else 'no result'}) or "
            "report.html say otherwise: the folder was edited after its run",
            path=folder.verdict_path,
        )
    return verdict, digests


def _predicate(folder: RunFolder, verdict: Verdict) -> dict[str, Any]:
    run_info = read_run_info(folder)
    # names relative to inputs/: `baseline.yaml`, `baselines/<pool>.yaml` (several pools), `handover.yaml`
    copies = [*folder.baseline_copies(), folder.handover_copy]
    baselines = {p.relative_to(folder.inputs).as_posix(): _sha256(p) for p in copies if p.is_file()}
    spec_file = folder.spec_copy
    extra: dict[str, Any] = {}
    if folder.waivers_copy.is_file():
        extra["waivers"] = {"sha256": _sha256(folder.waivers_copy), "waived": verdict.summary.waived}
    if verdict.retest is not None:
        retest = verdict.retest.to_json()
        extra["retest"] = {
            k: retest[k] for k in ("source", "sourceCertificate", "measured", "carried", "absent") if k in retest
        }
    coverage = verdict.coverage.to_json()
    return {
        "spec": {"name": verdict.spec, "sha256": _sha256(spec_file) if spec_file.exists() else None},
        "baselines": baselines,
        "target": verdict.target,
        # what kind of run this is: only `measure` (and `recertify`) measured the hardware
        "scope": {"mode": folder.mode, "suites": list(folder.suites), "reevaluates": run_info.reevaluates},
        "gpucert": {"version": run_info.gpucert_version or __version__, "commit": run_info.git_commit},
        "run": {"id": verdict.run, "started": run_info.started, "finished": run_info.finished},
        "result": verdict.result,
        "coverage": {k: coverage[k] for k in ("required", "ran", "deselected", "notReached", "complete")},
        "summary": verdict.summary.to_json(),
        "nodes": {n: s.result for n, s in verdict.nodes.items() if not n.startswith("(")},
        **extra,
    }


def certificate_digest(run_dir: Path) -> str | None:
    """`sha256:<hex>` of the run's certificate, the handle a node baseline or a node annotation cites; None unsigned."""
    path = RunFolder(run_dir).envelope_path
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def sign_run(run_dir: Path, key_path: Path, *, replace: bool = False, rederive: bool = True) -> tuple[Path, str]:
    """Write `certificate.intoto.json` into the run folder; returns its path and the signer's fingerprint.

    Signed only when its verdict follows from its evidence (VerdictContradicted naming the differences otherwise;
    `rederive=False` only where this process built the verdict from the same evidence a moment before). A folder
    that holds a certificate already is signed again only with `replace` and only while every file still matches it
    (a folder changed after it was signed is a new run's to certify, not a signature's to cover)."""
    run_dir = run_dir.resolve()
    folder = RunFolder(run_dir)
    if key_path.resolve().is_relative_to(run_dir):
        raise ConfigError("the private key must not live inside the run folder it signs", path=key_path)
    load_private_key(key_path)  # a bad key is said before the folder is judged
    verdict, digests = _ready_to_sign(folder)
    if folder.envelope_path.exists() or folder.envelope_path.is_symlink():
        _may_sign_again(folder, replace)
    from gpucert.report.derivation import VerdictContradicted, verdict_differences  # the rules: loaded when used

    if rederive and (differences := verdict_differences(folder, verdict)):
        raise VerdictContradicted(differences, path=folder.path)
    return sign_folder(run_dir, key_path, PREDICATE_TYPE, _predicate(folder, verdict), digests)


def _may_sign_again(folder: RunFolder, replace: bool) -> None:
    """Refuse to overwrite a run's certificate unless asked (`replace`) and every file still matches it: a changed
    folder would otherwise get a fresh signature over its changes without a word."""
    env = read_envelope(folder.envelope_path)
    wrong = sorted(n for group in compare_files(folder.path, env) for n in group)
    if wrong:
        raise EvidenceError(
            f"is signed already, and {', '.join(wrong[:4])}{' ...' if len(wrong) > 4 else ''} no longer match its "
            "certificate: a folder changed after it was signed is not signed again; certify the evidence anew "
            "(`gpucert evaluate SPEC --evidence DIR` writes a new run folder) and sign that",
            path=folder.path,
        )
    if not replace:
        n = len(env.signatures)
        raise ConfigError(
            f"is signed already ({n} signature{'s' if n != 1 else ''} in {ENVELOPE}): to add yours, `gpucert "
            "countersign`; to replace the certificate by one with this key's signature alone (every other signature "
            "is dropped), `gpucert sign --replace`",
            path=folder.path,
        )


def sign_folder(
    folder: Path,
    key_path: Path,
    predicate_type: str,
    predicate: dict[str, Any],
    digests: dict[str, str] | None = None,
) -> tuple[Path, str]:
    """Sign every file of `folder` (a run or an acceptance folder) with one signature: `certificate.intoto.json`
    at its root, written last. Returns its path and the signer's fingerprint. `digests`: the folder's `subjects`,
    where the caller read them in this signing (sign_run)."""
    folder = folder.resolve()
    if key_path.resolve().is_relative_to(folder):
        raise ConfigError("the private key must not live inside the folder it signs", path=key_path)
    key = load_private_key(key_path)
    signed = subjects(folder) if digests is None else digests
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in signed.items()],
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    payload = json.dumps(statement, indent=1, sort_keys=True).encode()
    fp = fingerprint(key.public_key())
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": fp, "sig": base64.b64encode(key.sign(pae(PAYLOAD_TYPE, payload))).decode()}],
    }
    return write_json(folder / ENVELOPE, envelope), fp


@dataclass
class Verification:
    signature_ok: bool
    fingerprint: str  # the first key's (the one `verify_run` is given)
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    statement: dict[str, Any] = field(default_factory=dict)

    envelope: str = ENVELOPE
    odd: list[str] = field(default_factory=list)
    signatures: list[SignatureCheck] = field(default_factory=list)
    unsigned_keys: list[str] = field(default_factory=list)  # given keys no signature was made with
    inconsistent: list[str] = field(default_factory=list)
    contradicted: list[str] = field(default_factory=list)  # where the verdict says what its evidence does not
    not_rederived: str | None = None  # why the verdict was not re-derived (made by another gpucert): said, not a fault
    rederived: bool = False  # a run's verdict decided again from its evidence (and contradicted where it differs)
    other: list[str] = field(default_factory=list)  # further problems (carried evidence of a re-test)

    @property
    def ok(self) -> bool:
        bad = self.changed or self.missing or self.added or self.odd or self.inconsistent or self.contradicted
        bad = bad or self.other
        return self.signature_ok and not bad

    def _unsigned(self, fp: str) -> str:
        """Why the key `fp` verifies nothing: no signature even names it (not signed with this key yet: the
        stated key ids are hints, so this is said as what they state), or one names it and does not verify."""
        stated = [s.keyid for s in self.signatures if s.keyid]
        if fp not in stated:
            by = f"{len(self.signatures)} signature{'s' if len(self.signatures) != 1 else ''}"
            named = f" (by {', '.join(stated)})" if stated else ""
            return (
                f"not signed with the key {fp} (yet): {self.envelope} holds {by}{named}, none by this key; have its "
                "holder sign (gpucert countersign for an acceptance record, gpucert sign for a run), or verify with "
                "the key that signed it"
            )
        return (
            f"the signature does not match the key {fp}: {self.envelope} was signed by another key, altered, or "
            "this key's signature was removed; nothing it says can be trusted"
        )

    def problems(self) -> list[str]:
        out = [self._unsigned(fp) for fp in self.unsigned_keys]
        out += [f"changed: {n}" for n in self.changed]
        out += [f"missing: {n}" for n in self.missing]
        out += [f"added: {n}" for n in self.added]
        out += [f"not a plain file: {n}" for n in self.odd]
        out += [f"the signed verdict.json is not one gpucert writes: {why}" for why in self.inconsistent]
        out += [f"the verdict does not follow from the evidence: {why}" for why in self.contradicted]
        out += self.other
        return out


def verify_run(run_dir: Path, pub_path: Path) -> Verification:
    """`verify` with one key."""
    return verify(run_dir, [pub_path])


def verify(folder: Path, pub_paths: list[Path]) -> Verification:
    """Require a valid signature by each key in `pub_paths`, then check every file of the folder against the
    signed subjects. Every signature of the envelope is reported with the given key that made it, if any."""
    keys = [load_public_key(p) for p in pub_paths]
    if not keys:
        raise ConfigError("verify needs the signer's public key: --key PUB (once per signature to require)")
    env = read_envelope(folder / ENVELOPE)
    checks = env.check(keys)
    verified = {c.verified_by for c in checks}
    fps = [fingerprint(k) for k in keys]
    result = Verification(
        signature_ok=all(fp in verified for fp in fps),
        fingerprint=fps[0],
        envelope=str(env.path),
        signatures=checks,
        unsigned_keys=[fp for fp in dict.fromkeys(fps) if fp not in verified],
    )
    if not result.signature_ok:
        return result  # an unverified payload is not read: its subjects and result may be anyone's
    result.statement = env.statement()
    result.changed, result.missing, result.added, result.odd = compare_files(folder, env)
    if result.statement.get("predicateType") == PREDICATE_TYPE:  # a run's certificate: its verdict must be whole
        run = RunFolder(folder)
        raw: dict[str, Any] | None = None
        if run.verdict_path.is_file() and "verdict.json" in env.signed_digests():
            try:
                raw = run.read_verdict()
                result.inconsistent = verdict_problems(raw)
            except EvidenceError as exc:
                result.inconsistent = [str(exc)]
        else:
            result.inconsistent = ["there is no verdict.json"]
        if raw is not None and not (
            result.changed or result.missing or result.added or result.odd or result.inconsistent
        ):
            from gpucert.report.derivation import other_rules, verdict_differences

            result.not_rederived = other_rules(run)
            if result.not_rederived is None:
                try:  # the verdict read above, typed once (verdict_differences would read it again)
                    verdict: Verdict | None = parse_verdict(raw, run.verdict_path)
                except GpucertError:
                    verdict = None  # verdict_differences says why it cannot be re-derived
                result.contradicted = verdict_differences(run, verdict).named()
                result.rederived = True
    return result


def compare_files(folder: Path, env: Envelope) -> tuple[list[str], list[str], list[str], list[str]]:
    """The folder's files against the envelope's subjects: changed, missing, added (empty folders too), and what
    is not a plain file."""
    signed = env.signed_digests()
    files, empty, odd = _walk(folder)
    actual = {name: _sha256(p) for name, p in files.items()}
    changed = sorted(n for n in signed if n in actual and actual[n] != signed[n])
    missing = sorted(n for n in signed if n not in actual)
    added = sorted([*(n for n in actual if n not in signed), *empty])
    return changed, missing, added, odd


def countersign(folder: Path, key_path: Path) -> tuple[Path, str]:
    """Add a signature by `key_path` over the same payload (DSSE allows several): the buyer's endorsement of
    exactly what was signed. Refused when a file no longer matches the statement, or the key signed already."""
    folder = folder.resolve()
    if key_path.resolve().is_relative_to(folder):
        raise ConfigError("the private key must not live inside the folder it signs", path=key_path)
    key = load_private_key(key_path)
    env = read_envelope(folder / ENVELOPE)
    fp = fingerprint(key.public_key())
    if any(c.verified_by for c in env.check([key.public_key()])):
        raise ConfigError(f"{env.path} is already signed by this key ({fp})", path=key_path)
    wrong = [n for group in compare_files(folder, env) for n in group]
    if wrong:
        raise EvidenceError(
            f"does not match what was signed ({', '.join(sorted(wrong)[:5])}): a countersignature endorses the "
            "signed files as they are; run `gpucert verify` and countersign only a folder that verifies",
            path=folder,
        )
    data = read_json_object(env.path)
    data["signatures"].append(
        {"keyid": fp, "sig": base64.b64encode(key.sign(pae(env.payload_type, env.payload))).decode()}
    )
    return write_json(env.path, data), fp
