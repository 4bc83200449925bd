"""`--alluredir` as allure-pytest users know it, with or without allure-pytest installed.

allure-pytest (allure_pytest/plugin.py, 2.16.2) adds `--alluredir` (dest `allure_report_dir`) to pytest's
"reporting" group; gpucert adds the same option to its own group when allure-pytest is absent. Two plugins adding
one option string to different groups is an argparse conflict at parse time (`argument --alluredir: conflicting
option string`), whichever loads first, so gpucert adds it only where allure-pytest will not.

When both are active in a certification, gpucert is the one writer: allure-pytest's listener (registered as
"allure_listener" in its pytest_configure) is unregistered, so the folder holds gpucert's results, one per check
and node, and not also allure-pytest's four files per test item for the same checks.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

__all__ = ["add_option", "add_option_if_missing", "results_dir", "take_over"]

PLUGIN = "allure_pytest"  # allure-pytest's pytest11 entry point name (its dist-info entry_points.txt)
OPTION = "--alluredir"


def _registered(pm: pytest.PytestPluginManager) -> bool:
    """allure-pytest is loaded, by entry point, `-p allure_pytest`, `-p allure_pytest.plugin` or PYTEST_PLUGINS."""
    return any(getattr(p, "__name__", "").startswith(PLUGIN) for p in pm.get_plugins())


def _may_load_later(pm: pytest.PytestPluginManager) -> bool:
    """allure-pytest may still register after gpucert: from its entry point (entry points load in no set order), or
    with autoload off from a `-p` that follows gpucert's."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return True
    if pm.is_blocked(PLUGIN):
        return False
    return any(ep.name == PLUGIN for ep in importlib.metadata.entry_points(group="pytest11"))


def _add(parser: pytest.Parser) -> None:
    parser.getgroup("gpucert").addoption(
        OPTION,
        dest="allure_report_dir",
        metavar="DIR",
        help="also write the Allure results here (as allure-pytest's --alluredir; gpucert is the one writer)",
    )


def add_option(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """From gpucert's pytest_addoption: add --alluredir unless allure-pytest has or may (then it waits)."""
    if not (_registered(pluginmanager) or _may_load_later(pluginmanager)):
        _add(parser)


def add_option_if_missing(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """After every plugin and the initial conftests have loaded: add --alluredir if allure-pytest did not."""
    ours = any(OPTION in o.names() for o in parser.getgroup("gpucert").options)
    if not ours and not _registered(pluginmanager):
        _add(parser)


def results_dir(config: pytest.Config) -> Path | None:
    value = config.getoption("allure_report_dir", None)
    return Path(value).absolute() if value else None


def take_over(config: pytest.Config) -> None:
    """Make gpucert the one writer of --alluredir in a certification: unregister allure-pytest's listener."""
    listener = config.pluginmanager.get_plugin("allure_listener")
    if listener is None:
        return
    # only from pytest: it gets no test items, so writes nothing; it stays in allure_commons' manager, whose
    # cleanup (allure-pytest's cleanup_factory) unregisters it by name and would fail on a plugin already gone
    config.pluginmanager.unregister(listener)
