"""The `gpucert` command's entry point (also `python -m gpucert`): loads the CLI under a guard, so a Ctrl-C while
its libraries import (pytest, rich, pydantic take a second) is an interrupt (exit 3) in one line, not a traceback."""

from __future__ import annotations

import sys

__all__ = ["main"]

EXIT_INCOMPLETE = 3


def main() -> int:
    """The command's exit code, the process then to end (the console script exits with it): what the command built
    is frozen first, so the interpreter's teardown does not walk it again (cli/process.py, `before_exit`)."""
    try:
        from gpucert.cli.main import at_start, before_exit
        from gpucert.cli.main import main as cli_main
    except KeyboardInterrupt:
        print("gpucert: interrupted while starting; nothing was run", file=sys.stderr)
        return EXIT_INCOMPLETE
    at_start()  # the collector tuned for one command's process (cli/process.py)
    code = cli_main()
    before_exit()
    return code


if __name__ == "__main__":
    sys.exit(main())
