"""What the command's start loads (issue 28: a re-test's fixed cost): the command line is parsed without the modules
of commands it does not run. Measured with `python -X importtime`: the punch list's formats loaded the soak's
package (controller, fabric, rounds), the `schema` command the simulated fleet's models, and report.html's trend the
Prometheus client for the exporter's metric families; together ~0.1 s of CPU of every command, 62 modules."""

from __future__ import annotations

import subprocess
import sys

NOT_AT_START = ("prometheus_client", "gpucert.fleet.soak", "gpucert.spec.simulated_fleet")


def test_the_command_line_is_built_without_the_modules_of_other_commands() -> None:
    code = (
        "import sys; from gpucert.cli.main import _parser; _parser(); "
        f"print(*sorted(m for m in sys.modules if m.startswith({NOT_AT_START!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []
