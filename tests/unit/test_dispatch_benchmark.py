"""benchmarks/dispatch_scale.py --smoke: the kubernetes target's dispatch path through the real client against the
benchmark's fake API at 16 and 32 nodes; the requests a node adds are the same at both sizes, with one watch."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_dispatch_smoke_run_costs_the_same_per_node_at_two_sizes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports dispatch_fake beside it
    spec = importlib.util.spec_from_file_location("dispatch_scale", BENCHMARKS / "dispatch_scale.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "dispatch_scale", module)
    spec.loader.exec_module(module)
    assert module.smoke(max_parallel=8) == 0  # it asserts: every node collected, 1 create + 1 log + 1 delete each
    out = capsys.readouterr().out
    assert "each node adds: 1 create jobs, 1 delete jobs, 1 get pods/log" in out
    rows = [line for line in out.splitlines() if line.startswith(("| 16 |", "| 32 |"))]
    assert [r.split("|")[3].strip() for r in rows] == ["1", "1"]  # one watch per run
