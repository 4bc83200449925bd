"""gpucert's pytest plugin (the `pytest11` entry point): the hooks, each handing its work to the room that owns it.

options: the options, parsed once into a typed value; session: the run opened at configure time (plan and measure
before collection), the controller's outcomes and the session's end; collection: parametrization over the
inventory and the plan's keys; outcomes: a check's pass, fail, skip, error or waiver; junit: JUnit's word.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from gpucert.pytest import collection, outcomes
from gpucert.pytest.collection import NodeGpus, check_key, check_keys, of_gpus
from gpucert.pytest.context import RunContext, run_context
from gpucert.pytest.options import add_options, options_of, parse_options
from gpucert.pytest.outcomes import CheckFailed, CheckSkipped, expect
from gpucert.pytest.session import open_run, refuse_blocked, start
from gpucert.report import alluredir

__all__ = ["CheckFailed", "CheckSkipped", "NodeGpus", "RunContext", "check_key", "check_keys", "expect", "run_context"]


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    add_options(parser, pluginmanager)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser) -> Generator[None]:
    yield
    alluredir.add_option_if_missing(parser, early_config.pluginmanager)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    options = parse_options(config)
    if not hasattr(config, "workerinput") and (options.spec is not None or options.run_dir is not None):
        refuse_blocked(config)  # before any run folder is made (a worker's controller has said it)
    ctx = open_run(config, options)
    if ctx is not None:
        start(config, ctx, options)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    ctx = run_context(node.config)
    if ctx is not None:
        node.workerinput["gpucert_run_dir"] = str(ctx.folder.path)


def pytest_sessionstart(session: pytest.Session) -> None:
    if run_context(session.config) is not None:
        alluredir.take_over(session.config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    ctx = run_context(config)
    if ctx is not None:
        return [f"gpucert: spec {ctx.spec.metadata.name}, run folder {ctx.folder.path}"]
    options = options_of(config)
    if options.spec is not None and not options.runs_tests:
        return [
            "gpucert: this session runs no tests, so it plans and measures nothing; the checks are parametrized "
            "over a run's inventory (add --evidence DIR to list those of a recorded run)"
        ]
    return []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    ctx = run_context(metafunc.config)
    if ctx is not None:
        collection.parametrize(metafunc, ctx)


def pytest_itemcollected(item: pytest.Item) -> None:
    """As each item is collected, before `-k` deselects (pytest_collection_modifyitems): every check id it decides."""
    if run_context(item.config) is not None:
        collection.keyword_checks(item)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ctx = run_context(config)
    if ctx is not None:
        collection.keep_required(ctx, items)
        ctx.collection_done = True
    elif options_of(config).runs_tests:
        collection.refuse_suites_without_spec(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    ctx = run_context(session.config)
    if ctx is not None:
        collection.record_selected(session, ctx)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    ctx = run_context(item.config)
    keys = check_keys(item) if ctx is not None else ()
    if ctx is not None and keys:
        outcomes.judge_report(item, call, report, ctx, keys, of_gpus=of_gpus(item))
    return report
