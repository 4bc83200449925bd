"""What a re-test's preparation costs per carried node in file operations (issue 28): a carried document is a hard
link to the signed file where the file system allows (a copy otherwise, byte for byte either way), a new node file's
folder is resolved once (not each name: the writers replace a name, never follow it), and the one atomic writer
makes a folder only where it is missing and removes its temporary only where the write failed."""

from __future__ import annotations

import errno
import os
from datetime import timedelta
from pathlib import Path

import pytest

from gpucert import files
from gpucert.evaluate.view import RunView
from gpucert.measure.evidence import write_document
from gpucert.plan.inventory import Inventory
from gpucert.plan.runfolder import RunFolder
from gpucert.spec import names
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import load_spec
from tests.unit.test_retest import NOW, evidence
from tests.unit.test_simulated_fabric import BASELINE, ROOT


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "run1" / "evidence" / "n1.json"
    src.parent.mkdir(parents=True)
    src.write_bytes(evidence("n1").model_dump_json(by_alias=True).encode())
    return src


def test_a_carried_document_is_a_hard_link_to_the_signed_file(tmp_path: Path) -> None:
    src = _source(tmp_path)
    folder = RunFolder(tmp_path / "run2")
    path = folder.carry_evidence("n1", src)  # its evidence/ not made yet: made, then linked
    assert path == folder.evidence_path("n1")
    assert path.read_bytes() == src.read_bytes()
    assert path.stat().st_ino == src.stat().st_ino  # one file, two names: nothing read or written
    assert folder.read_evidence("n1") == evidence("n1")
    assert not list(folder.path.rglob(".*.tmp"))


@pytest.mark.parametrize("why", [errno.EXDEV, errno.EPERM, errno.EMLINK])
def test_where_no_hard_link_can_be_made_the_document_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: int
) -> None:
    """Another file system (EXDEV), one without hard links or a source the user may not link (EPERM: Linux's
    protected_hardlinks), a file at its link limit (EMLINK): a copy, byte for byte, of its own."""
    src = _source(tmp_path)

    def cannot(*_: object, **__: object) -> None:
        raise OSError(why, os.strerror(why))

    monkeypatch.setattr(os, "link", cannot)
    folder = RunFolder(tmp_path / "run2")
    path = folder.carry_evidence("n1", src)
    assert path.read_bytes() == src.read_bytes()
    assert path.stat().st_ino != src.stat().st_ino
    assert not list(folder.path.rglob(".*.tmp"))


def test_a_name_already_there_is_replaced_by_the_carried_document(tmp_path: Path) -> None:
    src = _source(tmp_path)
    folder = RunFolder(tmp_path / "run2")
    folder.evidence_dir.mkdir(parents=True)
    folder.evidence_path("n1").write_text("{}")
    assert folder.carry_evidence("n1", src).read_bytes() == src.read_bytes()


def test_a_symlink_standing_at_a_new_nodes_name_is_replaced_never_written_through(tmp_path: Path) -> None:
    """The name is not looked at before a write: the writers take the name over, so a link planted there to a file
    outside the run leads nowhere (that file is untouched)."""
    src = _source(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text("theirs")
    folder = RunFolder(tmp_path / "run2")
    folder.retest_dir.mkdir(parents=True)
    folder.evidence_dir.mkdir()
    for planted in (folder.evidence_dir / "n1.json", folder.retest_dir / "identity.json"):
        planted.symlink_to(outside)
    folder.carry_evidence("n1", src)
    folder.write_identities([evidence("n1")])
    assert outside.read_text() == "theirs"
    for written in (folder.evidence_dir / "n1.json", folder.retest_dir / "identity.json"):
        assert not written.is_symlink()
    assert folder.read_identity("n1") == evidence("n1")
    assert folder.read_evidence("n1") == evidence("n1")


def test_a_relative_folder_is_resolved_once_from_where_gpucert_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for where in ("a", "b"):
        (tmp_path / where / "evidence").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a")
    calls: list[Path] = []
    resolve = Path.resolve
    monkeypatch.setattr(Path, "resolve", lambda self, strict=False: calls.append(self) or resolve(self, strict))
    folder = RunFolder(Path("."))
    paths = [folder.evidence_path(f"n{i}") for i in range(5)]
    assert paths == [tmp_path / "a" / "evidence" / f"n{i}.json" for i in range(5)]
    assert len(calls) <= 1  # the folder once, not once a file
    monkeypatch.chdir(tmp_path / "b")  # the same relative name, now another folder
    assert folder.evidence_path("n1") == tmp_path / "b" / "evidence" / "n1.json"
    assert names.resolved(Path("evidence")) == (tmp_path / "b" / "evidence").resolve()


def test_the_atomic_writer_makes_a_folder_only_where_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []
    mkdir = Path.mkdir
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: made.append(self) or mkdir(self, *a, **k))
    removed: list[Path] = []
    unlink = Path.unlink
    monkeypatch.setattr(Path, "unlink", lambda self, *a, **k: removed.append(self) or unlink(self, *a, **k))
    deep = tmp_path / "a" / "b" / "doc.json"
    files.write_atomic(deep, "1", durable=False)
    assert made[0] == deep.parent  # missing: made, with its parents
    asked = len(made)
    for i in range(3):
        files.write_atomic(deep.with_name(f"{i}.json"), str(i), durable=False)
    assert len(made) == asked  # there: not asked again
    assert removed == []  # the temporary became the file: nothing to remove
    assert sorted(p.name for p in deep.parent.iterdir()) == ["0.json", "1.json", "2.json", "doc.json"]


