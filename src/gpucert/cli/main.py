"""The `gpucert` command: a thin layer over plan, measure, the pytest suites and the run folder, one module per
command group (certify, preflight, fleet, acceptance, reports); this one parses the command line and turns every
error gpucert raises into one line and its exit code.

Exit codes: 0 pass, 1 certification failed, 2 usage or configuration error, 3 could not complete.
"""

from __future__ import annotations

import argparse
import gc
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
from gpucert.cli.reports import add_report_commands
from gpucert.cli.soak import add_soak_command
from gpucert.errors import GpucertError, RunInterrupted

__all__ = ["at_start", "before_exit", "main"]

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


# the cyclic collector's thresholds for a command's process: (young allocations before a young collection, young
# collections before a middle one, middle ones before a full one is considered); Python's are (700, 10, 10)
THRESHOLDS = (50_000, 20, 10)


def at_start() -> None:
    """The process runs one command and ends: the collector looks at young objects after 50,000 allocations instead
    of 700. A run builds a heap of long-lived objects (each node's evidence, each check's outcome) and leaves next to
    no garbage in cycles, yet with Python's thresholds every growth of that heap by a quarter cost a full collection
    walking all of it: a re-test at 1,024 x 8 ran 17 of them, 3.9 s of CPU, each finding 0-750 objects to free; with
    these none ran, the re-test's CPU 17.7 -> 15.0 s user, its peak RSS the same (508 MiB; benchmarks/RESULTS.md).
    Never called where the process goes on (tests call `main`)."""
    gc.set_threshold(*THRESHOLDS)


def before_exit() -> None:
    """The command has returned and the process is about to end: what it built is frozen (gc.freeze), so the
    interpreter's teardown does not walk it again. That walk, the collections at shutdown over every object the run
    left alive, was about a tenth of a certification's wall (32 x 8: 1.9-2.3 s after the command returned, 0.08 s
    frozen; benchmarks/RESULTS.md, issue 28). The teardown still runs as ever: atexit handlers (logging's, execnet's
    for xdist), buffered streams flushed, objects freed by their counts; only the cycles among frozen objects are
    not collected, and a process that ends needs nothing of them (os._exit, which skips all of it, gained 0.04 s
    more). Never called where the process goes on (tests call `main`)."""
    gc.freeze()


if __name__ == "__main__":
    at_start()
    status = main()
    before_exit()
    sys.exit(status)
