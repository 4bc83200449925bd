"""Allure results: the certification first; one result per (check, node) that did not pass, with the GPUs as
steps (its failing findings' evidence attached); and per node one result for all its checks that passed
(allure_passed.py), on a run that passed and on one that did not, so the overview counts the nodes the verdict
lists. The files: the certification, one result per node with a passed check (and one for the fleet's own checks),
one per check id and node that did not pass, one attachment per failed, errored or waived check with evidence, and
three fixed files (environment, categories, executor).

allure-pytest writes four files per test item (131,073 files for 32,768 items, measured); a certification of
~10^5 checks groups instead, and keeps every failing GPU's message. Summarising a node's passed checks also keeps
Allure's overview readable: its donut is the share of passed results, and one result per passed check made a FAIL
read as 92.85% green; per node, it reads as the nodes and findings that passed and failed.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import Attachment, Label, Parameter, Status, StatusDetails, TestResult, TestStepResult

from gpucert._version import __version__
from gpucert.errors import ConfigError, EvidenceError, IncompleteRunError
from gpucert.plan.checks import PERFORMANCE_PREFIXES, CheckKey, CheckStatus, Family, check_category, family_of
from gpucert.plan.runfolder import RunFolder
from gpucert.report.allure_history import carry_in
from gpucert.report.allure_notrun import NOT_RUN_CATEGORY, not_run_results
from gpucert.report.allure_passed import passed_on, shown, spoken
from gpucert.report.allure_writer import ResultsLogger
from gpucert.report.verdict import Outcome, headline, headline_parts
from gpucert.report.verdict_model import Verdict
from gpucert.resources import project_root

__all__ = [
    "ResultsLogger",
    "build_html",
    "find_allure",
    "history_of",
    "previous_allure_report",
    "report_name",
    "suite_of",
    "write_allure",
]

_STATUS = {
    CheckStatus.PASS: Status.PASSED,
    CheckStatus.FAIL: Status.FAILED,
    CheckStatus.ERROR: Status.BROKEN,
    CheckStatus.SKIP: Status.SKIPPED,
    CheckStatus.WAIVED: Status.SKIPPED,  # as allure-pytest reports an xfail: failed, and accepted (known issue)
}
_RANK = {CheckStatus.ERROR: 4, CheckStatus.FAIL: 3, CheckStatus.WAIVED: 2, CheckStatus.PASS: 1, CheckStatus.SKIP: 0}
WAIVED_CATEGORY: dict[str, object] = {
    "name": "Waived (accepted deviations)",
    "matchedStatuses": ["skipped"],
    "messageRegex": r"(?s).*WAIVED by.*",
}


def suite_of(check: str) -> str:
    return family_of(check).suite


def _categories() -> list[dict[str, object]]:
    """Allure's categories, one per report category of the check vocabulary, matched by the `[check]` prefix of
    each failure message."""
    prefixes: dict[str, list[str]] = {}
    for family in Family:
        names = list(PERFORMANCE_PREFIXES) if family is Family.PERFORMANCE else [family.value]
        prefixes.setdefault(family.category, []).extend(names)
    by_family: list[dict[str, object]] = [
        {
            "name": category,
            "matchedStatuses": ["failed", "broken"],
            "messageRegex": rf"(?s)\[({'|'.join(names)})\..*\].*",
        }
        for category, names in prefixes.items()
    ]
    return [WAIVED_CATEGORY, NOT_RUN_CATEGORY, *by_family]


def _certification(verdict: Verdict, started_ms: int, stopped_ms: int) -> TestResult:
    """The certification itself, as the first result: failed or broken (incomplete) unless the run passed."""
    c, s = verdict.coverage, verdict.summary
    status = {"pass": Status.PASSED, "fail": Status.FAILED}.get(verdict.result, Status.BROKEN)
    message = (
        f"{headline(verdict)}: {c.ran} of {c.required} required checks ran "
        f"({c.deselected} deselected, {c.not_reached} not reached); {s.passed} passed, {s.failed} "
        f"failed, {s.errors} errors, {s.skipped} skipped for a failing cause, {s.waived} waived"
    )
    rows = "".join(
        f"<tr><td>{escape(n)}</td><td>{escape(v.result.upper())}</td><td>{v.passed}</td><td>{v.failed}"
        f"</td><td>{v.errors}</td><td>{v.skipped}</td><td>{escape(', '.join(v.failing))}</td></tr>"
        for n, v in verdict.nodes.items()
    )
    table = (
        f"<p><b>{escape(message)}</b></p><table><tr><th>node</th><th>result</th><th>passed</th><th>failed</th>"
        f"<th>errors</th><th>skipped</th><th>failing checks</th></tr>{rows}</table>"
    )
    return TestResult(
        uuid=str(uuid.uuid4()),
        name="{0} of {2}: {1}".format(*headline_parts(verdict), verdict.spec),
        fullName="gpucert.certification",
        historyId="gpucert.certification",
        status=status,
        statusDetails=None if status is Status.PASSED else StatusDetails(message=message),
        descriptionHtml=table,
        start=started_ms,
        stop=stopped_ms,
        labels=[  # Allure's Suites widget lists the suite: "configuration" on a configure run, not "certification"
            Label("epic", headline_parts(verdict)[0].lower()),
            Label("suite", headline_parts(verdict)[0].lower()),
            Label("feature", headline_parts(verdict)[0].lower()),
            Label("severity", "blocker"),
        ],
        parameters=[Parameter("run", verdict.run)],
    )


def report_name(verdict: Verdict) -> str:
    """The Allure report's title, over its overview: the run's headline first."""
    return f"{headline(verdict)} ({verdict.spec}, run {verdict.run})"


_Group = list[tuple[CheckKey, Outcome]]  # the outcomes of one check on one node (one per GPU, or the node's one)


def write_allure(
    results_dir: Path,
    outcomes: Mapping[CheckKey, Outcome],
    evidence: Mapping[CheckKey, Any],
    *,
    verdict: Verdict,
    started_ms: int,
    stopped_ms: int,
    missing: Mapping[CheckKey, str] | None = None,
) -> int:
    """Write the results of a run (the certification first, then one per check and node, then one per node whose
    `missing` checks did not run: allure_notrun.py); returns how many."""
    results_dir.mkdir(parents=True, exist_ok=True)
    logger = ResultsLogger(str(results_dir))
    logger.report_result(_certification(verdict, started_ms, stopped_ms))
    nodes, tested, bad = _grouped(outcomes)
    passing = CheckStatus.PASS
    passed: dict[str | None, dict[str, Sequence[CheckKey]]] = {}
    for node, checks in nodes.items():
        mine: dict[str, Sequence[CheckKey]] = {
            check: keys for check, keys in checks.items() if (check, node) not in bad
        }
        if mine:  # every check of these passed: the node's passed checks, as they are
            passed[node] = mine
    # written in order (a file's name is a random uuid: the order is the folder's, not the results'): the groups
    # that did not all pass by check and node, then each node's passed checks (passed_on orders them by check)
    for check, node in sorted(bad, key=lambda g: (g[0], shown(g[1]))):
        items = [(k, outcomes[k]) for k in nodes[node][check]]
        ok = [k for k, o in items if o.finding.status is passing]
        if ok:  # counted where the verdict counts it: the node's passed checks (also a failed check's other GPUs)
            passed.setdefault(node, {})[check] = ok
        logger.report_result(_not_passed(logger, check, node, items, evidence, started_ms))
    for node in sorted(passed, key=shown):
        said = verdict.fleet if node is None else verdict.nodes.get(node)
        logger.report_text(passed_on(node, passed[node], outcomes, started_ms, said, tested=tested[node]))
    not_run = not_run_results(missing or {}, started_ms, stopped_ms)
    for r in not_run:
        logger.report_result(r)
    _environment(results_dir, verdict)
    return 1 + len(bad) + len(passed) + len(not_run)


def _grouped(
    outcomes: Mapping[CheckKey, Outcome],
) -> tuple[dict[str | None, dict[str, list[CheckKey]]], dict[str | None, list[Outcome]], set[tuple[str, str | None]]]:
    """The keys by the node the verdict counts their check on (None: the fleet) and by check, each node's outcomes,
    and the (check, node) groups with a check that did not pass (a few of ~42,000 at 1,024 x 8). A run's outcomes
    come node after node but for the measured items' (a re-test's carried nodes each at once): a node's dicts are
    looked up where the node changes. Keys, not (key, outcome) pairs, in the groups: a pair per outcome was
    ~190,000 tuples at 1,024 x 8, each counted by the collector."""
    nodes: dict[str | None, dict[str, list[CheckKey]]] = {}
    tested: dict[str | None, list[Outcome]] = {}
    bad: set[tuple[str, str | None]] = set()
    passing, last = CheckStatus.PASS, object()
    checks: dict[str, list[CheckKey]] = {}
    mine: list[Outcome] = []
    for key, o in outcomes.items():
        node = key.node
        if node != last:
            if node not in nodes:
                nodes[node], tested[node] = {}, []
            checks, mine, last = nodes[node], tested[node], node
        f = o.finding
        keys = checks.get(f.check)
        if keys is None:
            checks[f.check] = [key]
        else:
            keys.append(key)
        mine.append(o)
        if f.status is not passing:
            bad.add((f.check, node))
    return nodes, tested, bad


def _not_passed(
    logger: AllureFileLogger,
    check: str,
    where: str | None,
    items: _Group,
    evidence: Mapping[CheckKey, Any],
    started_ms: int,
) -> TestResult:
    """One check on one node (None: the fleet) that did not pass: its worst status, the failing findings' messages
    and evidence (attached), and each GPU a step."""
    node = shown(where)
    findings = [o.finding for _, o in items]
    worst = max(findings, key=lambda f: _RANK[f.status]).status
    noted = (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED)
    bad = [(k, o.finding) for k, o in items if o.finding.status in noted]
    # the group took from its first test's start to its last test's end (0 when the times were not recorded)
    begin = min((int(o.start * 1000) for _, o in items if o.start), default=started_ms)
    end = max((int(o.stop * 1000) for _, o in items if o.stop), default=begin)
    result = TestResult(
        uuid=str(uuid.uuid4()),
        name=f"{check} on {spoken(where)}" + (" (waived)" if worst is CheckStatus.WAIVED else ""),
        fullName=f"{suite_of(check)}.{check}[{node}]",
        historyId=f"{check}[{node}]",
        status=_STATUS[worst],
        start=begin,
        stop=end,
        labels=[
            Label("epic", suite_of(check)),
            Label("feature", check),
            Label("story", node),
            Label("suite", suite_of(check)),
            Label("tag", check_category(check)),
        ],
        parameters=[Parameter("node", node)],
    )
    if bad:
        result.statusDetails = StatusDetails(
            message=f"[{check}] " + "\n".join(f.message for _, f in bad), known=worst is CheckStatus.WAIVED
        )
        for k, f in bad:
            if k in evidence:
                name = f"{uuid.uuid4()}-attachment.json"
                logger.report_attached_data(json.dumps(evidence[k], indent=1).encode(), name)
                result.attachments.append(Attachment(name=f"evidence {f.where}", source=name, type="application/json"))
    elif worst is CheckStatus.SKIP:
        result.statusDetails = StatusDetails(message=findings[0].message)
    result.steps += _gpu_steps(node, items, begin, end)
    return result


def _gpu_steps(node: str, items: _Group, begin: int, end: int) -> list[TestStepResult]:
    """Each GPU's finding a step, the node's own first; none when the node's one finding is the whole result."""
    steps = []
    ordered = sorted(items, key=lambda item: -1 if item[1].finding.gpu is None else item[1].finding.gpu)
    for _, o in ordered:
        f = o.finding
        if f.gpu is None and len(items) == 1:
            break
        steps.append(
            TestStepResult(
                name=f"gpu{f.gpu}" if f.gpu is not None else node,
                status=_STATUS[f.status],
                statusDetails=StatusDetails(message=f.message) if f.message else None,
                parameters=[Parameter("gpu", str(f.gpu))] if f.gpu is not None else [],
                start=int(o.start * 1000) or begin,
                stop=int(o.stop * 1000) or end,
            )
        )
    return steps


