"""The probe Job's deadline comes from the plan (issue 21, item 9): DCGM level 4's timeout no longer equals the
Job's activeDeadlineSeconds, so DCGM, not the kubelet, reports a diagnostic that overran."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucert.measure.probes.deadline import DCGM_LEVEL_S, MARGIN_S, dcgm_seconds, fabric_seconds, job_seconds
from gpucert.measure.probes.preflight import STEP_S
from gpucert.measure.probes.runner import DcgmPlan, ProbePlan, run_plan
from gpucert.spec.cluster import Probe

from .fake_nvml import eight_gpus, fake_nvml


def gpu_plan(level: int, probes: list[Probe] | None = None) -> ProbePlan:
    return ProbePlan(run_id="r", node="n", device="cupy", probes=probes or list(Probe), dcgm=DcgmPlan(level=level))


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_the_job_outlives_dcgm_and_every_probe(level: int) -> None:
    plan = gpu_plan(level)
    deadline = job_seconds(plan, 8)
    without_dcgm = job_seconds(gpu_plan(level, [p for p in Probe if p is not Probe.DCGM]), 8)
    # DCGM's own timeout inside it, and the preflight's `dcgmi --version`
    assert deadline - without_dcgm == dcgm_seconds(level) + STEP_S == DCGM_LEVEL_S[level] + STEP_S
    assert without_dcgm > 8 * plan.budget.watchdog_s + MARGIN_S  # room for every GPU's watchdog to fire once
    assert deadline != 7200


def test_level_4_no_longer_equals_the_jobs_deadline() -> None:
    # before: DcgmPlan.timeout_s 7200 and activeDeadlineSeconds 7200, so the kubelet killed the pod first
    plan = gpu_plan(4)
    assert dcgm_seconds(4) > 7200  # memtest and pulse_test on 8 GPUs take 1-2 hours: 7200 s was too short anyway
    assert job_seconds(plan, 8) > dcgm_seconds(4) + 1000


def test_more_gpus_more_time_and_the_fabric_has_its_own() -> None:
    plan = gpu_plan(2)
    assert job_seconds(plan, 8) > job_seconds(plan, 4) > job_seconds(plan, 1)
    assert fabric_seconds(plan, 660) > 660 + plan.budget.watchdog_s


def test_the_probe_reports_dcgm_overrunning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "dcgmi"
    exe.write_text("#!/bin/sh\nsleep 5\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    plan = ProbePlan(
        run_id="r", node="n", device="numpy", gpus=1, probes=[Probe.DCGM], dcgm=DcgmPlan(level=4, timeout_s=0.5)
    )
    ev = run_plan(plan, nvml=fake_nvml(*eight_gpus()[:1]))
    assert ev.dcgm is not None
    assert ev.dcgm.runtime_error == "dcgmi diag -r 4 did not finish in 0 s"  # the probe's word, in its document


def test_the_deadline_counts_the_concurrent_pcie_and_bidirectional_p2p_regions() -> None:
    """Review of issue 21 items 9 and 15: the runner also times PCIe with every GPU copying at once (one region per
    direction, under one watchdog) and each pair of GPUs copying both ways at once (n(n-1)/2 regions, under the
    P2P watchdog); a deadline that leaves them out is short by their time and their watchdogs."""
    b = gpu_plan(2).budget
    region = b.warmup_s + b.measure_s
    alone = {p: job_seconds(gpu_plan(2, [Probe.HEALTH, p]), 8) for p in (Probe.PCIE, Probe.P2P)}
    base = job_seconds(gpu_plan(2, [Probe.HEALTH]), 8)
    # one-at-a-time h2d and d2h per GPU with the GPU's watchdog, then both directions all at once with one more
    assert alone[Probe.PCIE] - base == pytest.approx(
        8 * 2 * region + 8 * b.watchdog_s + 2 * region + b.watchdog_s, abs=1
    )
    # 56 ordered pairs one way and 28 pairs both ways, each stage under its own watchdog
    assert alone[Probe.P2P] - base == pytest.approx(56 * region + 28 * region + 2 * b.watchdog_s, abs=1)


def test_a_slow_but_working_fabric_is_timed_not_called_hung() -> None:
    # One 100 Gb/s port gives an all-reduce at most ~12 GB/s of bus bandwidth; the sweep moves up to twice its sizes
    # per all-reduce, nccl.DEFAULT_ITERS per sample, min_reps samples and a warm-up. Before, the limit was the
    # watchdog plus 1.2 s per size (about 130 s), less than the 8 GiB sweep takes over such a port.
    from gpucert.measure.probes import nccl
    from gpucert.measure.probes.deadline import FABRIC_FLOOR_BPS, sweep_limit_s

    plan = gpu_plan(2, [Probe.NCCL])
    b, sizes = plan.budget, plan.sizes.nccl_sizes
    at_100g = 2 * sum(sizes) * (b.min_reps + 1) * nccl.DEFAULT_ITERS / 12e9
    assert sweep_limit_s(plan) > b.watchdog_s + at_100g
    assert FABRIC_FLOOR_BPS <= 6.25e9  # a single 50 Gb/s port is still timed
    assert fabric_seconds(plan, 660) > 660 + sweep_limit_s(plan)  # the Job outlives the probe's own limit


def test_a_fabric_pairs_job_has_time_for_its_rdma_too() -> None:
    from gpucert.measure.probes.fabric_pair import PairPlan

    plan = ProbePlan(run_id="r", node="n")
    more = fabric_seconds(plan.model_copy(update={"fabric": True}), 660) - fabric_seconds(plan, 660)
    assert more >= PairPlan().reps * PairPlan().timeout_s
