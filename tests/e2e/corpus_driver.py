"""Runs `gpucert` once per argument list read from stdin (JSON), in this one process, and prints one JSON line:
per case the exit code, what it wrote to stdout and stderr, and the traceback of anything that escaped main()."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import sys
import traceback
from typing import Any


def run(argv: list[str]) -> dict[str, Any]:
    from gpucert.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = None
    raised = None
    handler = signal.getsignal(signal.SIGTERM)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's errors and --help
            code = exc.code
        except BaseException:  # what a user would see as a traceback
            raised = traceback.format_exc()
            err.write(raised)
        finally:
            signal.signal(signal.SIGTERM, handler)
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "raised": raised}


if __name__ == "__main__":
    argvs = json.loads(sys.stdin.read())
    print(json.dumps([run(a) for a in argvs]))
