"""What the run says in pytest's terminal (the gpucert section after pytest's summary): the same verdict as
verdict.json, in its words. JUnit's are gpucert.pytest.junit's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucert.report.summary import summary_lines
from gpucert.report.verdict_model import Verdict

__all__ = ["KEPT", "WRITTEN", "terminal_summary"]

# the verdict as the session wrote it to verdict.json (set only once it is on disk): what `gpucert certify` prints
WRITTEN = pytest.StashKey[Verdict]()
# a re-test's line on the signed decisions its carried nodes kept (acceptance/retest_kept.py Kept.said)
KEPT = pytest.StashKey[str]()


def terminal_summary(tr: Any, verdict: Verdict, left_out: int, verdict_path: Path) -> None:
    """The gpucert section: the headline and counts, each failed and waived check, and what did not run."""
    tr.section("gpucert", sep="=", bold=True, red=not verdict.passed, green=verdict.passed)
    for line in summary_lines(verdict, shout=True, left_out=left_out, verdict_path=verdict_path):
        tr.write_line("  " * line.indent + line.text)