def _environment(results_dir: Path, verdict: Verdict) -> None:
    """Allure's environment, categories and executor files: what ran, on what, and the run's name."""
    run_id, spec, target = verdict.run, verdict.spec, verdict.target
    (results_dir / "environment.properties").write_text(
        f"gpucert={__version__}\nrun={run_id}\nspec={spec}\ntarget={target}\nkind={verdict.what}\n"
        f"result={verdict.result}\n"
        f"python={platform.python_version()}\n",
        encoding="utf-8",
    )
    (results_dir / "categories.json").write_text(json.dumps(_categories(), indent=1), encoding="utf-8")
    (results_dir / "executor.json").write_text(
        json.dumps(
            {"name": "gpucert", "type": "gpucert", "buildName": run_id, "reportName": report_name(verdict)},
            indent=1,
        ),
        encoding="utf-8",
    )


ALLURE_VERSION = "2.46.1"
INSTALL_HINT = (
    f"install the Allure commandline, which needs Java 17: `npm install --prefix .tools "
    f"allure-commandline@{ALLURE_VERSION}` in the gpucert checkout (make test does this), and "
    "`apt-get install openjdk-17-jre-headless` where `java` is missing"
)


def previous_allure_report(run_dir: Path, spec: str) -> Path | None:
    """The Allure report of the latest earlier run of the same spec beside this one (`RUN-allure/index.html`, as
    `gpucert report allure` writes it), whose trend this report carries on."""
    earlier = []
    try:
        siblings = sorted(run_dir.parent.iterdir())
    except OSError:  # a parent it cannot list: no trend to carry, the report itself still builds
        return None
    for sibling in siblings:
        if sibling.name >= run_dir.name:
            continue
        index = sibling.parent / f"{sibling.name}-allure" / "index.html"
        try:
            if not index.is_file():
                continue
            same = RunFolder(sibling).read_verdict().get("spec") == spec
        except (OSError, EvidenceError):  # not a run folder, or one it cannot read: not this spec's
            continue
        if same:
            earlier.append((sibling.name, index))
    return max(earlier)[1] if earlier else None


