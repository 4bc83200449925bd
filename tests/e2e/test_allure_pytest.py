"""gpucert beside allure-pytest, as many pytest users have it installed: no crash, and --alluredir as they know it.

allure-pytest 2.16.2 (allure_pytest/plugin.py, pytest_addoption) adds
`parser.getgroup("reporting").addoption("--alluredir", action="store", dest="allure_report_dir", metavar="DIR")`
and `--clean-alluredir`; its pytest_configure registers an `AllureListener` as "allure_listener" when the option
is given, which writes four files per test item. The stand-in below registers the option and the listener name
exactly so; the last test runs the real plugin where it is installed (the `test` extra installs it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from .conftest import SUITES, fleet_doc, spec_doc

# what allure_pytest/plugin.py 2.16.2 does with the option and its listener, and nothing else
STAND_IN = """
import json, os, uuid

def pytest_addoption(parser):
    parser.getgroup("reporting").addoption("--alluredir", action="store", dest="allure_report_dir", metavar="DIR")
    parser.getgroup("reporting").addoption("--clean-alluredir", action="store_true", dest="clean_alluredir")

class Listener:
    def __init__(self, folder):
        self.folder = folder
    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            with open(os.path.join(self.folder, f"{uuid.uuid4()}-result.json"), "w") as f:
                json.dump({"fullName": report.nodeid, "status": report.outcome}, f)

def pytest_configure(config):
    if config.option.allure_report_dir:
        os.makedirs(config.option.allure_report_dir, exist_ok=True)
        config.pluginmanager.register(Listener(config.option.allure_report_dir), "allure_listener")
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, Path]:
    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=2)))
    spec = spec_doc(probes=["health", "memory"], multinode=None)
    spec["expect"]["nodes"] = 2
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec))
    folder = pytester.path / "allure-here"
    result = pytester.runpytest(
        str(SUITES / "configure"),
        str(SUITES / "certify"),
        "--spec",
        str(pytester.path / "spec.yaml"),
        "--reports",
        str(pytester.path / "reports"),
        "--alluredir",
        str(folder),
        "-p",
        "no:cacheprovider",
        *args,
    )
    return result, folder


def _results(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in folder.glob("*-result.json")]


def _gpucert_only(pytester: pytest.Pytester, folder: Path) -> None:
    """The folder holds gpucert's results, the same as the run folder's, and nothing written per test item."""
    (run,) = (pytester.path / "reports").iterdir()
    ours = sorted(str(r["fullName"]) for r in _results(run / "allure-results"))
    there = sorted(str(r["fullName"]) for r in _results(folder))
    assert there == ours
    assert "gpucert.certification" in there
    assert not [n for n in there if "::" in n]  # allure-pytest names its results by pytest node id


@pytest.mark.parametrize("order", ["allure-pytest first", "gpucert first"])
def test_alluredir_with_allure_pytest_loaded_in_either_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    pytester.makepyfile(allure_pytest_standin=STAND_IN)
    pytester.syspathinsert()
    # entry points load in no set order; -p with autoload off fixes the order either way round
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins = ["gpucert.pytest.plugin", "allure_pytest_standin"]
    if order == "allure-pytest first":
        plugins.reverse()
    result, folder = _run(
        pytester,
        *(a for p in plugins for a in ("-p", p)),
        "-p",
        "xdist",
        "-p",
        "metadata",
        "-p",
        "html",
        # gpucert.pytest.plugin is imported already in this process, so -p cannot rewrite its asserts (it has none)
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    )
    assert "conflicting option string" not in result.stderr.str()
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    _gpucert_only(pytester, folder)


def test_alluredir_without_allure_pytest(pytester: pytest.Pytester) -> None:
    result, folder = _run(pytester, "-p", "no:allure_pytest")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    _gpucert_only(pytester, folder)


def test_alluredir_with_the_real_allure_pytest(pytester: pytest.Pytester) -> None:
    pytest.importorskip("allure_pytest", reason="allure-pytest is not installed (pip install -e '.[test]')")
    result, folder = _run(pytester)
    assert "conflicting option string" not in result.stderr.str()
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    _gpucert_only(pytester, folder)
    assert os.listdir(folder)
