"""JUnit testcases that say what the verdict says where pytest's items alone would not: a waived check, and a
re-test's carried nodes (which have no test item: carried.py).

A waived check passes the certification with its waiver on record (verdict `waived`, never `skipped`), and JUnit has
no such word. pytest writes an xfail as `<skipped type="pytest.xfail">`, which CI systems count and show as a test
that did not run; gpucert writes the waived item's testcase as a passed one instead (a CI gate does not fail on
it, nor does the verdict), with the property `gpucert_waived` (the waiver ids) and a `<system-out>` carrying the
waived finding and the waiver's terms, and the testsuite's `skipped` stays the count of checks skipped for a failing
cause. Jenkins' JUnit plugin keeps a passed test's system-out and shows it on the test's page (hudson/tasks/junit/
CaseResult.java, possiblyTrimStdio: the head and tail of it by default); GitLab's parser reads the text of a
failure, error or skipped element only (lib/gitlab/ci/parsers/test/junit.rb, create_test_case), so there the waived
check reads as a success, and the testsuite property `gpucert_waived` and the verdict say it was waived. The
testcase keeps its item's name: CI history follows a check across runs by name, waived or not.

A carried node's checks are written as a measured node's are: its passed checks counted in the summaries per node
and family (junit.PassedSummary), each check that did not pass as the testcase its test item would be (a per-GPU
check one per check and node, naming each GPU that did not pass; any other check one per check), with its message.
Their testcases are named `gpucert.carried.<family>` / `<check>[<node>]` (no test item exists to name them), with
the property `gpucert_carried_from` (the run the node was carried from), so CI counts the same testcases, failures
and skips as for a run that measured every node."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal

import pytest

from gpucert.plan.checks import CheckKey, CheckStatus, Finding, family_of
from gpucert.pytest.gpus import GpuChecks
from gpucert.pytest.junit import _xml

if TYPE_CHECKING:
    from gpucert.pytest.context import RunContext
    from gpucert.pytest.junit import PassedSummary

__all__ = ["WAIVED_PROPERTY", "WaivedCases", "carried_cases", "say_waived"]

WAIVED_PROPERTY = "gpucert_waived"
CARRIED_PROPERTY = "gpucert_carried_from"


def say_waived(xml: Any, reporter: Any, waivers: Iterable[str], text: str) -> None:
    """Make a testcase pytest wrote as an xfail a passed one that says its waiver. _pytest/junitxml.py (pytest
    9.1.1): `_NodeReporter.append_skipped` appends `<skipped type="pytest.xfail">` to `nodes` and counts
    `stats["skipped"]`, which the testsuite's `skipped` is written from; a passed testcase has no child of its own."""
    from _pytest.junitxml import bin_xml_escape

    xfails = [n for n in reporter.nodes if n.tag == "skipped" and n.get("type") == "pytest.xfail"]
    if xfails:  # else it was written passed already (a carried check's)
        reporter.nodes[:] = [n for n in reporter.nodes if all(n is not x for x in xfails)]
        xml.stats["skipped"] -= len(xfails)
        xml.stats["passed"] += 1
    reporter.add_property(WAIVED_PROPERTY, ", ".join(sorted(set(waivers))))
    out = ET.Element("system-out")
    out.text = bin_xml_escape(f"WAIVED: {text}")
    reporter.nodes.append(out)


