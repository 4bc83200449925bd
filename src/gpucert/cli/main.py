"""The `gpucert` command: a thin layer over plan, measure, the pytest suites and the run folder, one module per
command group (certify, preflight, fleet, acceptance, reports); this one parses the command line and turns every
error gpucert raises into one line and its exit code.

Exit codes: 0 pass, 1 certification failed, 2 usage or configuration error, 3 could not complete.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from gpucert._version import __version__
from gpucert.cli.acceptance import add_acceptance_commands
from gpucert.cli.args import PATH_ERRNOS, Parser, os_error
from gpucert.cli.certify import add_run_commands, console
from gpucert.cli.fleet import add_fleet_commands
from gpucert.cli.history import add_history_command
from gpucert.cli.preflight import add_preflight_command
from gpucert.cli.process import THRESHOLDS, at_start, before_exit
from gpucert.cli.reports import add_report_commands
from gpucert.cli.soak import add_soak_command
from gpucert.errors import GpucertError, RunInterrupted

__all__ = ["THRESHOLDS", "at_start", "before_exit", "main"]

EXIT_USAGE, EXIT_INCOMPLETE = 2, 3


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="gpucert", description="Certify a GPU Kubernetes cluster.")
    p.add_argument("--version", action="version", version=f"gpucert {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    add_run_commands(sub)
    add_preflight_command(sub, console)
    add_soak_command(sub, console)
    add_fleet_commands(sub)
    add_acceptance_commands(sub)
    add_history_command(sub, console)
    add_report_commands(sub)
    return p


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: the measure phase deletes what it created


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse's one-line errors (2), --help and --version (0): returned, as any other
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code: int = args.func(args)
    except GpucertError as exc:
        print(f"gpucert: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a path the system refuses that no code path named: still one line, never a traceback
        print(f"gpucert: error: {os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE if exc.errno in PATH_ERRNOS else EXIT_INCOMPLETE
    except RunInterrupted as exc:
        print(f"gpucert: {exc.said()}", file=sys.stderr)
        return EXIT_INCOMPLETE
    except KeyboardInterrupt:
        print("gpucert: interrupted; the evidence measured so far is in the run folder", file=sys.stderr)
        return EXIT_INCOMPLETE
    return code


if __name__ == "__main__":
    at_start()
    status = main()
    before_exit()
    sys.exit(status)
