"""JUnit: junit.xml goes into the run folder unless the user names another file, and it says the run's verdict as
testsuite properties and as one more testcase named by the run's kind (`gpucert::certification` for a
certification), so a CI system that reads only junit.xml sees a failed or incomplete certification fail."""

from __future__ import annotations

import pytest

from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict import headline, headline_parts
from gpucert.report.verdict_model import Verdict

__all__ = ["default_path", "tell_junit"]


def default_path(config: pytest.Config, folder: RunFolder) -> None:
    """junit.xml in the run folder, unless --junit-xml named another file."""
    if config.option.xmlpath is None:
        config.option.xmlpath = str(folder.junit_path)


def tell_junit(config: pytest.Config, verdict: Verdict) -> None:
    """The result and coverage as JUnit testsuite properties, and the certification as one more testcase."""
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