class WaivedCases:
    """After LogXML's report of an item: a waived item's testcase, written as an xfail, made a passed testcase
    that says its waiver. A plain hook, trylast (after LogXML's): a wrapper's generator per report was a cost per
    item at fleet scale."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "gpucert", None)
        if data is None or report.when != "call" or not report.skipped or not hasattr(report, "wasxfail"):
            return
        xml = _xml(self.config)
        reporter = None if xml is None else xml.node_reporters.get((report.nodeid, getattr(report, "node", None)))
        if reporter is None:
            return
        waivers = [c["finding"].get("waiver") or "" for c in data["checks"] if c["finding"]["status"] == "waived"]
        say_waived(xml, reporter, waivers, str(report.wasxfail))


_Group = tuple[str, str, str | None, bool]  # check, node, detail, whether per GPU: what one test item decides


def _not_passed(ctx: RunContext, passed: PassedSummary | None) -> list[tuple[_Group, list[CheckKey]]]:
    """Count the carried nodes' passed checks in `passed`'s summaries (by node and family, as PassedSummary counts
    an item's), and return the groups of their keys a test item would have decided (a GPU's check with its node's
    other GPUs, one item per check and node: collection.py; any other check on its own) that did not all pass, in
    order. A re-test of 3 nodes of 1,024 carries ~185,000 checks, of which a few did not pass: the checks are
    counted per node and check family in C (a Counter over the keys' nodes and families), those that did not pass
    taken off, and only the nodes with one are grouped key by key."""
    carried, passing = ctx.carried, CheckStatus.PASS
    odd = [k for k, o in ctx.outcomes.items() if o.finding.status is not passing and k.node in carried]
    if passed is not None:
        families = _Families()
        per_family = Counter(_node_and_family(ctx.outcomes, families))
        per_family.subtract(_node_and_family(odd, families))
        for (node, family), n in per_family.items():
            if n and node in carried:  # a family with no passed key on the node is in no summary
                passed.counts[(node, family)] += n
    if not odd:
        return []
    bad = {_group_of(k) for k in odd}
    groups: dict[_Group, list[CheckKey]] = defaultdict(list)
    nodes = {k.node for k in odd}
    for key in [k for k in ctx.outcomes if k.node in nodes]:
        group = _group_of(key)
        if group in bad:
            groups[group].append(key)
    return [(g, sorted(groups[g], key=CheckKey.sort_key)) for g in sorted(bad, key=lambda g: (g[1], g[0], g[2] or ""))]


class _Families(dict[str, str]):
    """Each check's family, found on its first lookup."""

    def __missing__(self, check: str) -> str:
        found = self[check] = family_of(check).value
        return found


_node, _check = attrgetter("node"), attrgetter("check")


def _node_and_family(keys: Collection[CheckKey], families: _Families) -> Iterator[tuple[str | None, str]]:
    """Each key's node and check family, by C iterators."""
    return zip(map(_node, keys), map(families.__getitem__, map(_check, keys)), strict=True)


def _group_of(key: CheckKey) -> _Group:
    return (key.check, key.node or "", key.detail, key.gpu is not None)


def carried_cases(config: pytest.Config, ctx: RunContext, passed: PassedSummary | None) -> int:
    """Write the carried nodes' checks into junit.xml: passed ones counted in `passed`'s summaries, the others a
    testcase per item they would have been. Returns how many testcases it wrote."""
    xml = _xml(config)
    if xml is None or not ctx.carried:
        return 0
    sources = ctx.retest.carried if ctx.retest is not None else {}
    written = 0
    for (check, node, detail, of_gpus), group in _not_passed(ctx, passed):
        findings = [ctx.outcomes[k].finding for k in group]
        source = sources.get(node)
        file = f"{source.measured_in}/{source.file}" if source is not None else "gpucert"
        where = f"{node}/{detail}" if detail else node
        words = GpuChecks(check, node, tuple(findings)).summary() if of_gpus else findings[0]
        report = _report(f"gpucert/carried/{family_of(check).value}::{check}[{where}]", file, words, of_gpus)
        xml.pytest_runtest_logreport(report)
        reporter = xml.node_reporters[(report.nodeid, None)]
        if source is not None:
            reporter.add_property(CARRIED_PROPERTY, source.run)
        if words.status is CheckStatus.WAIVED:
            said = f"[{words.check}] {words.message}"
            say_waived(xml, reporter, [f.waiver for f in findings if f.waiver], said)
        written += 1
    return written


def _report(nodeid: str, file: str, words: Finding, of_gpus: bool) -> pytest.TestReport:
    """The report the check's test item would have made (outcomes.py): failed for a failure or an error (the
    call raised CheckFailed), skipped for a skip with its failing cause, passed for a waiver (then say_waived)."""
    text = f"[{words.check}] {words.message}"
    longrepr: str | tuple[str, int, str] | None = None
    outcome: Literal["passed", "failed", "skipped"] = "passed"
    if words.status in (CheckStatus.FAIL, CheckStatus.ERROR):
        outcome, longrepr = "failed", text
    elif words.status is CheckStatus.SKIP:
        why = text if of_gpus else f"{words.message} (follows from {words.cause})"
        outcome, longrepr = "skipped", (file, 0, f"Skipped: {why}")
    return pytest.TestReport(
        nodeid=nodeid, location=(file, None, nodeid), keywords={}, outcome=outcome, longrepr=longrepr, when="call"
    )
