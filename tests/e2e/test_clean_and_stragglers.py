"""A clean fleet passes whatever the seed; a GPU 7% slow inside the baseline is caught as a straggler."""

from __future__ import annotations

import pytest

from .conftest import fleet_doc

REALISTIC = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}}


# five seeds in make test; the false-alarm rate over many clean fleets is benchmarks/detection.py's study
@pytest.mark.parametrize("seed", range(0, 20, 4))
def test_clean_fleet_passes_every_check(certify, seed: int) -> None:
    """Whatever the seed, with boards that differ as much as real ones do (the example fleets' noise)."""
    run = certify(fleet_doc(seed=seed, noise=REALISTIC))
    assert run.verdict["result"] == "pass", [f["message"] for f in run.verdict["findings"]]
    assert run.verdict["summary"]["failed"] == 0
    assert run.verdict["summary"]["errors"] == 0
    # the only skip a clean fleet may have is none at all
    assert run.verdict["summary"]["skipped"] == 0
    assert run.items_agree() == {"passed": len(run.items.items)}


def test_seven_percent_slow_gpu_is_a_straggler_inside_the_baseline(certify) -> None:
    fault = {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.93}
    run = certify(fleet_doc([fault]))
    assert run.findings == {("straggler.memory.bandwidth", "gpu-node-2", 3)}
    (f,) = run.verdict["findings"]
    # inside the baseline: the observed value is above the baseline's limit (2900 x 0.92)
    assert f["observed"] > 2900 * 0.92
    assert "median of 60 samples" in f["message"]  # the default count (spec.cluster.DEFAULT_SAMPLES)
    assert "7 peers on gpu-node-2" in f["message"]
    assert "fleet median over 32 GPUs" in f["message"]


@pytest.mark.parametrize("cv", [0.01, 0.02])
def test_a_slow_node_is_one_finding_and_its_gpus_skip_with_it(certify, cv: float) -> None:
    """One root cause, one finding: a node whose every GPU is 6% behind is one node-level finding naming its GPUs'
    figures (before: eight per-GPU findings, and at cv 2% only some of them)."""
    fault = {"kind": "slow", "node": "gpu-node-2", "metric": "memory.bandwidth", "factor": 0.94}
    run = certify(fleet_doc([fault], cv=cv))
    assert run.findings == {("straggler.memory.bandwidth", "gpu-node-2", None)}
    (f,) = run.verdict["findings"]
    assert "the node as a whole is behind" in f["message"]
    assert all(f"gpu{g} " in f["message"] for g in range(8))
    assert run.verdict["summary"]["skipped"] == 8
    assert run.verdict["coverage"]["skips"] == [{"cause": "straggler.memory.bandwidth@gpu-node-2", "checks": 8}]
    assert run.verdict["result"] == "fail"
    assert run.verdict["coverage"]["complete"] is True


def test_verdict_is_the_same_with_xdist(certify, pytester) -> None:
    faults = [
        {"kind": "ecc", "node": "gpu-node-1", "gpu": 5, "uncorrected": 2},
        {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.93},
        {
            "kind": "intermittent",
            "node": "gpu-node-3",
            "gpu": 1,
            "metric": "memory.bandwidth",
            "factor": 0.7,
            "fraction": 0.3,
        },
        {"kind": "slow", "node": "gpu-node-4", "metric": "compute.gemm.fp64", "factor": 0.92},
    ]
    serial = certify(fleet_doc(faults))
    for run_dir in (pytester.path / "reports").iterdir():
        run_dir.rename(pytester.path / "serial-run")
    parallel = certify(fleet_doc(faults), "-n", "2")
    parallel.result.stdout.fnmatch_lines(["*2 workers*"])
    assert {f["check"] for f in serial.verdict["findings"]} >= {
        "stability.memory.bandwidth",
        "straggler.compute.gemm.fp64",
    }
    for key in ("result", "coverage", "summary", "findings", "fleet", "fleetAgainstSku", "undecided"):
        assert parallel.verdict[key] == serial.verdict[key], key
    # per node the same, but for when each run measured it
    for node, s in serial.verdict["nodes"].items():
        assert {**parallel.verdict["nodes"][node], "measured": None} == {**s, "measured": None}, node
