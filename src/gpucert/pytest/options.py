"""gpucert's pytest options: declared in one group, read once at configure time into a frozen `Options` kept in
`config.stash`. Every later hook reads the typed value, never `config.getoption`; a combination that cannot run
is a `pytest.UsageError` (exit 4) that says the fix, before anything is planned or measured."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpucert.cli.args import non_empty
from gpucert.report import alluredir

__all__ = ["Options", "add_options", "options_of", "parse_options"]

# pytest's options that only list or show (--co, --help, --fixtures, ...): a session with one of them runs no test
SHOWS = (
    "help",
    "markers",
    "collectonly",
    "showfixtures",
    "show_fixtures_per_test",
    "setupplan",
    "setuponly",
    "cacheshow",
)
# the options that each choose a different run; their order is the order a usage error names them in
CHOICES = ("static", "evidence", "no_measure", "run_dir")


def _fingerprint(text: str) -> str:
    """What `gpucert keygen` prints for a key: the report shows it, so it says nothing else."""
    if not re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a key fingerprint (SHA256:... as `gpucert keygen` prints)")
    return text


def add_options(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("gpucert", "gpucert cluster certification")
    group.addoption(
        "--spec", metavar="SPEC", type=non_empty, help="ClusterSpec to certify: plan, measure and evaluate it"
    )
    group.addoption(
        "--evidence",
        metavar="DIR",
        type=non_empty,
        help="re-evaluate recorded evidence (a run folder or its evidence/) instead of measuring",
    )
    group.addoption(
        "--reports",
        metavar="DIR",
        type=non_empty,
        default="reports",
        help="where the run folder is created (default: ./reports)",
    )
    group.addoption(
        "--run-dir",
        metavar="DIR",
        type=non_empty,
        help="evaluate this prepared run folder in place, by the spec and baselines it was prepared with (used by "
        "the CLI; a --spec given beside it must be that spec)",
    )
    group.addoption("--no-measure", action="store_true", help="plan only: configure checks need no evidence")
    group.addoption("--static", action="store_true", help="no cluster at all: the static recipe gate")
    group.addoption(
        "--signer",
        metavar="FINGERPRINT",
        type=_fingerprint,
        help="the key that will sign this run, shown in the report",
    )
    alluredir.add_option(parser, pluginmanager)


@dataclass(frozen=True, slots=True)
class Options:
    """What the session was asked to do, parsed and checked once."""

    spec: Path | None  # None and no --run-dir: no gpucert run in this session (a suite run is a usage error)
    reports: Path
    evidence: Path | None = None
    run_dir: Path | None = None
    no_measure: bool = False
    static: bool = False
    signer: str | None = None
    runs_tests: bool = True  # False for --co, --help, --fixtures, ...: such a session never plans or measures


_key = pytest.StashKey[Options]()


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def parse_options(config: pytest.Config) -> Options:
    """Read gpucert's options once into `config.stash`; pytest.UsageError naming the fix for a combination that
    cannot run."""
    get = config.getoption
    chosen = [f"--{name.replace('_', '-')}" for name in CHOICES if get(name)]
    if get("spec") is None and get("evidence"):
        raise pytest.UsageError("--evidence needs --spec SPEC: the spec says what to check the evidence against")
    if (get("spec") is not None or get("run_dir")) and len(chosen) > 1:
        raise pytest.UsageError(f"{' and '.join(chosen)} choose different runs: give one of them")
    options = Options(
        spec=_path(get("spec")),
        reports=Path(str(get("reports"))),
        evidence=_path(get("evidence")),
        run_dir=_path(get("run_dir")),
        no_measure=bool(get("no_measure")),
        static=bool(get("static")),
        signer=get("signer"),
        runs_tests=not any(getattr(config.option, name, False) for name in SHOWS),
    )
    config.stash[_key] = options
    return options


def options_of(config: pytest.Config) -> Options:
    """The options `parse_options` read (at configure time; before it, or if it refused them, read them now)."""
    found = config.stash.get(_key, None)
    return found if found is not None else parse_options(config)