def find_allure() -> str | None:
    """The Allure commandline: $GPUCERT_ALLURE, then `allure` on PATH, then the checkout's .tools/ install."""
    found = os.environ.get("GPUCERT_ALLURE") or shutil.which("allure")
    if found:
        return found
    local = project_root() / ".tools" / "node_modules" / ".bin" / "allure"
    return str(local) if local.exists() else None


def _has_java() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or (home is not None and (Path(home) / "bin" / "java").exists())


# a single-file report embeds each of its files as d('path','base64') (allure-generator 2.46.1, single-file mode)
_EMBEDDED_HISTORY = re.compile(r"d\('history/([A-Za-z0-9_.-]+\.json)','([A-Za-z0-9+/=]*)'\)")


def history_of(report: Path) -> dict[str, bytes]:
    """The history/ files a single-file Allure report embeds (its trend so far); empty when there is none."""
    try:
        text = report.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    found = {}
    for name, data in _EMBEDDED_HISTORY.findall(text):
        try:
            found[name] = base64.b64decode(data, validate=True)
        except binascii.Error:  # a damaged file: that entry is no history (allure_history.usable says what is)
            continue
    return found


def _replaceable(out_dir: Path) -> None:
    """`allure generate --clean` empties its output folder first: only a new or empty folder, or an earlier
    single-file report (its one index.html), may be given; never a run folder, the reports folder or a user's."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir() or any(p.name != "index.html" or not p.is_file() for p in out_dir.iterdir()):
        raise ConfigError(
            f"--out {out_dir}: it exists and holds more than an earlier Allure report (index.html), and Allure "
            "empties the folder it writes to; name a new or empty folder"
        )


def build_html(
    results_dir: Path, out_dir: Path, *, name: str | None = None, history: Mapping[str, bytes] | None = None
) -> Path:
    """Render `allure-results/` into one self-contained HTML file (`allure generate --single-file`) titled `name`,
    with the trend so far carried on: `history` (an earlier report's history/ files) put where Allure reads it,
    the results' history/ (report/allure_history.py). The results are copied first: the run folder stays as it
    was signed."""
    if not results_dir.is_dir():
        raise EvidenceError("no allure-results/ here: pass a run folder written by `gpucert certify`", path=results_dir)
    _replaceable(out_dir)
    allure = find_allure()
    if allure is None:
        raise ConfigError(f"the Allure commandline is not installed; {INSTALL_HINT}")
    if not _has_java():
        raise ConfigError(f"Java is not installed; {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="gpucert-allure-") as tmp:
        results = Path(tmp) / "allure-results"
        shutil.copytree(results_dir, results)
        if history:
            carry_in(results, history)
        cmd = [allure, "generate", "--single-file", "--clean", "-o", str(out_dir), str(results)]
        if name:
            cmd += ["--name", name]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    index = out_dir / "index.html"
    if proc.returncode != 0 or not index.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise IncompleteRunError(f"allure generate failed (exit {proc.returncode}): {' | '.join(tail)}")
    return index
