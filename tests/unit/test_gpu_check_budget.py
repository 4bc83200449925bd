"""benchmarks/gpu_check.py's time budget: the quick profile certifies one 8-GPU node in under 60 s of probe time."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_the_quick_profile_fits_one_8_gpu_node_in_60_s() -> None:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None
    assert spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    rows = dict(gpu_check.budget_estimate(8, "quick"))
    assert sum(rows.values()) < 60
    assert rows["p2p, 56 ordered pairs"] > 0
    assert "nccl sweep, 5 sizes to 8 GiB" in rows  # the sweep reaches the size the baselines quote
    assert sum(dict(gpu_check.budget_estimate(8, "full")).values()) > 60  # the arithmetic does tell profiles apart
