"""How long a node's probes may take, from its plan: DCGM's timeout and the probe Job's deadline.

The probe, not the kubelet, must be the one to report a timeout: a Job killed at its activeDeadlineSeconds loses
the probe that was running (and, before the framed parts, everything). So DCGM's own timeout is the level's
time, the Job's deadline is every probe's budget with each watchdog's margin on top of DCGM's, and a margin
beyond that: whatever overruns is stopped and reported by the probe first.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpucert.measure.probes import nccl
from gpucert.measure.probes.preflight import STEP_S, steps_for
from gpucert.measure.probes.stream import METRICS
from gpucert.spec.cluster import Probe

if TYPE_CHECKING:
    from gpucert.measure.probes.probe_plan import ProbePlan

__all__ = [
    "DCGM_LEVEL_S",
    "FABRIC_FLOOR_BPS",
    "MARGIN_S",
    "dcgm_seconds",
    "fabric_seconds",
    "job_seconds",
    "sweep_limit_s",
]

# `dcgmi diag -r LEVEL`, with room for an 8-GPU node: DCGM's documentation of the run levels says seconds for r1,
# about 2 minutes for r2, about 15 for r3 and 1-2 hours for r4 (memtest and pulse_test at their defaults)
DCGM_LEVEL_S = {1: 300, 2: 900, 3: 3600, 4: 3 * 3600}
MARGIN_S = 300  # process start, NVML readings before and after, writing the document


def dcgm_seconds(level: int) -> float:
    """DCGM's timeout at `level` (the probe reports `dcgmi diag -r LEVEL did not finish in N s` past it)."""
    return float(DCGM_LEVEL_S.get(level, max(DCGM_LEVEL_S.values())))


def _probes_seconds(plan: ProbePlan, gpus: int) -> float:
    """Every timed region's budget, and one watchdog margin per GPU and per node-level probe (each may hang once:
    a hung GPU is left out of what follows)."""
    b = plan.budget
    region = b.warmup_s + b.measure_s
    regions = sum(gpus * len(METRICS[p]) for p in METRICS if p in plan.probes)
    hangs = gpus if regions else 0
    if Probe.PCIE in plan.probes and gpus > 1:  # every GPU copying at once, each direction (one watchdog)
        regions += 2
        hangs += 1
    if Probe.P2P in plan.probes and gpus > 1:  # each ordered pair one way, then each pair both ways at once
        regions += gpus * (gpus - 1) + gpus * (gpus - 1) // 2
        hangs += 2
    if Probe.NCCL in plan.probes and gpus > 1:
        regions += len(plan.sizes.nccl_sizes)
        hangs += 1
    return regions * region + hangs * b.watchdog_s


def job_seconds(plan: ProbePlan, gpus: int) -> int:
    """The probe Job's activeDeadlineSeconds for a node of `gpus` GPUs: the preflight, DCGM, the probes, a margin."""
    preflight = len(steps_for(set(plan.probes), on_gpu=plan.device == "cupy", fabric=plan.fabric)) * STEP_S
    dcgm = (plan.dcgm.timeout_s or dcgm_seconds(plan.dcgm.level)) if Probe.DCGM in plan.probes else 0.0
    return math.ceil(preflight + dcgm + _probes_seconds(plan, gpus) + MARGIN_S)


def fabric_seconds(plan: ProbePlan, rendezvous_s: float) -> int:
    """The all-reduce across nodes: every process's rendezvous, its sweep under the watchdog, a pair's RDMA per
    rail (a fabric plan), a margin."""
    from gpucert.measure.probes.fabric_pair import PairPlan

    sweep = sweep_limit_s(plan)
    pair = PairPlan()
    rdma = pair.reps * (pair.timeout_s + 1.0) if plan.fabric else 0.0  # every repetition of every rail, at worst
    return math.ceil(len(steps_for({Probe.NCCL}, on_gpu=True)) * STEP_S + rendezvous_s + sweep + rdma + MARGIN_S)


# bytes/s of bus bandwidth below which the sweep across nodes is called hung, not timed: a single 50 Gb/s port
FABRIC_FLOOR_BPS = 5e9


def sweep_limit_s(plan: ProbePlan) -> float:
    """How long the sweep across nodes may take before it counts as hung: the watchdog, a timed region per size, and
    the time its bytes take at FABRIC_FLOOR_BPS (a repetition counted for the warm-up). Without the last term an 8 GiB
    sweep over one 100 Gb/s port outran the limit and was reported as a hung fabric."""
    b = plan.budget
    sizes = plan.sizes.nccl_sizes
    moved = 2 * sum(sizes) * (max(b.min_reps, 1) + 1) * nccl.DEFAULT_ITERS  # an all-reduce moves < 2x its bytes
    return b.watchdog_s + len(sizes) * (b.warmup_s + b.measure_s) + moved / FABRIC_FLOOR_BPS
