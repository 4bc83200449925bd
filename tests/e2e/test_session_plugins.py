"""The plugins of a command's pytest session (cli/suites.py PLUGINS): gpucert's, pytest-html and pytest-metadata (and
pytest-xdist with -n), loaded by name with pytest's autoloading off, so that the rest of an environment's pytest11
entry points (here pytest-httpserver, platformdirs', allure-pytest) cost a certification nothing (issue 28: 0.07 s
of a 1,024 x 8 re-test's CPU). allure-pytest, which many pytest users have installed (it is here), does not break a
run either way: left out, or put in by PYTEST_PLUGINS, the run writes its reports and gpucert its Allure results.
One 2 x 2 fleet (health only) per run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import suites
from gpucert.cli.main import main

from .conftest import fleet_doc, spec_doc


class _Plugins:
    """Records the names of the plugins the session registered, at its configure."""

    names: list[str]

    def pytest_configure(self, config: pytest.Config) -> None:
        self.names = [name for name, _ in config.pluginmanager.list_name_plugin()]


def certify_watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watcher: object, *args: str) -> tuple[int, Path]:
    """`gpucert certify` of a 2 x 2 fleet (health only) in this process, `watcher` a plugin of its pytest session:
    the exit code and the run folder."""
    doc = spec_doc(probes=["health"])
    doc["certify"].pop("multinode")
    doc["expect"].update(nodes=2, gpusPerNode=2)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=2, gpus=2)))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    real = suites.run_pytest
    monkeypatch.setattr(suites, "run_pytest", lambda a, plugins: real(a, [*plugins, watcher]))
    code = main(["certify", str(tmp_path / "spec.yaml"), "--reports", str(tmp_path / "reports"), "-q", *args])
    (run,) = [p for p in (tmp_path / "reports").iterdir() if not p.name.startswith(".")]
    return code, run


def _certify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, Path, list[str]]:
    seen = _Plugins()
    code, run = certify_watched(tmp_path, monkeypatch, seen, *args)
    return code, run, seen.names


def _reports_whole(run: Path) -> None:
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["result"] == "pass"
    assert "PASS" in (run / "report.html").read_text()  # pytest-html wrote it, with gpucert's summary
    results: list[dict[str, Any]] = [json.loads(p.read_text()) for p in (run / "allure-results").glob("*-result.json")]
    assert results
    # gpucert's results (the run's own first), none of allure-pytest's (its listener labels each `framework: pytest`)
    assert any(r.get("historyId") == "gpucert.certification" for r in results)
    assert not any(label.get("name") == "framework" for r in results for label in r.get("labels", []))


def test_the_session_loads_the_plugins_it_needs_and_no_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # options there keep autoloading on (the test below)
    code, run, names = _certify(tmp_path, monkeypatch)
    assert code == 0
    assert {"gpucert", "html", "metadata"} <= set(names)
    assert not {"allure_pytest", "pytest_httpserver", "platformdirs", "xdist"} & set(names)  # all installed here
    _reports_whole(run)


def test_allure_pytest_put_in_by_pytest_plugins_does_not_break_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_PLUGINS", "allure_pytest.plugin")
    code, run, names = _certify(tmp_path, monkeypatch)
    assert code == 0
    assert "allure_pytest.plugin" in names
    _reports_whole(run)


def test_workers_load_xdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, run, names = _certify(tmp_path, monkeypatch, "-n", "1")
    assert code == 0
    assert "xdist" in names
    _reports_whole(run)


def test_an_installed_plugins_option_in_pytest_addopts_still_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PYTEST_ADDOPTS naming an installed plugin's option (here xdist's --dist; pytest-timeout's --timeout alike)
    was pytest's usage error at the evaluation with autoloading off (exit 4, the run INCOMPLETE after measuring):
    with options in the environment, the session autoloads as it did before cli/suites.py PLUGINS."""
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    monkeypatch.setenv("PYTEST_ADDOPTS", "--dist=load")
    code, run, names = _certify(tmp_path, monkeypatch)
    assert code == 0
    assert "xdist" in names
    _reports_whole(run)
