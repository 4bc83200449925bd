"""What the run says in pytest's terminal (the gpucert section after pytest's summary) and in JUnit (testsuite
properties and a testcase named by the run's kind, `gpucert::certification` for a certification): the same verdict
as verdict.json, in their words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucert.report.summary import summary_lines
from gpucert.report.verdict import headline, headline_parts
from gpucert.report.verdict_model import Verdict

__all__ = ["WRITTEN", "tell_junit", "terminal_summary"]

# the verdict as the session wrote it to verdict.json (set only once it is on disk): what `gpucert certify` prints
WRITTEN = pytest.StashKey[Verdict]()


def terminal_summary(tr: Any, verdict: Verdict, left_out: int, verdict_path: Path) -> None:
    """The gpucert section: the headline and counts, each failed and waived check, and what did not run."""
    tr.section("gpucert", sep="=", bold=True, red=not verdict.passed, green=verdict.passed)
    for line in summary_lines(verdict, shout=True, left_out=left_out, verdict_path=verdict_path):
        tr.write_line("  " * line.indent + line.text)


def tell_junit(config: pytest.Config, verdict: Verdict) -> None:
    """The result and coverage as JUnit testsuite properties, and the certification as one more testcase, so a
    CI system that reads only junit.xml sees a failed or incomplete certification fail."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    c, s = verdict.coverage, verdict.summary
    for name, value in (
        ("gpucert_kind", verdict.what),
        ("gpucert_result", verdict.result),
        ("gpucert_required", c.required),
        ("gpucert_ran", c.ran),
        ("gpucert_deselected", c.deselected),
        ("gpucert_not_reached", c.not_reached),
        ("gpucert_skipped", s.skipped),
        ("gpucert_waived", s.waived),
        ("gpucert_complete", str(c.complete).lower()),
    ):
        xml.add_global_property(name, value)
    ok = verdict.passed
    message = f"{headline(verdict)}: {c.ran} of {c.required} required checks ran, {s.failed} failed, {s.errors} errors"
    # named by what the run was: a CI page listing "certification passed" for a configure run would read as one
    name = headline_parts(verdict)[0].lower().replace(" ", "-")
    report = pytest.TestReport(
        nodeid=f"gpucert::{name}",
        location=("gpucert", 0, name),
        keywords={},
        outcome="passed" if ok else "failed",
        longrepr=None if ok else message,
        when="call",
    )
    xml.pytest_runtest_logreport(report)
