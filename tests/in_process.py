"""The `gpucert` command run in the test's own process, for the e2e and integration tests that check what the command
says, writes and returns, where its process (its start, its signals, its exit) is not what they test."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

GPUCERT = [sys.executable, "-m", "gpucert.cli.main"]


def gpucert_here(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `gpucert` command run in this process: `gpucert.cli.main.main`, which `python -m gpucert.cli.main` calls,
    in the folder `cwd`, its stdout and stderr kept and its SIGTERM handler put back after. For tests of what the
    command says, writes and returns where its process is not what they test (its start, its signals, its exit):
    the command in its own process pays an interpreter's start, gpucert's imports and pytest's plugin loading again
    each time, most of what a small run costs (hostile-input tests: 98 s of CPU that way, 24 s here). What a process
    adds on its own (a traceback at exit, a C library writing to fd 2) these do not see; the tests that are about the
    process run it as a user does (tests/e2e/conftest.py `gpucert`)."""
    from gpucert.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    return subprocess.CompletedProcess([*GPUCERT, *args], code, out.getvalue(), err.getvalue())


def next_second() -> None:
    """Wait for the clock's next second, between two runs `gpucert_here` starts in one reports folder: run ids are to
    the second (a second run of a name in the same second is `<id>-2`), and a run in its own process took more than
    a second, so no two runs of a test ever shared one."""
    time.sleep(1 - time.time() % 1 + 0.01)
