"""Signing a run reads each file once (issue 28: a re-test's fixed cost). The readiness check asks each node
document's target, and the statement needs each file's digest: both come from one reading, so a fleet's documents
are no longer read and hashed twice (1,024 x 8: 79 MB), and what the check judged is what the signature covers.
One 2 x 2 fleet, certified unsigned, serves every case."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from gpucert.cli.main import main
from gpucert.errors import EvidenceError
from gpucert.measure import evidence
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest

from .conftest import fleet_doc, spec_doc


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An unsigned certification of a 2 x 2 fleet (health only) and a signing key."""
    work = tmp_path_factory.mktemp("sign-once")
    assert main(["keygen", str(work / "keys")]) == 0
    doc = spec_doc(probes=["health"])
    doc["certify"].pop("multinode")
    doc["expect"].update(nodes=2, gpusPerNode=2)
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=2, gpus=2)))
    (work / "spec.yaml").write_text(yaml.safe_dump(doc))
    assert main(["certify", str(work / "spec.yaml"), "--reports", str(work / "reports"), "-q"]) == 0
    (run,) = [p for p in (work / "reports").iterdir() if not p.name.startswith(".")]
    return run, work / "keys" / "gpucert.key"


def _copy(certified: tuple[Path, Path], tmp_path: Path) -> tuple[RunFolder, list[NodeEvidence]]:
    """A copy of the run, its node documents validated and held (as the evaluation that just wrote it holds them)."""
    run = tmp_path / "run"
    shutil.copytree(certified[0], run)
    folder = RunFolder(run.resolve())
    return folder, [evidence.read_evidence(p) for p in folder.evidence_files()]


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The node documents read through evidence's reader from here on."""
    read: list[str] = []
    real = evidence.read_bytes

    def counted(path: Path, **kw: str) -> bytes:
        read.append(path.name)
        return real(path, **kw)

    monkeypatch.setattr(evidence, "read_bytes", counted)
    return read


def test_a_held_node_document_is_checked_by_the_digest_it_is_signed_with(
    certified: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, held = _copy(certified, tmp_path)
    read = _reads(monkeypatch)
    path, _ = attest.sign_run(folder.path, certified[1], rederive=False)
    assert len(held) == 2
    assert read == []  # before, RunFolder.check read (and hashed) each of them for its target
    statement = json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))
    signed = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    for doc in folder.evidence_files():  # the digests are of the bytes there now
        assert signed[f"evidence/{doc.name}"] == hashlib.sha256(doc.read_bytes()).hexdigest()
    assert attest.verify_run(folder.path, certified[1].with_suffix(".pub")).ok


def test_a_node_document_changed_after_it_was_held_is_read_and_judged_as_it_is_now(
    certified: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model held for the old bytes is not the document's: its new digest finds nothing held, so it is read,
    and its target, now another's, refuses the signature."""
    folder, held = _copy(certified, tmp_path)
    doc = folder.evidence_files()[0]
    edited = json.loads(doc.read_bytes())
    edited["target"] = "kubernetes"
    doc.write_text(json.dumps(edited))
    read = _reads(monkeypatch)
    with pytest.raises(EvidenceError, match="evidence of target 'kubernetes'"):
        attest.sign_run(folder.path, certified[1], rederive=False)
    assert len(held) == 2  # the old model still held
    assert doc.name in read
    assert not folder.envelope_path.exists()
