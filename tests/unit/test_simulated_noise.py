"""The simulator's noise and the faults that come and go: a fleet as varied as hardware is, and nothing else changed.

The fleet contract's new keys are additive: a fleet that sets none of them measures exactly as before they existed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.evaluate.stats import median
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
# sha256 of gpu-node-1's and gpu-node-2's samples and health for the fleet in `_digest`, as gpucert measured it
# before the noise keys and the intermittent and drift faults existed (computed with that code, main at fd4bab6)
BEFORE = "9c6c173014343a54348e36f19eeea49ef9854471e5cdb70cd21cebbfb7e3c88d"


def target(tmp_path: Path, *, nodes: int = 4, **fleet: Any) -> SimulatedTarget:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "t"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "gpusPerNode": 8},
        "seed": 7,
        **fleet,
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    return SimulatedTarget(spec, load_fleet(tmp_path / "fleet.yaml", spec), {"H100-SXM5-80GB": load_baseline(BASELINE)})


def measure(t: SimulatedTarget, node: str, probes: tuple[Probe, ...] | None = None, **samples: int) -> NodeEvidence:
    return t.measure_node(node, MeasurePlan("r", probes or tuple(t.spec.certify.probes), 2, samples=samples))


FAST = (Probe.MEMORY, Probe.COMPUTE)  # what the statistical tests measure: no DCGM document, no P2P matrix


def test_a_fleet_without_the_new_keys_measures_exactly_as_before(tmp_path: Path) -> None:
    fault = {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.9}
    t = target(tmp_path, noise={"cv": 0.01}, faults=[fault])
    h = hashlib.sha256()
    for node in ("gpu-node-1", "gpu-node-2"):
        ev = measure(t, node)
        for g in ev.gpus:
            for m, meas in sorted(g.measurements.items()):
                h.update(json.dumps([node, g.index, m, list(meas.samples)]).encode())
            # the readings fleets have always had: the throttle windows (empty then) and NVLink errors came later
            health = g.health.model_dump(mode="json", exclude={"nvlink_errors"}) if g.health else None
            if health is not None:
                health["throttle_under_load"] = []
            h.update(json.dumps(health).encode())
        assert ev.p2p is not None
        assert ev.nccl is not None
        h.update(json.dumps([[p.src, p.dst, list(p.samples)] for p in ev.p2p.pairs]).encode())
        h.update(json.dumps([[p.size_bytes, list(p.busbw)] for p in ev.nccl.points]).encode())
    assert h.hexdigest() == BEFORE


def medians(t: SimulatedTarget, metric: str) -> np.ndarray:
    out = []
    for node in t.names:
        for g in measure(t, node, FAST).gpus:
            out.append(median(g.measurements[metric].samples))
    return np.array(out)


def test_gpu_spread_is_a_fixed_offset_per_board(tmp_path: Path) -> None:
    t = target(tmp_path, nodes=32, noise={"cv": 0.002, "gpuSpread": 0.02})
    m = medians(t, "memory.bandwidth")
    assert 0.016 < m.std() / m.mean() < 0.024  # 256 boards, sd 2% around the SKU figure
    again = medians(t, "memory.bandwidth")  # a board is what it is: measured again, the same offset
    assert np.array_equal(m, again)
    other = medians(t, "compute.gemm.bf16")  # drawn per metric
    assert abs(np.corrcoef(m, other)[0, 1]) < 0.3


@pytest.mark.parametrize("rho", [0.0, 0.8])
def test_metric_correlation_makes_a_boards_offsets_alike_across_its_metrics(tmp_path: Path, rho: float) -> None:
    """noise.metricCorrelation (an assumption the combined statistic's study varies): 0 draws each metric's offset
    independently (as before the key: the same figures), 0.8 shares most of the draw between a board's metrics."""
    noise = {"cv": 0.002, "gpuSpread": 0.02, "metricCorrelation": rho}
    t = target(tmp_path, nodes=32, noise=noise)
    m, other = medians(t, "memory.bandwidth"), medians(t, "compute.gemm.bf16")
    r = float(np.corrcoef(m, other)[0, 1])
    assert abs(r - rho) < 0.15, r
    assert 0.016 < m.std() / m.mean() < 0.024  # each metric's own spread is unchanged
    if not rho:
        (tmp_path / "plain").mkdir()
        plain = target(tmp_path / "plain", nodes=32, noise={"cv": 0.002, "gpuSpread": 0.02})
        assert np.array_equal(m, medians(plain, "memory.bandwidth"))


def test_node_spread_is_shared_by_a_nodes_gpus(tmp_path: Path) -> None:
    t = target(tmp_path, nodes=16, noise={"cv": 0.001, "nodeSpread": 0.03})
    per_node = medians(t, "memory.bandwidth").reshape(16, 8)
    within = per_node.std(axis=1).max() / per_node.mean()
    between = per_node.mean(axis=1).std() / per_node.mean()
    assert within < 0.003 < 0.015 < between


def test_tails_make_rare_deep_samples_and_slow_outliers(tmp_path: Path) -> None:
    def deep(noise: dict[str, Any]) -> float:
        t = target(tmp_path, nodes=8, noise=noise)
        xs = np.array(
            [
                x
                for n in t.names
                for g in measure(t, n, FAST, memory=200).gpus
                for x in g.measurements["memory.bandwidth"].samples
            ]
        )
        return float(np.mean(xs < 2900 * (1 - 0.04)))  # beyond 4 sd of cv 1%

    gaussian = deep({"cv": 0.01})
    student = deep({"cv": 0.01, "tails": {"df": 3}})
    outliers = deep({"cv": 0.01, "tails": {"outliers": 0.05, "depth": 0.2}})
    assert gaussian < 0.001 < student
    assert outliers > 0.03  # 5% of samples slowed by up to 20%: about three quarters of them past 4%


def samples_of(ev: NodeEvidence, gpu: int, metric: str) -> list[float]:
    g = ev.gpu(gpu)
    assert g is not None
    return g.measurements[metric].samples


def test_intermittent_fault_slows_a_fraction_of_the_samples_only(tmp_path: Path) -> None:
    fault = {"kind": "intermittent", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth"}
    t = target(tmp_path, noise={"cv": 0.005}, faults=[{**fault, "factor": 0.5, "fraction": 0.3}])
    xs = samples_of(measure(t, "gpu-node-2", FAST, memory=400), 3, "memory.bandwidth")
    slow = sum(x < 2900 * 0.75 for x in xs)
    assert 0.24 < slow / len(xs) < 0.36
    assert median(xs) > 2900 * 0.98  # the median hides it
    healthy = samples_of(measure(t, "gpu-node-2", FAST, memory=400), 2, "memory.bandwidth")
    assert min(healthy) > 2900 * 0.97


def test_drift_slows_a_measurement_over_its_samples(tmp_path: Path) -> None:
    fault = {"kind": "drift", "node": "gpu-node-1", "gpu": 0, "metric": "compute.gemm.bf16", "factor": 0.8}
    t = target(tmp_path, noise={"cv": 0.001}, faults=[fault])
    xs = samples_of(measure(t, "gpu-node-1"), 0, "compute.gemm.bf16")
    assert xs[0] > 700 * 0.99
    assert xs[-1] < 700 * 0.81
    assert all(a >= b * 0.995 for a, b in itertools.pairwise(xs))


def test_intermittent_fault_on_a_nodes_all_reduce(tmp_path: Path) -> None:
    fault = {"kind": "intermittent", "node": "gpu-node-3", "metric": "nccl.all_reduce", "factor": 0.6, "fraction": 0.5}
    t = target(tmp_path, noise={"cv": 0.002}, faults=[fault])
    ev = measure(t, "gpu-node-3", nccl=40)
    assert ev.nccl is not None
    top = ev.nccl.points[-1].busbw
    assert len(top) == 40
    assert 8 < sum(x < 0.8 * max(top) for x in top) < 32


def test_the_spec_sample_counts_reach_the_simulated_probes(tmp_path: Path) -> None:
    ev = measure(target(tmp_path, noise={"cv": 0.01}), "gpu-node-1", pcie=24, p2p=7)
    g = ev.gpu(0)
    assert g is not None
    assert ev.p2p is not None
    assert len(g.measurements["pcie.h2d"].samples) == 24
    assert len(g.measurements["memory.bandwidth"].samples) == 20  # the probe's own count where the spec asks fewer
    assert {len(p.samples) for p in ev.p2p.pairs} == {7}


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            {
                "kind": "intermittent",
                "node": "gpu-node-1",
                "gpu": 0,
                "metric": "p2p.bandwidth",
                "factor": 0.5,
                "fraction": 0.2,
            },
            "not measured by repetitions of one GPU or node",
        ),
        (
            {"kind": "drift", "node": "gpu-node-1", "gpu": 0, "metric": "nccl.all_reduce", "factor": 0.5},
            "one figure per node: remove `gpu`",
        ),
        (
            {"kind": "intermittent", "node": "gpu-node-1", "metric": "memory.bandwidth", "factor": 0.5, "fraction": 0},
            "fraction",
        ),
    ],
)
def test_faults_that_cannot_be_simulated_are_refused(tmp_path: Path, fault: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="faults") as exc:
        target(tmp_path, faults=[fault])
    assert message in str(exc.value)


