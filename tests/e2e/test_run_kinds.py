"""A configure run is not a certification: verdict.json records what kind of run it was, and every report says
"Configuration PASS: nothing measured" (issue 23 item 11). Older verdicts (gpucert.io/verdict/v2) stay readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.report.verdict import headline, verdict_problems

from ..in_process import gpucert_here
from .conftest import SUITES


def test_a_configure_run_says_it_measured_nothing(project: Path) -> None:
    r = gpucert_here("configure", "examples/clean.yaml", "--reports", "cfg", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (project / "cfg").iterdir()
    v = json.loads((run / "verdict.json").read_text())
    assert v["schema"] == "gpucert.io/verdict/v3"
    assert v["kind"] == "configure"
    assert v["result"] == "pass"
    assert "Configuration PASS: nothing measured" in r.stdout
    assert "(fleet)" not in r.stdout  # nothing failed at the fleet level: no row for it
    html = (run / "report.html").read_text()
    assert "Configuration PASS: nothing measured" in html
    assert "Certification PASS" not in html
    # no node's evidence reads as measured
    table = html[html.index("gpucert-nodes") :].split("</table>")[0]
    assert table.count("<td>not measured</td>") == 4
    assert "<td>measured</td>" not in table
    results = [json.loads(p.read_text()) for p in (run / "allure-results").glob("*-result.json")]
    (cert,) = [x for x in results if x["fullName"] == "gpucert.certification"]
    assert cert["name"] == "Configuration of clean-h100-pod-a: PASS: nothing measured"
    assert {x["name"]: x["value"] for x in cert["labels"]}["suite"] == "configuration"
    # Allure's Environment widget says what the run was beside its result
    environment = (run / "allure-results" / "environment.properties").read_text().splitlines()
    assert "kind=configure" in environment
    executor = json.loads((run / "allure-results" / "executor.json").read_text())
    assert executor["reportName"].startswith("Configuration PASS: nothing measured")
    # JUnit, which CI shows by testcase name: the run's own testcase is the configuration, not a certification
    junit = (run / "junit.xml").read_text()
    assert '<property name="gpucert_kind" value="configure" />' in junit
    assert '<testcase classname="gpucert" name="configuration"' in junit
    assert "certification" not in junit
    # it is signed and verified as what it is
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    assert gpucert_here("sign", str(run), "--key", "keys/gpucert.key", cwd=project).returncode == 0
    verified = gpucert_here("verify", str(run), "--key", "keys/gpucert.pub", cwd=project)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_pytest_terminal_says_configuration(pytester: pytest.Pytester, project: Path) -> None:
    result = pytester.runpytest(
        str(SUITES / "configure"),
        "--spec",
        str(project / "examples" / "clean.yaml"),
        "--no-measure",
        "--reports",
        str(pytester.path / "reports"),
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["CONFIGURATION PASS: nothing measured: * of * required checks ran*"])
    assert "CERTIFICATION" not in result.stdout.str()


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("certify", "Certification FAIL"),
        ("configure", "Configuration FAIL: nothing measured"),
        ("static", "Static gate FAIL: no cluster read, nothing measured"),
        ("retest", "Re-test FAIL"),
        ("recertify", "Recertification FAIL"),
        (None, "Certification FAIL"),  # a v2 verdict has no kind: it is a certification
    ],
)
def test_headline_names_the_kind(kind: str | None, said: str) -> None:
    assert headline({"result": "fail", **({"kind": kind} if kind else {})}) == said


def test_a_v2_verdict_is_still_read() -> None:
    """A v2 verdict as the first v2 writer (commit cc4c956, report/verdict.py) wrote it: its summary counts
    `skipped` and `waived`, its fleet and nodes count passed, failed, errors and skipped only (waivers came later)."""
    group = {"result": "pass", "passed": 1, "failed": 0, "errors": 0, "skipped": 0, "failing": []}
    counts = {"passed": 1, "failed": 0, "errors": 0, "skipped": 0}
    v2 = {
        "schema": "gpucert.io/verdict/v2",
        "run": "r",
        "spec": "s",
        "target": "simulated",
        "result": "pass",
        "coverage": {"required": 1, "ran": 1, "complete": True},
        "summary": {"nodes": 1, "gpus": 8, "checks": 1, **counts, "waived": 0},
        "findings": [],
        "fleet": {**group, "passed": 0},
        "nodes": {"gpu-node-1": group},
    }
    assert verdict_problems(v2) == []
    assert verdict_problems({**v2, "schema": "gpucert.io/verdict/v1"})
    # a v3 verdict counts waived checks in every group: one without is refused
    assert verdict_problems({**v2, "schema": "gpucert.io/verdict/v3", "kind": "certify"})
