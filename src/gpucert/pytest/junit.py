"""JUnit: junit.xml goes into the run folder unless the user names another file, and it says the run's verdict as
testsuite properties and as one more testcase named by the run's kind (`gpucert::certification` for a
certification), so a CI system that reads only junit.xml sees a failed or incomplete certification fail.

At fleet scale one testcase per passed check made junit.xml ~105 bytes a check (72.6 MiB at 4,096 x 8), so the
checks that passed are summarised: one testcase per node and check family (`classname="gpucert.passed.<family>"`,
`name="gpu-node-3: 80 checks passed (health)"`, property `checks` = how many passed checks it stands for); every
check that did not pass keeps its test item's testcase with its message (a per-GPU check's item is one per check
and node: its message has a line for each GPU that did not pass, and the GPUs of it that passed are counted in the
node's summary). CI systems (Jenkins, GitLab) count testcases, so the testsuite's `tests`, `failures`, `errors` and
`skipped` count the testcases present (the summaries, the items that did not pass, the certification's own): a CI
parser that checks them against the testcases finds no mismatch. The number of checks is the property
`gpucert_checks` (with `gpucert_passed`), each summary's name says how many checks it stands for, and the verdict's
coverage properties say the rest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest

from gpucert.plan.checks import CheckKey, CheckStatus, family_of
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict import headline, headline_parts
from gpucert.report.verdict_model import Verdict

__all__ = ["PassedSummary", "default_path", "summary_name", "tell_junit"]


def summary_name(node: str, family: str, checks: int) -> str:
    """A summary testcase's name, which a CI page lists: whose checks, how many it stands for, of which family."""
    return f"{node}: {checks} check{'' if checks == 1 else 's'} passed ({family})"


def default_path(config: pytest.Config, folder: RunFolder) -> None:
    """junit.xml in the run folder, unless --junit-xml named another file; none when `-p no:junitxml` blocked
    pytest's JUnit plugin (its option is not there): the verdict and the other reports are still written."""
    if getattr(config.option, "xmlpath", "") is None:
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
        ("gpucert_checks", s.checks),
        ("gpucert_passed", s.passed),
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


def _xml(config: pytest.Config) -> Any:
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest moved it
        return None
    return config.stash.get(xml_key, None)


class PassedSummary:
    """Takes each passed check's testcase out of pytest's LogXML as its item ends (so neither junit.xml nor the
    controller's memory keeps one per check), and at the session's end adds one testcase per node and check family
    that stands for them. _pytest/junitxml.py (pytest 9.1.1): LogXML keeps a _NodeReporter per item in
    `node_reporters_ordered`, appends it on the item's first report, counts `stats["passed"]` in `append_pass`, and
    writes `tests` from `stats` in its pytest_sessionfinish."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.passing: dict[str, list[CheckKey]] = {}  # nodeid of an item whose checks passed, until its teardown
        self.counts: Counter[tuple[str, str]] = Counter()  # (node or "fleet", family) -> passed checks
        self.seconds: dict[tuple[str, str], float] = {}

    def passed(self, report: pytest.TestReport, decided: list[tuple[CheckKey, CheckStatus]]) -> None:
        """The controller's word on a decisive report: the checks it decided (one, or each GPU's of a `gpus` item).
        An item whose checks all passed (its call passed too) is summarised at its teardown; the GPUs that passed
        in an item that did not are counted in their summary now (the item's own testcase says the others)."""
        keys = [key for key, status in decided if status is CheckStatus.PASS]
        if len(keys) == len(decided) and report.passed and report.when == "call":
            self.passing[report.nodeid] = keys
            return
        for key in keys:
            self.counts[(key.node or "fleet", family_of(key.check).value)] += 1

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None]:
        """Around LogXML's: the passed item's reporter taken before its teardown (LogXML's finalize() empties it),
        and after, the passed check's testcase taken out of junit.xml and counted in its summary."""
        keys = self.passing.pop(report.nodeid, None) if report.when == "teardown" else None
        xml = _xml(self.config) if keys else None
        reporter = None if xml is None else xml.node_reporters.get((report.nodeid, getattr(report, "node", None)))
        yield
        if reporter is not None and keys and report.passed:
            self._drop(xml, reporter, keys)

    def _drop(self, xml: Any, reporter: Any, keys: list[CheckKey]) -> None:
        ordered = xml.node_reporters_ordered
        # the item's reporter is the last one appended, except under xdist, whose reports interleave
        last = max(len(ordered) - 256, 0)
        at = next((i for i in range(len(ordered) - 1, last - 1, -1) if ordered[i] is reporter), None)
        testcase = reporter.to_xml()
        if at is None or len(testcase):  # not found, or it says more than the pass (properties, captured output)
            return
        del ordered[at]
        xml.stats["passed"] -= 1
        group = (keys[0].node or "fleet", family_of(keys[0].check).value)  # an item's checks: one node, one check
        self.counts[group] += len(keys)
        self.seconds[group] = self.seconds.get(group, 0.0) + float(testcase.get("time", 0))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """Before LogXML writes: one passed testcase per node and family, in node order."""
        xml = _xml(self.config)
        if xml is None:
            return
        from _pytest.junitxml import _NodeReporter

        for (node, family), n in sorted(self.counts.items()):
            reporter = _NodeReporter(f"gpucert.passed.{family}::{node}", xml)
            reporter.attrs = {"classname": f"gpucert.passed.{family}", "name": summary_name(node, family, n)}
            reporter.duration = self.seconds.get((node, family), 0.0)
            reporter.add_property("checks", n)
            xml.node_reporters_ordered.append(reporter)
            xml.stats["passed"] += 1
        self.counts.clear()