def test_noise_keys_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"noise\.tails\.df"):
        target(tmp_path, noise={"tails": {"df": 2}})
    with pytest.raises(ConfigError, match=r"noise\.gpuSpred"):
        target(tmp_path, noise={"gpuSpred": 0.01})


def run_medians(t: SimulatedTarget, run_id: str, metric: str = "memory.bandwidth") -> np.ndarray:
    plan = MeasurePlan(run_id, FAST, 2)
    return np.array([median(g.measurements[metric].samples) for n in t.names for g in t.measure_node(n, plan).gpus])


def test_without_run_to_run_noise_every_run_of_a_board_measures_alike(tmp_path: Path) -> None:
    t = target(tmp_path, nodes=2, noise={"cv": 0.01, "gpuSpread": 0.01})
    a, b = run_medians(t, "2026-12-01T00-00-00Z-a"), run_medians(t, "2026-12-09T00-00-00Z-b")
    assert np.array_equal(a, b)


def test_run_to_run_noise_differs_between_runs_and_keeps_the_board_offset(tmp_path: Path) -> None:
    # sample noise small, so a median is the board's offset times its run's draw
    t = target(tmp_path, nodes=16, noise={"cv": 0.0005, "gpuSpread": 0.02, "runToRun": {"cv": 0.005}})
    runs = np.array([run_medians(t, f"2026-12-0{d}T00-00-00Z-x") for d in range(1, 9)])  # 8 runs x 128 GPUs
    again = run_medians(t, "2026-12-01T00-00-00Z-x")
    assert np.array_equal(again, runs[0])  # the same run id measures the same
    within = np.std(runs / runs.mean(axis=0), axis=0, ddof=1).mean()  # run-to-run, relative
    between = np.std(runs.mean(axis=0)) / runs.mean()  # the boards' fixed offsets
    assert 0.004 < within < 0.006
    assert 0.015 < between < 0.025


def test_run_to_run_noise_states_its_source(tmp_path: Path) -> None:
    t = target(tmp_path, noise={"runToRun": {}})
    assert t.fleet.noise.run_to_run is not None
    assert t.fleet.noise.run_to_run.cv == 0.005
    assert t.fleet.noise.run_to_run.source.startswith("assumption")
    with pytest.raises(ConfigError, match="runToRun"):
        target(tmp_path, noise={"runToRun": {"cv": 0.005, "source": ""}})


def test_degrade_slows_a_board_across_runs_by_its_rate_per_day(tmp_path: Path) -> None:
    fault = {"kind": "degrade", "node": "gpu-node-1", "gpu": 2, "metric": "memory.bandwidth", "perDay": 0.001}
    t = target(tmp_path, nodes=1, noise={"cv": 0.0005}, faults=[fault])
    day10 = run_medians(t, "2026-12-10T08-00-00Z-x")
    day40 = run_medians(t, "2027-01-09T08-00-00Z-x")
    ratio = day40 / day10
    assert ratio[2] == pytest.approx(0.999**30, abs=0.001)
    assert np.delete(ratio, 2) == pytest.approx(1.0, abs=0.002)  # the other boards do not wear
