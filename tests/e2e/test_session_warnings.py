"""A command's pytest session says no warning of its own making: its plugins named with -p (cli/suites.py PLUGINS)
are marked for assertion rewriting by those names (pytest 9.1.1, _pytest/config/__init__.py import_plugin ->
rewrite_hook.mark_rewrite(importspec)), and `gpucert` (the command's own package) and `html` (the standard library's,
which gpucert imports before pytest starts) are already imported: pytest's PytestAssertRewriteWarning for each, a
"warnings summary" under every certification. One 2 x 2 fleet (health only)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from .test_session_plugins import certify_watched


class _Warned:
    """Records each warning the session reports (what its terminal's warnings summary lists)."""

    def __init__(self) -> None:
        self.said: list[warnings.WarningMessage] = []

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        self.said.append(warning_message)


def test_a_certification_says_no_assertion_rewrite_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    warned = _Warned()
    assert certify_watched(tmp_path, monkeypatch, warned)[0] == 0
    said = [str(w.message) for w in warned.said if issubclass(w.category, pytest.PytestAssertRewriteWarning)]
    assert said == []
