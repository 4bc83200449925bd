"""What the run says in pytest's terminal (the gpucert section after pytest's summary) and in JUnit (testsuite
properties and a testcase named by the run's kind, `gpucert::certification` for a certification): the same verdict
as verdict.json, in their words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucert.report.verdict import headline, headline_parts, side_notes

__all__ = ["tell_junit", "terminal_summary"]


def terminal_summary(tr: Any, verdict: dict[str, Any], left_out: int, verdict_path: Path) -> None:
    """The gpucert section: the headline and counts, each failed and waived check, and what did not run."""
    c, s = verdict["coverage"], verdict["summary"]
    result = verdict["result"].upper()
    noun, said = headline_parts(verdict)
    tr.section("gpucert", sep="=", bold=True, red=result != "PASS", green=result == "PASS")
    tr.write_line(
        f"{noun.upper()} {said}: {c['ran']} of {c['required']} required checks ran; {s['passed']} passed, "
        f"{s['failed']} failed, {s['errors']} errors, {s['skipped']} skipped for a failing cause"
        + (f", {s['waived']} waived" if s["waived"] else "")
    )
    for f in [f for f in verdict["findings"] if f["status"] in ("fail", "error")][:20]:
        where = f["node"] or "fleet"
        tr.write_line(f"  {f['status'].upper()} {f['check']}@{where}" + ("" if f["gpu"] is None else f"/gpu{f['gpu']}"))
    for f in [f for f in verdict["findings"] if f["status"] == "waived"][:20]:
        w = f["waiver"]
        where = f["node"] + ("" if f["gpu"] is None else f"/gpu{f['gpu']}")
        tr.write_line(
            f"  waived: {f['check']}@{where} by {w['id']} ({w['reason']}; approved by {w['approvedBy']}; "
            f"expires {w['expires']})"
        )
    retest = verdict.get("retest")
    if retest:
        tr.write_line(
            f"  re-test of {retest['source']}: {len(retest['measured'])} nodes measured now, "
            f"{len(retest['carried'])} carried over"
        )
    if not c["complete"]:
        stopped = f" ({c['stopped']})" if c.get("stopped") else ""
        tr.write_line(
            f"  incomplete: {c['deselected']} required checks not collected (-k, --deselect, --lf, or a suite "
            f"left out), {c['notReached']} not reached{stopped}, {c['skippedWithoutCause']} skipped for a cause "
            "that did not run"
        )
        for key in c["missing"][:10]:
            tr.write_line(f"    did not run: {key}")
    if left_out:
        tr.write_line(f"  {left_out} test items the spec does not require were left out")
    for item in c["notRequired"]:
        tr.write_line(f"  not required: {item['check']}: {item['why']}")
    for kind, text in side_notes(verdict):
        tr.write_line(f"  {kind}: {text}")
    tr.write_line(f"  verdict: {verdict_path}")


def tell_junit(config: pytest.Config, verdict: dict[str, Any]) -> None:
    """The result and coverage as JUnit testsuite properties, and the certification as one more testcase, so a
    CI system that reads only junit.xml sees a failed or incomplete certification fail."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    c = verdict["coverage"]
    for name, value in (
        ("gpucert_kind", verdict.get("kind", "certify")),
        ("gpucert_result", verdict["result"]),
        ("gpucert_required", c["required"]),
        ("gpucert_ran", c["ran"]),
        ("gpucert_deselected", c["deselected"]),
        ("gpucert_not_reached", c["notReached"]),
        ("gpucert_skipped", verdict["summary"]["skipped"]),
        ("gpucert_waived", verdict["summary"]["waived"]),
        ("gpucert_complete", str(c["complete"]).lower()),
    ):
        xml.add_global_property(name, value)
    ok = verdict["result"] == "pass"
    message = (
        f"{headline(verdict)}: {c['ran']} of {c['required']} required checks ran, "
        f"{verdict['summary']['failed']} failed, {verdict['summary']['errors']} errors"
    )
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