def test_a_failed_write_still_removes_its_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_: object) -> None:
        raise OSError(errno.EXDEV, "cannot rename")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError, match="cannot rename"):
        files.write_atomic(tmp_path / "doc.json", "x", durable=False)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_source_is_still_said(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run2")
    with pytest.raises(FileNotFoundError):
        folder.carry_evidence("n1", tmp_path / "run1" / "evidence" / "n1.json")


def test_a_signed_file_reached_by_a_symlink_is_carried_as_its_bytes_not_as_the_link(tmp_path: Path) -> None:
    """carry_evidence's contract (and link_or_copy's): the bytes `source` names, as the copy before hard links gave
    them, whatever the caller hands it. prepare_retest hands it the name `inside` resolved (a symlink in the source's
    evidence/ is followed there, so the file it leads to is linked); a caller handing a symlink got the symlink
    itself, as os.link does not follow one on Linux before CPython 3.14: it calls link(2), which links the symlink
    (python/cpython gh-81793, fixed by PR #132517), and a relative link leads nowhere from another folder."""
    src = _source(tmp_path)
    kept = src.with_name(".n1.signed")
    src.rename(kept)
    src.symlink_to(kept.name)  # relative, inside the source's evidence/: its reader (inside) accepts it
    assert RunFolder(tmp_path / "run1").read_evidence("n1") == evidence("n1")
    folder = RunFolder(tmp_path / "run2")
    path = folder.carry_evidence("n1", src)
    assert not path.is_symlink()  # verify_carried refuses a carried symlink
    assert path.read_bytes() == kept.read_bytes()
    assert folder.read_evidence("n1") == evidence("n1")


@pytest.mark.parametrize("one_document", [True, False], ids=["retest/identity.json", "before: a file a node"])
def test_the_identities_a_retest_read_are_read_back_and_date_the_run(tmp_path: Path, one_document: bool) -> None:
    """The identities are one document (retest/identity.json); a re-test written before it kept one file a node
    (retest/identity/<node>.json), which still reads. Either way the newest of them is the run's time, by which its
    waivers expire (RunView.run_time): a re-test that carried every node was last measured by its identity read."""
    folder = RunFolder(tmp_path / "2027-01-01T00-00-00Z-t")
    folder.path.mkdir()
    folder.write_inventory(Inventory("simulated", ()))
    read = [evidence("n2", finished=NOW - timedelta(days=1)), evidence("n1", finished=NOW)]
    if one_document:
        folder.write_identities(read)
        assert [p.name for p in folder.retest_dir.iterdir()] == ["identity.json"]
    else:
        for ev in read:
            write_document(folder.retest_dir / "identity" / f"{ev.node}.json", ev)
    assert sorted(folder.read_identities(), key=lambda ev: ev.node) == sorted(read, key=lambda ev: ev.node)
    assert folder.read_identity("n2") == read[0]
    assert folder.read_identity("n3") is None
    view = RunView(folder, load_spec(ROOT / "examples" / "clean.yaml"), load_baseline(BASELINE))
    assert view.run_time == NOW
