"""`-p no:NAME` against gpucert's own plugins and the ones its reports stand on (hostile sweep of 93f6c9a, items 2
and 3).

pytest 9.1.1 blocks a plugin by name (`_pytest/config/__init__.py`, `PytestPluginManager.consider_pluginarg`: `-p
no:NAME` calls pluggy's `set_blocked(NAME)`), and pluggy 1.7's `PluginManager.register` then returns None without a
word (`pluggy/_manager.py`: "blocked plugin, return None to indicate no registration"). Blocking gpucert-controller
or gpucert-verdict ran the suites with no verdict and a junit.xml of passing testcases; blocking junitxml was an
INTERNALERROR (no `xmlpath` option); blocking metadata an INTERNALERROR in pytest-html 4.2.0 (pytest_html/
basereport.py:77 reads pytest-metadata's stash key at session start), each leaving a run folder with no verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, SUITES, spec_doc


def static_gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The recipe gate (no nodes: the fastest session that writes a verdict), with `args`."""
    doc = spec_doc()
    doc["target"]["fleet"] = str(ROOT / "examples" / "fleets" / "h100-4x8-faulty.yaml")
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(doc))
    reports = str(pytester.path / "reports")
    return pytester.runpytest(
        str(SUITES / "static"), "--spec", "spec.yaml", "--static", "--reports", reports, "-p", "no:cacheprovider", *args
    )


def runs(pytester: pytest.Pytester) -> list[Path]:
    reports = pytester.path / "reports"
    return [p for p in reports.iterdir() if not p.name.startswith(".")] if reports.exists() else []


# the names src/gpucert/pytest/session.py start() registers its plugins under
@pytest.mark.parametrize(
    "name", ["gpucert-junit-passed", "gpucert-junit-waived", "gpucert-controller", "gpucert-verdict", "gpucert-html"]
)
def test_blocking_a_plugin_of_gpucerts_own_is_a_usage_error(pytester: pytest.Pytester, name: str) -> None:
    result = static_gate(pytester, "-p", f"no:{name}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    (line,) = [line for line in result.stderr.lines if line.strip()]
    assert line.startswith(f"ERROR: -p no:{name} blocks a plugin of gpucert's own"), line
    assert not runs(pytester)  # refused before a run folder is made


def test_without_pytests_junit_the_verdict_and_the_other_reports_are_written(pytester: pytest.Pytester) -> None:
    result = static_gate(pytester, "-p", "no:junitxml")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "INTERNALERROR" not in result.stdout.str()
    (run,) = runs(pytester)
    assert json.loads((run / "verdict.json").read_text())["result"] == "pass"
    assert (run / "report.html").is_file()
    assert not (run / "junit.xml").exists()


def test_blocking_pytest_metadata_under_pytest_html_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = static_gate(pytester, "-p", "no:metadata")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    (line,) = [line for line in result.stderr.lines if line.strip()]
    assert "-p no:metadata: pytest-html needs pytest-metadata" in line
    assert not runs(pytester)
    # without pytest-html as well, the run goes on without report.html, as with -p no:html alone
    result = static_gate(pytester, "-p", "no:metadata", "-p", "no:html")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (run,) = runs(pytester)
    assert (run / "verdict.json").is_file()


def test_a_session_without_a_gpucert_run_may_block_what_it_likes(pytester: pytest.Pytester) -> None:
    """gpucert's plugin is loaded in every session of this environment (its pytest11 entry point): a session that
    evaluates no run (no --spec, no --run-dir) is not gpucert's to refuse."""
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest("-p", "no:metadata", "-p", "no:gpucert-controller", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
