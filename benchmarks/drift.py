"""Drift study: how often `drift.<metric>` catches a GPU fallen against its own history, and how often it flags a
healthy one, on simulated fleets with board spread, node spread, heavy tails and run-to-run noise.

Each fleet is measured by gpucert's simulator (SimulatedTarget.measure_node, one run id per run: each run draws its
own run-to-run offsets) HISTORY times, then once more with the faulty GPU slowed; every GPU is judged by gpucert's
own drift rule (rules/drift.py: the same functions the `drift` family calls, with the same repeatability, the
pooled spread where a board's own history is short, and the bar for every board and metric of a run) without the
run folders and pytest around it, so thousands of fleets fit in minutes. Only memory.bandwidth is measured; the bar
counts the eight drift metrics a real run judges per GPU.

    .venv/bin/python benchmarks/detection.py --drift [--seeds 30] [--results benchmarks/RESULTS.md]
    .venv/bin/python benchmarks/detection.py --drift --smoke     # a tiny study: the code path, in seconds
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import yaml
from results import write_section

from gpucert.evaluate.rules.drift import (
    DEFAULT_CONFIDENCE,
    DEFAULT_LIMIT,
    Earlier,
    drift_bar,
    judge_drift,
    own_repeatability,
    pooled_repeatability,
)
from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.stats import mad, median
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.plan.checks import CheckStatus
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[1]
METRIC = "memory.bandwidth"
DRIFT_METRICS_PER_GPU = 8  # memory, five GEMM dtypes, two PCIe directions: what a real run's bar counts
TARGET = ("gpu-node-2", 3)
REAL = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}}


def _target(tmp: Path, nodes: int, seed: int, rr: float, drop: float) -> SimulatedTarget:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    faults = []
    if drop:
        faults = [{"kind": "slow", "node": TARGET[0], "gpu": TARGET[1], "metric": METRIC, "factor": round(1 - drop, 4)}]
    doc: dict[str, Any] = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "drift"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "gpusPerNode": 8},
        "seed": seed,
        "noise": {**REAL, "runToRun": {"cv": rr, "source": "the study's setting"}},
        "faults": faults,
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(doc))
    baseline = load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    return SimulatedTarget(spec, load_fleet(tmp / "fleet.yaml", spec), {"H100-SXM5-80GB": baseline})


def _medians(t: SimulatedTarget, run: str, nodes: list[str] | None = None) -> dict[tuple[str, int], Earlier]:
    plan = MeasurePlan(run, (Probe.MEMORY,), 2)
    out = {}
    for node in nodes or t.names:
        for g in t.measure_node(node, plan).gpus:
            s = g.measurements[METRIC].samples
            m = median(s)
            out[(node, g.index)] = Earlier(run, run, m, spread=1.4826 * mad(s, m) / m, n=len(s))
    return out


def _judge(now: dict[tuple[str, int], Earlier], earlier: dict[tuple[str, int], list[Earlier]], drop: float,
           history: int) -> tuple[bool, int, int]:  # fmt: skip
    bar = drift_bar(len(now) * DRIFT_METRICS_PER_GPU, DEFAULT_CONFIDENCE)
    ratios = [now[k].median / (sum(e.median for e in earlier[k]) / history) for k in now]
    pooled = pooled_repeatability(ratios, [history] * len(ratios))
    caught, flagged = False, 0
    for k, fig in now.items():
        own = own_repeatability(earlier[k])
        f = judge_drift(
            METRIC,
            k[0],
            k[1],
            Sampled(fig.median, fig.n, "GB/s"),
            earlier[k],
            repeatability=own if own is not None else pooled,
            bar=bar,
            limit=DEFAULT_LIMIT,
        )
        bad = f.status is not CheckStatus.PASS
        if k == TARGET and drop:
            caught = bad
        else:
            flagged += bad
    return caught, flagged, len(now) - (1 if drop else 0)


def one_fleet(
    tmp: Path, nodes: int, seed: int, rr: float, drops: tuple[float, ...], history: int
) -> list[tuple[bool, int, int]]:
    """Per fall in `drops`: (the faulty GPU caught, healthy GPUs flagged, healthy GPUs judged) on one fleet. The
    fleet's earlier runs and its last run are measured once; only the faulty node is measured again per fall (the
    simulator draws each node from its own generator, so the others are the same)."""
    healthy = _target(tmp, nodes, seed, rr, 0.0)
    runs = [_medians(healthy, f"2026-12-{d + 1:02d}T00-00-00Z-study") for d in range(history)]
    last = f"2026-12-{history + 1:02d}T00-00-00Z-study"
    clean_now = _medians(healthy, last)
    earlier = {k: [r[k] for r in runs] for k in clean_now}
    out = []
    for drop in drops:
        now = clean_now
        if drop:
            now = {**clean_now, **_medians(_target(tmp, nodes, seed, rr, drop), last, [TARGET[0]])}
        out.append(_judge(now, earlier, drop, history))
    return out


def study(seeds: int, sizes: tuple[int, ...], rrs: tuple[float, ...], drops: tuple[float, ...], history: int,
          tmp: Path) -> list[str]:  # fmt: skip
    t0 = time.perf_counter()
    rows = []
    for n in sizes:
        for rr in rrs:
            fleets = [one_fleet(tmp, n, seed, rr, drops, history) for seed in range(seeds)]
            for i, drop in enumerate(drops):
                got = [f[i] for f in fleets]
                caught = sum(c for c, _, _ in got)
                fa, judged = sum(f for _, f, _ in got), sum(j for _, _, j in got)
                fleets_flagged = sum(1 for _, f, _ in got if f)
                what = "clean" if not drop else f"{drop:.1%} fall"
                hit = "-" if not drop else f"{caught / seeds:.0%} ({caught}/{seeds})"
                rows.append(
                    f"| {n} x 8 | {rr:.1%} | {what} | {hit} | {fa}/{judged} ({fa / judged:.2%}) | "
                    f"{fleets_flagged}/{seeds} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)  # progress: a long study's rows as they come
    head = [
        f"Measured in one run: {seeds} fleets per row, {history} earlier runs per board (own repeatability from "
        f"4), {time.perf_counter() - t0:.0f} s. Noise: cv 1%, gpuSpread 1%, nodeSpread 0.5%, Student-t df 5, "
        "0.5% of samples up to 5% slow, and run-to-run noise per board and run as in the second column. The "
        f"faulty GPU ({TARGET[0]}/gpu{TARGET[1]}) is slowed in the last run only; limit {DEFAULT_LIMIT:.0%}, "
        f"confidence {DEFAULT_CONFIDENCE} over {DRIFT_METRICS_PER_GPU} metrics per GPU.",
        "",
        "| fleet | run-to-run | scenario | caught | healthy GPUs flagged | fleets with a false alarm |",
        "|---|---|---|---|---|---|",
    ]
    return head + rows


def run(args: Any) -> int:
    import tempfile

    smoke = bool(args.smoke)
    seeds = 2 if smoke else args.seeds
    sizes = (4,) if smoke else tuple(args.sizes)
    rrs = (0.005,) if smoke else (0.003, 0.005, 0.01)
    drops = (0.0, 0.04) if smoke else (0.0, 0.01, 0.02, 0.025, 0.03)
    with tempfile.TemporaryDirectory() as tmp:
        lines = study(seeds, sizes, rrs, drops, 2 if smoke else args.history, Path(tmp))
    text = "\n".join(lines)
    print(text)
    write_section(args.results, "drift", text)
    return 0
