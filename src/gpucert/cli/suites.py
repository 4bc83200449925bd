"""How a command runs pytest over a run folder it prepared: the suites the folder calls for, pytest's options for
a command's session, the plugins the command adds to it (`KeepVerdict`: the verdict as the session built it), and
`run_pytest`, the one call of pytest.main."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from gpucert.plan.runfolder import RunFolder
from gpucert.report.terminal import KEPT, WRITTEN
from gpucert.report.verdict_model import Verdict
from gpucert.resources import project_root

__all__ = ["PLUGINS", "KeepVerdict", "run_pytest", "run_suites"]

# The plugins of a command's session, by their pytest11 entry points' names, with pytest's autoloading of every
# installed entry point off (`_autoload`: on where PYTEST_ADDOPTS gives options): gpucert's own, pytest-html and the
# pytest-metadata it reads (report.html); pytest-xdist is added where -n asks for workers (its workers get the same
# arguments: xdist 3.8 workermanage.py sends invocation_params.args). Autoloading imported whatever else the
# environment holds (in a developer's, pytest-httpserver with werkzeug, platformdirs' and allure-pytest's): 0.07 s of
# a 1,024 x 8 re-test's CPU, none of it used. allure-pytest is not needed: gpucert writes the Allure results itself
# and adds --alluredir without it (report/alluredir.py). PYTEST_PLUGINS still adds a plugin to the session (pytest's
# consider_env).
PLUGINS = ("gpucert", "html", "metadata")
_ALREADY, _REWRITE = "Module already imported so cannot be rewritten; ", "pytest.PytestAssertRewriteWarning"


def _autoload() -> list[str]:
    """pytest's autoloading off, unless the environment gives pytest options (PYTEST_ADDOPTS, which pytest 9.1.1's
    Config._preparse puts before the command's arguments): they may be any installed plugin's (pytest-timeout's
    --timeout, xdist's --dist), which pytest refuses as unrecognized arguments unless that plugin is loaded, and it
    was before autoloading went off. Without a plugin's options the evaluation stopped at pytest's usage error."""
    return [] if os.environ.get("PYTEST_ADDOPTS", "").strip() else ["--disable-plugin-autoload"]


def run_suites(
    folder: RunFolder,
    workers: int | None,
    quiet: bool,
    signer: str | None = None,
    kept: KeepVerdict | None = None,
) -> int:
    root = project_root()
    args = [
        *(str(root / "suites" / s) for s in folder.suites),
        # the run folder alone: the session judges it by the spec and baselines in its inputs/, which this command
        # just copied there, and reads them once (Evaluation.from_run), not the user's files a second time
        "--run-dir",
        str(folder.path),
        "--rootdir",
        str(root),
        "-c",
        str(root / "pyproject.toml"),
        "-p",
        "no:cacheprovider",
        *_autoload(),
        *(arg for name in PLUGINS for arg in ("-p", name)),
        "-W",
        "default",
        # a plugin named by -p is marked for assertion rewriting by that name (pytest 9.1.1 import_plugin):
        # `gpucert` (this command's package) and `html` (the standard library's) are imported before pytest starts,
        # a PytestAssertRewriteWarning each under every run (tests/e2e/test_session_warnings.py); nothing to rewrite
        *(arg for name in ("gpucert", "html") for arg in ("-W", f"ignore:{_ALREADY}{name}:{_REWRITE}")),
        "--tb=no",
        "-o",
        "console_output_style=count",
    ]
    args += ["-qq"] if quiet else ["-q"]
    if workers:
        args += ["-p", "xdist", "-n", str(workers)]
    if signer:
        args += ["--signer", signer]
    return run_pytest(args, [kept] if kept is not None else [])


class _NoCollectionsAtEnd:
    """Keeps pytest's unraisableexception plugin from collecting the garbage at the session's end.

    pytest 9.1.1's plugin runs gc.collect() at its pytest_unconfigure and again at its cleanup
    (_pytest/unraisableexception.py: gc_collect_harder, once each on CPython), so that an unraisable exception of a
    finalizer of a cycle left at the end is reported by the session. Each is a full collection, which walks every
    live object of the run: at 1,024 x 8 (189,442 checks) 0.67 s of CPU each. Its own knob
    (`gc_collect_iterations_key`, "to allow pytester to override it") sets the count to 0. The plugin stays on: an
    unraisable exception raised during the session (by a finalizer run when its last reference goes, or by a
    collection during the run) still reaches its hook and is reported as a PytestUnraisableExceptionWarning (off,
    it would go to the check's captured stderr, dropped when the check passes). What is given up: cycles left at
    the very end are collected when the process next collects (a soak's next round, a test's process), their
    unraisable exceptions then reported by Python's hook on stderr, or never where the console script ends the
    process (cli/process.py `before_exit` gave that up already). A pytest without the knob (before 8.4) collects
    nothing at the end anyway."""

    def pytest_configure(self, config: pytest.Config) -> None:
        from _pytest import unraisableexception

        key = getattr(unraisableexception, "gc_collect_iterations_key", None)
        if key is not None:
            config.stash[key] = 0


def run_pytest(args: list[str], plugins: list[object]) -> int:
    """pytest.main over `args` with `plugins`, without pytest's collections at the end (_NoCollectionsAtEnd)."""
    return int(pytest.main(args, plugins=[*plugins, _NoCollectionsAtEnd()]))


class KeepVerdict:
    """Takes the verdict the session wrote, as the session built it: what the command prints, never re-read."""

    verdict: Verdict | None = None
    kept: str | None = None  # a re-test's line on what its carried nodes kept

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.verdict = config.stash.get(WRITTEN, None)
        self.kept = config.stash.get(KEPT, None)

    config: pytest.Config | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Generator[None, None, None]:
        """Ctrl-C stays an interrupted session (exit 3, its INCOMPLETE verdict printed), even when pytest fails to
        describe it. pytest 9.1.1's TerminalReporter.pytest_keyboard_interrupt (terminal.py) renders the interrupt
        with excinfo.getrepr(), which raises TypeError (_code/code.py TracebackEntry.lineno: tb_lineno is None)
        when the interrupt landed in a hook wrapper's teardown (pytest-html 4.2.0's pytest_runtest_makereport);
        raised in wrap_session's `except KeyboardInterrupt` (main.py), it left pytest.main as a traceback and exit
        1. The reporter is then given a plain interrupt to describe: its session summary needs one."""
        try:
            yield
        except Exception:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter") if self.config else None
            if reporter is not None:
                reporter.pytest_keyboard_interrupt(_plain_interrupt())
        return None


def _plain_interrupt() -> pytest.ExceptionInfo[BaseException]:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        return pytest.ExceptionInfo.from_current()
