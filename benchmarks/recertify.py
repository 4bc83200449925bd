"""Recertification study: how often `handover.<metric>` catches a GPU fallen against its handover figure, and how
often it flags a healthy one, before (a fixed tolerance of max(3 x the handover spread, 3%)) and after (the
standard error of the difference times the multiplicity bar, never under the limit; rules/handover.py).

Each study node is measured by gpucert's simulator (SimulatedTarget.measure_node; every run id draws its own
run-to-run offsets): at handover, then in as many more signed runs as the history scenario says, then once more at
recertification, clean and with one GPU slowed on memory.bandwidth. Every GPU's eight own figures (memory, five
GEMM dtypes, two PCIe directions) are judged by gpucert's own handover rule (judge_against_handover) with the noise
a recertification would read (pooled over the node's 8 boards' own earlier runs, else over their figures now
against the one handover run, else none: handover_checks._repeatability), and with the bar of the 73 handover
figures a recertification of an 8-GPU node judges. The run folders and pytest around them are left out, so
hundreds of recertifications fit in minutes.

    PYTHONPATH=src .venv/bin/python benchmarks/recertify.py [--seeds 40] [--results benchmarks/RESULTS.md]
    PYTHONPATH=src .venv/bin/python benchmarks/recertify.py --smoke     # a tiny study: the code path, in seconds
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, the section writer

from results import write_section  # noqa: E402

from gpucert.evaluate.rules.drift import (  # noqa: E402
    DEFAULT_CONFIDENCE,
    DEFAULT_LIMIT,
    Earlier,
    drift_bar,
    pooled_repeatability,
)
from gpucert.evaluate.rules.handover import HandoverNoise, judge_against_handover, node_repeatability  # noqa: E402
from gpucert.evaluate.rules.performance import Sampled  # noqa: E402
from gpucert.evaluate.stats import summarize  # noqa: E402
from gpucert.measure.targets.base import MeasurePlan  # noqa: E402
from gpucert.measure.targets.simulated import SimulatedTarget  # noqa: E402
from gpucert.plan.checks import GPU_METRICS, NODE_METRICS, CheckStatus  # noqa: E402
from gpucert.spec.baseline import load_baseline  # noqa: E402
from gpucert.spec.cluster import Probe, load_spec  # noqa: E402
from gpucert.spec.simulated_fleet import load_fleet  # noqa: E402

NODE, SLOT, METRIC = "gpu-node-1", 3, "memory.bandwidth"
GPUS = 8
JUDGED = 8 * len(GPU_METRICS) + len(NODE_METRICS)  # the handover figures of one 8-GPU node's recertification
REAL = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}}
PROBES = (Probe.MEMORY, Probe.COMPUTE, Probe.PCIE)
# how much history the recertification is given: none (history not used), the handover run alone (one run of each
# board: its figure now against it, pooled over the node's boards), or handover and 3 more (each board's spread
# over its 4 runs, pooled over the node's boards: 24 degrees of freedom)
HISTORIES = {"none": 1, "handover": 1, "handover + 3 runs": 4}

Figures = dict[tuple[int, str], Earlier]  # per (GPU, metric): a run's median, spread and sample count


def _target(tmp: Path, seed: int, rr: float, drop: float) -> SimulatedTarget:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    faults = []
    if drop:
        faults = [{"kind": "slow", "node": NODE, "gpu": SLOT, "metric": METRIC, "factor": round(1 - drop, 4)}]
    doc: dict[str, Any] = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "recertify"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": 1, "gpusPerNode": GPUS},
        "seed": seed,
        "noise": {**REAL, "runToRun": {"cv": rr, "source": "the study's setting"}},
        "faults": faults,
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(doc))
    baseline = load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    return SimulatedTarget(spec, load_fleet(tmp / "fleet.yaml", spec), {"H100-SXM5-80GB": baseline})


def _figures(t: SimulatedTarget, run: str) -> Figures:
    out: Figures = {}
    for g in t.measure_node(NODE, MeasurePlan(run, PROBES, 2)).gpus:
        for metric, m in g.measurements.items():
            s = summarize(m.samples)
            out[(g.index, metric)] = Earlier(run, run, s.median, spread=s.spread, n=s.n)
    return out


def _noise(history: str, runs: list[Figures], now: Figures, key: tuple[int, str], bar: float) -> HandoverNoise:
    """What a recertification reads for the board: handover_checks._repeatability over the history given."""
    if history == "none":
        return HandoverNoise(None, "no history", bar)
    metric = key[1]
    pooled = node_repeatability([[r[(g, metric)] for r in runs] for g in range(GPUS)])
    if pooled is not None:
        return HandoverNoise(pooled[0], "the node's boards' runs", bar)
    ratios = [now[(g, metric)].median / (sum(r[(g, metric)].median for r in runs) / len(runs)) for g in range(GPUS)]
    return HandoverNoise(pooled_repeatability(ratios, [len(runs)] * GPUS), "pooled", bar)


def _judge(history: str, runs: list[Figures], now: Figures, drop: float) -> dict[str, tuple[bool, int, int]]:
    """Before and after: (the slowed GPU caught, healthy figures flagged, healthy figures judged)."""
    bar = drift_bar(JUDGED, DEFAULT_CONFIDENCE)
    handover = runs[0]
    out = {}
    for rule in ("before", "after"):
        caught, flagged, judged = False, 0, 0
        for key, fig in now.items():
            then = handover[key]
            if rule == "before":
                bad = fig.median / then.median - 1 < -max(3 * then.spread, 0.03)
            else:
                found = judge_against_handover(
                    key[1], NODE, key[0], Sampled(fig.median, fig.n, "-"), now_spread=fig.spread,
                    median=then.median, spread=then.spread, n=then.n, unit="-", run=then.run,
                    higher_is_better=True, noise=_noise(history, runs, now, key, bar),
                )  # fmt: skip
                bad = found.status is not CheckStatus.PASS
            if drop and key == (SLOT, METRIC):
                caught = bad
            else:
                flagged, judged = flagged + bad, judged + 1
        out[rule] = (caught, flagged, judged)
    return out


@dataclass
class Tally:
    caught: int = 0
    flagged: int = 0
    judged: int = 0
    nodes_flagged: int = 0

    def add(self, got: tuple[bool, int, int]) -> None:
        self.caught += got[0]
        self.flagged += got[1]
        self.judged += got[2]
        self.nodes_flagged += bool(got[1])


def study(seeds: int, rrs: tuple[float, ...], drops: tuple[float, ...], tmp: Path) -> list[str]:
    t0 = time.perf_counter()
    tallies: dict[tuple[float, str, float, str], Tally] = {}
    for rr in rrs:
        for seed in range(seeds):
            healthy = _target(tmp, seed, rr, 0.0)
            runs = [_figures(healthy, f"2026-12-{d + 1:02d}T00-00-00Z-study") for d in range(4)]
            last = "2026-12-20T00-00-00Z-study"
            for drop in drops:
                now = _figures(_target(tmp, seed, rr, drop) if drop else healthy, last)
                for history, k in HISTORIES.items():
                    for rule, got in _judge(history, runs[:k], now, drop).items():
                        tallies.setdefault((rr, history, drop, rule), Tally()).add(got)
    rows = []
    for (rr, history, drop, rule), t in tallies.items():
        what = "clean" if not drop else f"{drop:.0%} fall"
        hit = "-" if not drop else f"{t.caught}/{seeds}"
        rows.append(
            f"| {rr:.1%} | {history} | {rule} | {what} | {hit} | {t.flagged}/{t.judged} | {t.nodes_flagged}/{seeds} |"
        )
    head = [
        f"Measured in one run: {seeds} recertifications per row, {time.perf_counter() - t0:.0f} s. One 8-GPU node; "
        "noise cv 1%, gpuSpread 1%, nodeSpread 0.5%, Student-t df 5, 0.5% of samples up to 5% slow, run-to-run "
        f"noise per board and run as in the first column. gpu{SLOT} is slowed on {METRIC} at recertification only; "
        f"after: limit {DEFAULT_LIMIT:.0%}, confidence {DEFAULT_CONFIDENCE} over the {JUDGED} handover figures of "
        f"the node (bar {drift_bar(JUDGED, DEFAULT_CONFIDENCE):.2f}); before: max(3 x handover spread, 3%). "
        "False alarms: the other 63 of the node's 64 own figures judged (memory, GEMM x 5, PCIe x 2).",
        "",
        "| run-to-run | history given | rule | scenario | caught | healthy figures flagged | nodes with a false "
        "alarm |",
        "|---|---|---|---|---|---|---|",
    ]
    return head + rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--smoke", action="store_true", help="a tiny study: the code path, in seconds")
    p.add_argument("--results", type=Path, help="write the table between the recertify markers of this file")
    args = p.parse_args(argv)
    seeds = 2 if args.smoke else args.seeds
    rrs = (0.005,) if args.smoke else (0.003, 0.005, 0.01)
    drops = (0.0, 0.04) if args.smoke else (0.0, 0.02, 0.03, 0.04)
    with tempfile.TemporaryDirectory() as tmp:
        text = "\n".join(study(seeds, rrs, drops, Path(tmp)))
    print(text)
    write_section(args.results, "recertify", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
