"""A command's pytest session says no warning of its own making: its plugins named with -p (cli/suites.py PLUGINS)
are marked for assertion rewriting by those names (pytest 9.1.1, _pytest/config/__init__.py import_plugin ->
rewrite_hook.mark_rewrite(importspec)), and `gpucert` (the command's own package) and `html` (the standard library's,
which gpucert imports before pytest starts) are already imported: pytest's PytestAssertRewriteWarning for each, a
"warnings summary" under every certification. One 2 x 2 fleet (health only)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from gpucert.cli import suites
from gpucert.cli.main import main

from .conftest import fleet_doc, spec_doc


class _Warned:
    """Records each warning the session reports (what its terminal's warnings summary lists)."""

    def __init__(self) -> None:
        self.said: list[warnings.WarningMessage] = []

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        self.said.append(warning_message)


def test_a_certification_says_no_assertion_rewrite_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    doc = spec_doc(probes=["health"])
    doc["certify"].pop("multinode")
    doc["expect"].update(nodes=2, gpusPerNode=2)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=2, gpus=2)))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    warned = _Warned()
    real = suites.run_pytest
    monkeypatch.setattr(suites, "run_pytest", lambda a, plugins: real(a, [*plugins, warned]))
    assert main(["certify", str(tmp_path / "spec.yaml"), "--reports", str(tmp_path / "reports"), "-q"]) == 0
    said = [str(w.message) for w in warned.said if issubclass(w.category, pytest.PytestAssertRewriteWarning)]
    assert said == []
