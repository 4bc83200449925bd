"""PASS only when every check the spec requires ran: every pytest shortcut that leaves some out says INCOMPLETE.

Each case is a reproducer from issue 11 that wrote `result: pass` over a handful of checks before the verdict had
a coverage contract.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..in_process import gpucert_here
from .conftest import SUITES, fleet_doc, spec_doc

CLEAN_CHECKS = 742  # a clean 4 x 8 fleet under the demo spec: every check the plan requires (4 probe.preflight,
# 32 straggler.combined)
CLEAN_ITEMS = 182  # the pytest items that decide them: a per-GPU check is one item per check and node (issue 28)


def write_inputs(path: Path, fleet: dict[str, Any] | None = None, **certify: Any) -> Path:
    (path / "fleet.yaml").write_text(yaml.safe_dump(fleet or fleet_doc()))
    (path / "spec.yaml").write_text(yaml.safe_dump(spec_doc(**certify)))
    return path / "spec.yaml"


def run_suites(
    pytester: pytest.Pytester,
    *args: str,
    plugins: list[object] | None = None,
    suites: tuple[str, ...] = ("configure", "certify"),
    fleet: dict[str, Any] | None = None,
) -> pytest.RunResult:
    spec = write_inputs(pytester.path, fleet)
    return pytester.runpytest(
        *(str(SUITES / s) for s in suites),
        "--spec",
        str(spec),
        "--reports",
        str(pytester.path / "reports"),
        "-p",
        "no:cacheprovider",
        *args,
        plugins=plugins or [],
        no_reraise_ctrlc=True,  # an interrupt of the inner session is what some tests are about
    )


def the_run(pytester: pytest.Pytester) -> Path:
    runs = sorted((pytester.path / "reports").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def verdict_of(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "verdict.json").read_text())
    return data


def test_a_clean_fleet_runs_every_required_check(pytester: pytest.Pytester) -> None:
    result = run_suites(pytester)
    v = verdict_of(the_run(pytester))
    assert v["schema"] == "gpucert.io/verdict/v3"
    assert v["result"] == "pass"
    c = v["coverage"]
    assert (c["required"], c["ran"], c["deselected"], c["notReached"], c["complete"]) == (
        CLEAN_CHECKS,
        CLEAN_CHECKS,
        0,
        0,
        True,
    )
    assert result.ret == 0
    result.assert_outcomes(passed=CLEAN_ITEMS)
    result.stdout.fnmatch_lines([f"CERTIFICATION PASS: {CLEAN_CHECKS} of {CLEAN_CHECKS} required checks ran*"])


@pytest.mark.parametrize(
    ("args", "ran"),
    [
        (("-k", "ecc and gpu-node-2"), 8),
        # one item, every GPU of the node: its 8 checks
        (("--deselect", "suites/certify/test_health.py::test_ecc[gpu-node-1]"), CLEAN_CHECKS - 8),
        (("-m", "not check"), 0),
    ],
)
def test_deselected_checks_make_the_run_incomplete(pytester: pytest.Pytester, args: tuple[str, ...], ran: int) -> None:
    result = run_suites(pytester, *args)
    run = the_run(pytester)
    v = verdict_of(run)
    assert v["result"] == "incomplete"
    c = v["coverage"]
    assert (c["required"], c["ran"], c["deselected"], c["notReached"], c["complete"]) == (
        CLEAN_CHECKS,
        ran,
        CLEAN_CHECKS - ran,
        0,
        False,
    )
    assert c["missing"]  # the verdict names the checks that did not run
    assert result.ret == 1  # incomplete is never exit 0
    result.stdout.fnmatch_lines([f"CERTIFICATION INCOMPLETE: {ran} of {CLEAN_CHECKS} required checks ran*"])
    # every report says the same
    html = (run / "report.html").read_text()
    assert "Certification INCOMPLETE" in html
    assert "Certification PASS" not in html
    junit = (run / "junit.xml").read_text()
    assert 'name="gpucert_result" value="incomplete"' in junit
    assert re.search(r'<testcase classname="gpucert" name="certification"[^>]*><failure', junit)
    allure = [json.loads(p.read_text()) for p in (run / "allure-results").glob("*-result.json")]
    (cert,) = [r for r in allure if r["fullName"] == "gpucert.certification"]
    assert cert["status"] == "broken"
    _within_the_documented_bound(run / "allure-results", allure, nodes=4, beyond_a_complete_runs=ran > 0)
    # Allure's donut is the share of passed results: a node whose checks did not all run is not a green result
    # (each node's passed checks are one result of its own, issue 28)
    passed = {r["fullName"]: r for r in allure if r["labels"][0]["value"] == "passed"}
    for name, r in passed.items():
        node = name.removeprefix("gpucert.passed[").removesuffix("]")
        said = (v.get("fleet") or {}) if node == "@fleet" else v["nodes"][node]
        assert r["status"] == ("broken" if said["result"] == "incomplete" else "passed"), (node, said["result"])
    # a node of each run is incomplete; a run that ran nothing has no passed checks to show
    assert any(r["status"] == "broken" for r in passed.values()) if ran else not passed


ALLURE_BOUND = "at most 4 + 2(N + 1) + G + F files when it did not"  # docs/verdict.md, an incomplete run's


def _within_the_documented_bound(
    results: Path, allure: list[dict[str, Any]], *, nodes: int, beyond_a_complete_runs: bool
) -> None:
    """An incomplete run's Allure files are within the bound docs/verdict.md gives: a node's passed checks and its
    checks that did not run are two results, so a run that ran some checks goes beyond the bound of a run that ran
    every check (`--deselect` of one node's item: five results of passed checks, and that node's not run)."""
    assert ALLURE_BOUND in (SUITES.parent / "docs" / "verdict.md").read_text()
    files = [p for p in results.iterdir() if p.is_file()]
    own = ("gpucert.certification", "gpucert.passed[", "gpucert.not_run[")
    g = sum(not r["fullName"].startswith(own) for r in allure)  # (check id, node) pairs that did not pass
    f = len(list(results.glob("*-attachment*")))
    assert len(files) <= 4 + 2 * (nodes + 1) + g + f
    assert (len(files) > 4 + (nodes + 1) + g + f) is beyond_a_complete_runs


def test_an_incomplete_runs_allure_overview_does_not_read_as_passed(pytester: pytest.Pytester) -> None:
    """`-k gpu-node-2` runs every check of one node of four: Allure wrote the certification (broken) and that node's
    passed checks (passed), and its overview read 50% green for a quarter of the checks. Each node (and the fleet)
    with checks that did not run has a skipped result saying how many (allure_notrun.py)."""
    run_suites(pytester, "-k", "gpu-node-2")
    run = the_run(pytester)
    v = verdict_of(run)
    assert (v["result"], v["nodes"]["gpu-node-2"]["result"]) == ("incomplete", "pass")
    allure = [json.loads(p.read_text()) for p in (run / "allure-results").glob("*-result.json")]
    # Allure's donut says passed / total (allure-generator 2.x PieChartView.getChartTitle)
    assert 2 * sum(r["status"] == "passed" for r in allure) < len(allure)
    not_run = {r["fullName"]: r for r in allure if r["fullName"].startswith("gpucert.not_run")}
    assert set(not_run) == {f"gpucert.not_run[{n}]" for n in ("gpu-node-1", "gpu-node-3", "gpu-node-4", "@fleet")}
    assert all(r["status"] == "skipped" for r in not_run.values())
    counted = {
        r["fullName"]: int(next(p["value"] for p in r["parameters"] if p["name"] == "checks")) for r in not_run.values()
    }
    assert sum(counted.values()) == v["coverage"]["deselected"]
    node1 = not_run["gpucert.not_run[gpu-node-1]"]
    n = counted["gpucert.not_run[gpu-node-1]"]
    assert node1["statusDetails"]["message"].startswith(f"gpu-node-1: {n} required checks did not run ({n} deselected)")
    assert sum(int(s["name"].split(": ")[1].split()[0]) for s in node1["steps"]) == n  # a step per family


def test_a_suite_left_off_the_command_line_is_not_run(pytester: pytest.Pytester) -> None:
    result = run_suites(pytester, suites=("certify",))
    v = verdict_of(the_run(pytester))
    assert v["result"] == "incomplete"
    assert v["coverage"]["deselected"] > 0
    assert "node.reachable@gpu-node-1" in v["coverage"]["missing"]
    assert result.ret == 1


@pytest.mark.parametrize("args", [("-x",), ("--maxfail", "1")])
def test_stopping_early_is_never_a_pass(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    fault = {"kind": "ecc", "node": "gpu-node-1", "gpu": 0, "uncorrected": 1}
    result = run_suites(pytester, *args, fleet=fleet_doc([fault]))
    v = verdict_of(the_run(pytester))
    assert v["result"] == "fail"  # a failed check outranks incompleteness
    assert v["coverage"]["notReached"] > 0
    assert v["coverage"]["complete"] is False
    assert v["coverage"]["stopped"]
    assert result.ret == 1


def test_last_failed_reruns_only_what_failed_and_cannot_pass(pytester: pytest.Pytester) -> None:
    spec = write_inputs(pytester.path, fleet_doc([{"kind": "ecc", "node": "gpu-node-1", "gpu": 0, "uncorrected": 1}]))
    args = [str(SUITES / "configure"), str(SUITES / "certify"), "--spec", str(spec)]
    pytester.runpytest(*args, "--reports", str(pytester.path / "first"))
    # the fault is "repaired" and only the last failure is re-run: the check passes, the run is still incomplete
    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc()))
    result = pytester.runpytest(*args, "--reports", str(pytester.path / "reports"), "--lf")
    v = verdict_of(the_run(pytester))
    assert v["coverage"]["ran"] == 8  # the failed item: the check on each GPU of the node
    assert v["summary"]["passed"] == 8
    assert v["result"] == "incomplete"
    assert result.ret == 1


class Interrupt:
    """Ctrl-C after `after` items have reported, as a user does during evaluation; counts the checks they decided
    (an item of a per-GPU check decides it on each GPU of its node)."""

    def __init__(self, after: int) -> None:
        self.after, self.seen, self.checks = after, 0, 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.checks += len(getattr(report, "gpucert", {}).get("checks", []))
        if report.when == "teardown":
            self.seen += 1
            if self.seen == self.after:
                raise KeyboardInterrupt


@pytest.mark.parametrize("after", [1, 100, CLEAN_ITEMS - 1])
def test_an_interrupt_during_evaluation_writes_an_incomplete_verdict(pytester: pytest.Pytester, after: int) -> None:
    interrupt = Interrupt(after)
    result = run_suites(pytester, plugins=[interrupt])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    run = the_run(pytester)
    v = verdict_of(run)
    assert v["result"] == "incomplete"
    assert v["coverage"]["ran"] == interrupt.checks
    assert v["coverage"]["notReached"] == CLEAN_CHECKS - interrupt.checks
    assert v["coverage"]["stopped"] == "interrupted"
    html = (run / "report.html").read_text()
    assert "Certification INCOMPLETE" in html
    assert "Certification PASS" not in html
    junit = (run / "junit.xml").read_text()
    assert 'name="gpucert_result" value="incomplete"' in junit
    assert "<failure" in junit  # the certification's own testcase fails
    assert not list(run.rglob("*.tmp"))


def pytest_k(project: Path, spec: Path, keyword: str) -> subprocess.CompletedProcess[str]:
    """Plain pytest over the suites in its own process, as a user types it, with `-k keyword`: into partial/."""
    args = [str(SUITES / "configure"), str(SUITES / "certify"), "--spec", str(spec), "--reports", "partial"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-k", keyword, "-p", "no:cacheprovider", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_signed_predicate_says_incomplete(project: Path) -> None:
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    spec = project / "examples" / "clean.yaml"
    r = gpucert_here("certify", str(spec), "-q", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    # the same cluster, evaluated with -k through plain pytest: 8 checks of all those required
    r = pytest_k(project, spec, "ecc and gpu-node-2")
    assert r.returncode == 1, r.stdout + r.stderr
    (run,) = (project / "partial").iterdir()
    assert gpucert_here("sign", str(run), "--key", "keys/gpucert.key", cwd=project).returncode == 0
    v = gpucert_here("verify", str(run), "--key", "keys/gpucert.pub", cwd=project)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "result INCOMPLETE" in v.stdout
    envelope = json.loads((run / "certificate.intoto.json").read_text())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    assert predicate["result"] == "incomplete"
    required = predicate["coverage"]["required"]
    assert required > 600
    assert predicate["coverage"] == {
        "required": required,
        "ran": 8,
        "deselected": required - 8,
        "notReached": 0,
        "complete": False,
    }


def test_an_incomplete_run_cannot_give_a_handover_baseline(project: Path) -> None:
    pytest_k(project, project / "examples" / "clean.yaml", "gpu-node-2")
    (run,) = (project / "partial").iterdir()
    r = gpucert_here("baseline", "record", str(run), "--allow-unsigned", cwd=project)
    assert r.returncode == 1
    assert "refused gpu-node-2: the run is incomplete" in r.stdout
    assert not list((project / "baselines" / "nodes").rglob("*.yaml"))


@pytest.mark.parametrize("option", ["--co", "--collect-only", "--help", "--version", "--markers", "--fixtures"])
def test_sessions_that_run_no_tests_plan_and_measure_nothing(pytester: pytest.Pytester, option: str) -> None:
    spec = write_inputs(pytester.path)
    result = pytester.runpytest_subprocess(
        str(SUITES / "certify"), "--spec", str(spec), "--reports", str(pytester.path / "reports"), option
    )
    assert result.ret in (0, 5), result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "reports").exists()


def test_collect_only_on_recorded_evidence_lists_the_checks_in_place(pytester: pytest.Pytester) -> None:
    run_suites(pytester)
    run = the_run(pytester)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    result = pytester.runpytest(
        str(SUITES / "certify"), "--spec", str(pytester.path / "spec.yaml"), "--evidence", str(run), "--co", "-q"
    )
    result.stdout.fnmatch_lines(["*test_ecc?gpu-node-3?*"])  # one item per check and node
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # read in place, nothing written
    assert len(list((pytester.path / "reports").iterdir())) == 1


def test_suites_without_a_spec_are_a_usage_error(pytester: pytest.Pytester) -> None:
    """Without --spec the suites would only skip ("60 skipped", exit 0, read as green by CI): pytest's usage error."""
    result = pytester.runpytest(str(SUITES / "certify"), str(SUITES / "configure"), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out
    assert "Traceback" not in out
    result.stderr.fnmatch_lines(["*gpucert suites need a spec: pytest suites --spec SPEC*"])
    assert "skipped" not in result.stdout.str()
    # listing them is still fine: --co runs nothing
    assert pytester.runpytest(str(SUITES / "certify"), "--co", "-q", "-p", "no:cacheprovider").ret == 0


def test_incomplete_with_xdist_too(pytester: pytest.Pytester) -> None:
    result = run_suites(pytester, "-k", "ecc and gpu-node-2", "-n", "2")
    v = verdict_of(the_run(pytester))
    assert (v["result"], v["coverage"]["ran"], v["coverage"]["deselected"]) == ("incomplete", 8, CLEAN_CHECKS - 8)
    assert result.ret == 1
