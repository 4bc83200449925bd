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


def test_a_sample_floor_costs_only_where_the_time_budget_took_fewer() -> None:
    """The full profile's 1 s budget already takes 100 samples of an H200's memory and 16-bit and tf32 GEMMs
    (max_reps), about 45 of fp32/fp64 and 50 of PCIe: the default of 60 (spec.cluster.DEFAULT_SAMPLES) lengthens
    those only."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None
    assert spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    before = dict(gpu_check.budget_estimate(8, "full"))
    after = dict(gpu_check.budget_estimate(8, "full", samples=60))
    grew = {k for k in before if after[k] > before[k] + 1e-9}
    assert "8 GPUs x memory.bandwidth" not in grew
    assert "8 GPUs x compute.gemm.tf32" not in grew
    fp = {f"8 GPUs x compute.gemm.{t}" for t in ("fp32", "fp64")}
    assert {*fp, "8 GPUs x pcie.h2d", "8 GPUs x pcie.d2h"} <= grew
    assert 5 < sum(after.values()) - sum(before.values()) < 20  # 10.6 s on an 8-GPU node
