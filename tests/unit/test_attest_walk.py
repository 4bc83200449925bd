"""What a signature covers: every plain file of the folder, by os.scandir (report/attest.py `_walk`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.report import attest


def _folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "evidence").mkdir(parents=True)
    (run / "evidence" / "n1.json").write_text("{}")
    (run / "allure-results" / "deep").mkdir(parents=True)  # a folder holding only an empty folder is not empty
    (run / "empty").mkdir()
    (run / "verdict.json").write_text("{}")
    (run / attest.ENVELOPE).write_text("{}")  # the envelope at the root signs the rest: never a subject
    (run / "evidence" / attest.ENVELOPE).write_text("{}")  # one anywhere else is a file like any other
    (run / "to-file").symlink_to(run / "verdict.json")
    (run / "evidence" / "to-folder").symlink_to(run / "empty", target_is_directory=True)
    (run / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(run / "fifo")
    return run


def test_the_walk_finds_every_plain_file_each_empty_folder_and_each_thing_that_is_neither(tmp_path: Path) -> None:
    run = _folder(tmp_path)
    files, empty, odd = attest._walk(run)
    assert files == {
        "evidence/certificate.intoto.json": run / "evidence" / attest.ENVELOPE,
        "evidence/n1.json": run / "evidence" / "n1.json",
        "verdict.json": run / "verdict.json",
    }
    assert list(files) == sorted(files)  # the statement lists subjects in name order
    assert empty == ["allure-results/deep/", "empty/"]
    assert odd == ["dangling", "evidence/to-folder", "fifo", "to-file"]  # never followed out of the folder


def test_a_folder_that_cannot_be_listed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _folder(tmp_path)
    listing = os.scandir

    def scandir(path: Path) -> object:
        if Path(path).name == "evidence":
            raise PermissionError(13, "Permission denied")
        return listing(path)

    monkeypatch.setattr(attest.os, "scandir", scandir)
    with pytest.raises(EvidenceError, match=r"cannot list evidence/: Permission denied"):
        attest._walk(run)


def test_a_link_whose_target_cannot_be_looked_at_is_odd_not_a_crash(tmp_path: Path) -> None:
    # DirEntry.is_dir() follows a link and raises every OSError but FileNotFoundError (CPython 3.11
    # Modules/posixmodule.c, DirEntry_test_mode): a link to itself raises ELOOP. os.walk, which the walk replaced,
    # took such an entry for a file (3.11.7 os.py, walk: `except OSError: is_dir = False`): listed as odd
    run = _folder(tmp_path)
    (run / "evidence" / "loop").symlink_to("loop")
    files, _, odd = attest._walk(run)
    assert "evidence/loop" in odd
    assert "evidence/loop" not in files
    with pytest.raises(EvidenceError, match=r"not plain files .*evidence/loop"):
        attest.subjects(run)
