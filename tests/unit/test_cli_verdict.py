"""`gpucert certify` prints the verdict the session built (issue 24 step 2): not verdict.json read back from disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.cli import certify as cli
from gpucert.cli.suites import KeepVerdict
from gpucert.errors import IncompleteRunError
from gpucert.plan.runfolder import RunFolder
from gpucert.report.terminal import WRITTEN

from .test_verdict_model import _built


def test_the_command_prints_the_verdict_it_is_given_without_reading_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = RunFolder(tmp_path / "run")  # no verdict.json on disk: nothing to read back
    assert cli._print_verdict(_built(), folder) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    assert "Certification FAIL: 6 of 6 required checks ran" in out
    assert "down [not ready]" in out  # a message is printed as written, not taken for rich markup
    assert "waived" in out


def test_no_verdict_from_the_session_is_an_incomplete_run(tmp_path: Path) -> None:
    with pytest.raises(IncompleteRunError, match=r"wrote no verdict\.json"):
        cli._print_verdict(None, RunFolder(tmp_path))


def test_the_verdict_is_kept_as_the_session_wrote_it() -> None:
    kept = KeepVerdict()
    config = pytest.Config.__new__(pytest.Config)  # only its stash is read
    config.stash = pytest.Stash()
    kept.pytest_unconfigure(config)
    assert kept.verdict is None  # a session that wrote none
    config.stash[WRITTEN] = verdict = _built()
    kept.pytest_unconfigure(config)
    assert kept.verdict is verdict
