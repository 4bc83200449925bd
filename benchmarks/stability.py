"""Stability study (issue 27): how often `stability.<metric>` catches a GPU slow in a fraction of its samples, and
how often a clean fleet shows any stability finding, against the number of samples per measurement.

Each fleet is measured by gpucert's simulator (SimulatedTarget.measure_node, the realistic noise: board spread 1%,
node spread 0.5%, sample cv 1%, Student-t tails of 5 degrees of freedom, 0.5% of samples slow by up to 5%) with
as many samples as the largest count studied of every memory, GEMM and PCIe figure, and judged on the first `n`
of them by the stability rule's own statistic (evaluate/rules/stability.py, with the knobs PeerComparisons reads
from the spec) without the run folder, pytest and the straggler summaries around it. A faulty
fleet is the clean fleet with one GPU's memory.bandwidth slowed in a fraction of its samples (the simulator's
`intermittent` fault; the simulator draws each node from its own generator, so the other nodes are the same).

    .venv/bin/python benchmarks/stability.py [--seeds 100] [--sizes 16 64] [--samples 20 40 60 100]
                                             [--results benchmarks/RESULTS.md]
    .venv/bin/python benchmarks/stability.py --smoke      # 2 seeds of 16 x 8 at 20 and 40 samples, seconds
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, the section writer

from results import write_section  # noqa: E402

from gpucert.evaluate.peers import PeerComparisons  # noqa: E402
from gpucert.evaluate.rules.performance import samples_of  # noqa: E402
from gpucert.evaluate.rules.stability import TailPool, scan, slow_samples, verdict  # noqa: E402
from gpucert.evaluate.rules.stragglers import Rules  # noqa: E402
from gpucert.measure.evidence import NodeEvidence  # noqa: E402
from gpucert.measure.targets.base import MeasurePlan  # noqa: E402
from gpucert.measure.targets.simulated import SimulatedTarget  # noqa: E402
from gpucert.plan.checks import NODE_METRICS, REPEATED_METRICS  # noqa: E402
from gpucert.spec.baseline import load_baseline  # noqa: E402
from gpucert.spec.cluster import Probe, load_spec  # noqa: E402
from gpucert.spec.simulated_fleet import load_fleet  # noqa: E402

TARGET = ("gpu-node-2", 3)
METRIC = "memory.bandwidth"
REAL = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}}
PROBES = (Probe.MEMORY, Probe.COMPUTE, Probe.PCIE)
FAULTS = ((0.1, 0.8), (0.2, 0.8), (0.1, 0.9), (0.2, 0.9))  # (fraction of samples, factor)


def _target(tmp: Path, nodes: int, seed: int, faults: list[dict[str, Any]]) -> tuple[SimulatedTarget, Any, Any]:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "stability"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "gpusPerNode": 8},
        "seed": seed,
        "noise": REAL,
        "faults": faults,
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(doc))
    baselines = {"H100-SXM5-80GB": load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")}
    return SimulatedTarget(spec, load_fleet(tmp / "fleet.yaml", spec), baselines), spec, baselines


def _unstable(
    evidence: list[NodeEvidence], metric: str, n: int, rules: Rules, keys: list[tuple[str, int]]
) -> set[tuple[str, int]]:
    """Which of `keys` fail `stability.<metric>` on the first `n` samples of each measurement: the rule's own
    statistic (rules/stability.py, as PeerIndex.stability decides it), without the straggler summaries around it.
    The first n of a measurement's samples are, in distribution, a measurement of n: the simulator draws them
    independently and in order (the intermittent fault's per-sample draws too), so one measurement at the largest
    count serves every count."""
    slow = {}
    for ev in evidence:
        for g in ev.gpus:
            s = slow_samples(
                samples_of(ev, metric, g.index)[:n], 1.0 if rules.higher_is_better else -1.0, rules.max_deviation
            )
            if s is not None:
                slow[(ev.node, g.index)] = s
    pool = TailPool()
    for s in slow.values():
        pool.add(s)
    return {k for k in keys if k in slow and verdict(scan(slow[k], pool), len(slow), rules.metrics, rules.min_z)[2]}


def one_fleet(tmp: Path, nodes: int, seed: int, counts: tuple[int, ...]) -> dict[int, dict[str, Any]]:
    """Per sample count: the clean fleet's stability findings on every repeated per-GPU metric, and per fault,
    whether the faulty GPU's `stability.memory.bandwidth` failed. Measured once, at the largest count."""
    t, spec, baselines = _target(tmp, nodes, seed, [])
    most = max(counts)
    plan = MeasurePlan(f"2026-12-01T00-00-00Z-stability-{seed}", PROBES, 2, samples={p.value: most for p in PROBES})
    clean = [t.measure_node(name, plan) for name in t.names]
    pool = spec.pool_names[0]
    peers = PeerComparisons(lambda _pool: clean, spec, {pool: next(iter(baselines.values()))})
    metrics = [m for m in peers.metrics(pool) if m in REPEATED_METRICS and m not in NODE_METRICS]
    everyone = [(name, g) for name in t.names for g in range(8)]
    faulty = {}
    for fraction, factor in FAULTS:
        fault = {"kind": "intermittent", "node": TARGET[0], "gpu": TARGET[1], "metric": METRIC}
        ts, _, _ = _target(tmp, nodes, seed, [{**fault, "fraction": fraction, "factor": factor}])
        faulty[(fraction, factor)] = [e if e.node != TARGET[0] else ts.measure_node(TARGET[0], plan) for e in clean]
    out = {}
    for n in counts:
        false = [(m, *k) for m in metrics for k in _unstable(clean, m, n, peers.rules(m, pool), everyone)]
        rules = peers.rules(METRIC, pool)
        caught = {f: TARGET in _unstable(ev, METRIC, n, rules, [TARGET]) for f, ev in faulty.items()}
        out[n] = {"false": false, "metrics": len(metrics), "caught": caught}
    return out


def run(args: argparse.Namespace) -> list[str]:
    sizes = (16,) if args.smoke else tuple(args.sizes)
    counts = (20, 40) if args.smoke else tuple(args.samples)
    seeds = 2 if args.smoke else args.seeds
    t0 = time.perf_counter()
    head = " | ".join(f"{fr:.0%} at {fa - 1:+.0%}" for fr, fa in FAULTS)
    lines = [
        f"Measured in one run: {seeds} seeds per cell (seeds {args.first_seed}-{args.first_seed + seeds - 1}), "
        "realistic noise (board spread 1%, node spread 0.5%, cv 1%, Student-t df 5, 0.5% of samples slow by up to "
        "5%), the default knobs (maxDeviation 5%, minZ 3.5). Caught: fleets whose faulty GPU's "
        f"stability.{METRIC} failed. Clean: fleets with any stability finding on any of the "
        "memory, GEMM and PCIe metrics (8 per GPU).",
        "",
        f"| fleet | samples | caught: {head} | clean fleets flagged | GPU-metrics flagged |",
        "|---|---|" + "---|" * len(FAULTS) + "---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="gpucert-stability-") as tmp:
        for nodes in sizes:
            by_seed = []
            for seed in range(args.first_seed, args.first_seed + seeds):
                by_seed.append(one_fleet(Path(tmp), nodes, seed, counts))
                if seed % 10 == 9:
                    print(f"{nodes} x 8: seed {seed} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
            for n in counts:
                results = [r[n] for r in by_seed]
                caught = " | ".join(f"{sum(r['caught'][f] for r in results)}/{seeds}" for f in FAULTS)
                flagged = sum(bool(r["false"]) for r in results)
                pairs = sum(len(r["false"]) for r in results)
                judged = seeds * nodes * 8 * results[0]["metrics"]
                lines.append(f"| {nodes} x 8 | {n} | {caught} | {flagged}/{seeds} | {pairs} of {judged} |")
                print(lines[-1], f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return [*lines, "", f"{time.perf_counter() - t0:.0f} s."]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=0, help="the first seed (split a study)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64], help="nodes per fleet")
    ap.add_argument("--samples", type=int, nargs="+", default=[20, 40, 60, 100], help="samples per measurement")
    ap.add_argument("--results", type=Path, help="also write the table into this file, between its markers")
    ap.add_argument("--smoke", action="store_true", help="2 seeds of 16 x 8 at 20 and 40 samples: the code path")
    args = ap.parse_args()
    text = "\n".join(run(args))
    print(text)
    write_section(args.results, "stability", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
