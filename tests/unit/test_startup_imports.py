"""What the command's start loads, and how its process collects (issue 28: a re-test's fixed cost). The command
line is built without the modules of commands it does not run (measured with `python -X importtime`: the punch
list's formats loaded the soak's package, the `schema` command the simulated fleet's models, and report.html's trend
the Prometheus client for the exporter's metric families; together ~0.1 s of CPU of every command, 62 modules)."""

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


def test_the_console_script_tunes_the_collector_for_its_one_command_and_main_leaves_it_alone() -> None:
    """A command's process builds a heap that lives to its end: the console script raises the collector's thresholds
    (cli/main.py at_start: a 1,024 x 8 re-test ran 17 full collections, 3.9 s of CPU, with Python's); `main`, which
    tests call in their own process, does not touch them."""
    code = (
        "import gc, sys; from gpucert.cli.main import main; main(['--version']); print(*gc.get_threshold()); "
        "from gpucert.__main__ import main as script; sys.argv = ['gpucert', '--version']; script(); "
        "print(*gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    (before, after) = [line for line in out.splitlines() if not line.startswith("gpucert")]
    assert before == "700 10 10"  # Python's own
    assert after == "50000 20 10"


def test_a_one_command_process_stops_collecting_for_its_evaluation_and_no_other_does() -> None:
    """The console script's process stops the cyclic collector when what is left is the evaluation and the
    signature (cli/process.py stop_collecting: 0.53 -> 0.15 s of a 1,024 x 8 re-test's CPU in collections); it
    still collects while it plans and measures, and a process the script does not own (a test's) never stops."""
    code = (
        "import gc; from gpucert.cli import certify, process; from gpucert.plan.run import Mode; "
        "from gpucert.resources import project_root; seen = []; "
        "certify._prepare = lambda *a, **k: seen.append(gc.isenabled()); "
        "certify.evaluate_run = lambda *a, **k: seen.append(gc.isenabled()) or 0; "
        "spec = str(project_root() / 'examples' / 'demo.yaml'); "
        "certify._run(spec, 'reports', Mode.PLAN); process.at_start(); certify._run(spec, 'reports', Mode.PLAN); "
        "print(*seen)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "True", "False"]  # not owned: prepare, evaluate; owned: prepare, evaluate
