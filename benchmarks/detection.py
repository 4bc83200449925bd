"""Detection study: how often the straggler and stability rules catch a fault, and how often they flag a healthy
GPU, on simulated fleets with realistic per-GPU spread. Prints one markdown table per question, measured in this
run (rates with the counts behind them).

Each fleet is simulated by gpucert's own simulator (`run.prepare`, the SimulatedFleet's noise and fault kinds) and
judged by gpucert's own evaluator (`Evaluation.decide` on the run folder, the code the suites call), without
pytest around it: the study decides a few metrics' checks under many settings, which pytest would take hours for.
The evidence of a fleet is read once and shared by the settings' evaluations.

    .venv/bin/python benchmarks/detection.py [--seeds 50] [--jobs 2] [--results benchmarks/RESULTS.md]
    .venv/bin/python benchmarks/detection.py --smoke          # a tiny study: the code path, in seconds
    .venv/bin/python benchmarks/detection.py --drift [--smoke]  # drift.<metric> against history (drift.py)
    .venv/bin/python benchmarks/detection.py --node-level [--smoke]  # a whole node slow (nodelevel.py)
    .venv/bin/python benchmarks/detection.py --combined [--smoke]  # every metric at once (combined.py)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results import write_section  # noqa: E402

from gpucert.evaluate.evaluation import Evaluation  # noqa: E402
from gpucert.plan import run as runner  # noqa: E402
from gpucert.plan.checks import CheckKey, CheckStatus  # noqa: E402
from gpucert.plan.runfolder import RunFolder  # noqa: E402
from gpucert.spec.cluster import ClusterSpec, StragglerSpec  # noqa: E402

SWEPT = "straggler 4%"  # the goal's straggler: every setting of the trade-off judges it
TARGET = ("gpu-node-2", 3)  # the faulty GPU (or node) of every faulty scenario
METRIC = "memory.bandwidth"  # 20 samples per GPU
ALL_GPU_METRICS = ("memory.bandwidth", *(f"compute.gemm.{d}" for d in ("fp16", "bf16", "tf32", "fp32", "fp64")))
ALL_GPU_METRICS += ("pcie.h2d", "pcie.d2h", "p2p.bandwidth")

NOISE: dict[str, dict[str, Any]] = {
    "kind": {"cv": 0.01},  # the simulator before: one mean per SKU, Gaussian samples
    "goal": {"cv": 0.01, "gpuSpread": 0.01},  # the goal: cv 1%, per-GPU spread sd 1%
    "real": {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}},
    "noisy": {"cv": 0.02, "gpuSpread": 0.01},
}


def slow(d: float, metric: str = METRIC) -> list[dict[str, Any]]:
    return [{"kind": "slow", "node": TARGET[0], "gpu": TARGET[1], "metric": metric, "factor": round(1 - d, 4)}]


def intermittent(fraction: float, factor: float, metric: str = METRIC) -> list[dict[str, Any]]:
    f = {"kind": "intermittent", "node": TARGET[0], "gpu": TARGET[1], "metric": metric}
    return [{**f, "factor": factor, "fraction": fraction}]


SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "clean": [],
    **{f"straggler {d:.0%}": slow(d) for d in (0.02, 0.03, 0.04, 0.05, 0.06, 0.08)},
    "intermittent 30% at -20%": intermittent(0.3, 0.8),
    "intermittent 45% at x0.5": intermittent(0.45, 0.5),
    "intermittent 30% at -20%, pcie.h2d": intermittent(0.3, 0.8, "pcie.h2d"),
    "drift to -10%": [{"kind": "drift", "node": TARGET[0], "gpu": TARGET[1], "metric": METRIC, "factor": 0.9}],
    "slow node 6%": [{"kind": "slow", "node": TARGET[0], "metric": METRIC, "factor": 0.94}],
}


@dataclass(frozen=True)
class Setting:
    max_deviation: float
    min_z: float
    pcie_samples: int | None = None

    def __str__(self) -> str:
        extra = f", pcie {self.pcie_samples} samples" if self.pcie_samples else ""
        return f"maxDeviation {self.max_deviation:.1%}, minZ {self.min_z:g}{extra}"


@dataclass
class Tally:
    """What one setting decided over the fleets of one study cell."""

    fleets: int = 0
    caught: int = 0  # the faulty GPU's (or node's) check did not pass
    healthy: int = 0  # healthy GPUs judged on the studied metric
    false: int = 0  # ... of which flagged (any finding of the metric's test, or its node's node-level check)
    healthy_any: int = 0  # healthy GPUs judged on every per-GPU metric
    false_any: int = 0
    fleets_flagged: int = 0  # clean fleets with any false finding on any per-GPU metric: a certification failed
    findings_on_node: list[int] = field(default_factory=list)  # slow node: findings about the node

    def add(self, other: Tally) -> None:
        self.fleets += other.fleets
        self.caught += other.caught
        self.healthy += other.healthy
        self.false += other.false
        self.healthy_any += other.healthy_any
        self.false_any += other.false_any
        self.fleets_flagged += other.fleets_flagged
        self.findings_on_node += other.findings_on_node


@dataclass(frozen=True)
class Cell:
    nodes: int
    noise: str
    scenario: str
    seed: int
    settings: tuple[Setting, ...]
    every_metric: bool = False  # also count false alarms over every per-GPU metric, at every setting


def spec_doc(nodes: int, samples: dict[str, int] | None, gpus: int = 8) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text())
    doc["target"]["fleet"] = "fleet.yaml"
    doc["expect"].update(nodes=nodes, gpusPerNode=gpus)
    doc["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    doc["certify"]["probes"] = ["memory", "compute", "pcie", "p2p"]
    doc["certify"].pop("multinode", None)
    if samples:
        doc["certify"]["samples"] = samples
    return doc


def fleet_doc(
    nodes: int, noise: dict[str, Any], faults: list[dict[str, Any]], seed: int, gpus: int = 8
) -> dict[str, Any]:
    return {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "study"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "namePrefix": "gpu-node-", "gpusPerNode": gpus},
        "noise": noise,
        "seed": seed,
        "faults": faults,
    }


class SharedEvidence(Evaluation):
    """gpucert's Evaluation, unchanged in what it decides; the evidence documents it reads are shared between the
    settings judged on one fleet, so each is parsed once."""

    def __init__(self, folder: RunFolder, spec: ClusterSpec, baseline: Any, cache: dict[str, Any]) -> None:
        super().__init__(folder, spec, baseline)
        self._evidence = cache


def with_setting(spec: ClusterSpec, s: Setting) -> ClusterSpec:
    """The spec with the setting's knobs, where the evaluator reads them: each pool's straggler settings (a
    v1alpha1 spec's `certify.stragglers` become its one pool's when it is read)."""
    stragglers = StragglerSpec.model_validate({"maxDeviation": s.max_deviation, "minZ": s.min_z})
    pools = [p.model_copy(update={"stragglers": stragglers}) for p in spec.pools]
    certify = spec.certify.model_copy(update={"stragglers": stragglers})
    return spec.model_copy(update={"certify": certify, "pools": pools})


def judge(cell: Cell, ev: Evaluation, metrics: Iterable[str], every: bool) -> tuple[Tally, Tally | None]:
    """The studied metric's tally and, with `every`, the every-metric tally."""
    nodes, fault = ev.inventory.names, SCENARIOS[cell.scenario]
    target_metric = fault[0]["metric"] if fault else METRIC
    whole_node = bool(fault) and "gpu" not in fault[0]
    t = Tally(fleets=1)
    flagged_any: set[tuple[str, int]] = set()
    for metric in metrics:
        node_bad = {n for n in nodes if ev.decide(CheckKey(f"straggler.{metric}", n)).status is not CheckStatus.PASS}
        for node in nodes:
            for g in range(8):
                f = ev.decide(CheckKey(metric, node, g))
                bad = f.status is not CheckStatus.PASS or node in node_bad
                faulty = bool(fault) and metric == target_metric and node == TARGET[0]
                faulty = faulty and (whole_node or g == TARGET[1])
                if bad and not faulty:
                    flagged_any.add((node, g))
                if metric != target_metric:
                    continue
                if faulty and not whole_node:
                    t.caught += int(bad)
                elif not faulty:
                    t.healthy += 1
                    t.false += int(bad)
        if whole_node and metric == target_metric:
            t.caught += int(TARGET[0] in node_bad)
            mine = [k for k in ev.plan.required if k.node == TARGET[0] and k.check.endswith(metric)]
            t.findings_on_node.append(sum(ev.decide(k).status in (CheckStatus.FAIL, CheckStatus.ERROR) for k in mine))
    if not every:
        return t, None
    healthy = len(nodes) * 8 - (8 if whole_node else 1 if fault else 0)
    return t, Tally(fleets=1, healthy_any=healthy, false_any=len(flagged_any), fleets_flagged=int(bool(flagged_any)))


def run_cell(cell: Cell) -> list[tuple[Tally, Tally | None]]:
    work = Path(tempfile.mkdtemp(prefix="gpucert-detect-"))
    try:
        by_samples: dict[int | None, tuple[ClusterSpec, Any, RunFolder]] = {}
        out = []
        cache: dict[int | None, dict[str, Any]] = {}
        for setting in cell.settings:
            n = setting.pcie_samples
            if n not in by_samples:
                where = work / f"s{n}"
                where.mkdir()
                doc = spec_doc(cell.nodes, {"pcie": n} if n else None)
                (where / "spec.yaml").write_text(yaml.safe_dump(doc))
                fleet = fleet_doc(cell.nodes, NOISE[cell.noise], SCENARIOS[cell.scenario], cell.seed)
                (where / "fleet.yaml").write_text(yaml.safe_dump(fleet))
                spec, baseline = runner.load_inputs(where / "spec.yaml")
                folder = runner.prepare(spec, where / "reports", runner.Mode.MEASURE)
                by_samples[n] = (spec, baseline, folder)
                cache[n] = {}
            spec, baseline, folder = by_samples[n]
            ev = SharedEvidence(folder, with_setting(spec, setting), baseline, cache[n])
            fault = SCENARIOS[cell.scenario]
            studied = [fault[0]["metric"] if fault else METRIC]
            every = cell.every_metric
            out.append(judge(cell, ev, ALL_GPU_METRICS if every else studied, every))
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


# fleets too small for some peer comparison: (nodes, GPUs per node, the fault), on the goal's noise
SMALL_NODE = [{"kind": "slow", "node": TARGET[0], "metric": METRIC, "factor": 0.94}]
SMALL: dict[str, tuple[int, int, list[dict[str, Any]]]] = {
    "2 x 8, slow node 6%": (2, 8, SMALL_NODE),
    "3 x 8, slow node 6%": (3, 8, SMALL_NODE),
    "4 x 8, slow node 6%": (4, 8, SMALL_NODE),
    "4 x 2, straggler 6%": (4, 2, [{**SMALL_NODE[0], "gpu": 1}]),
}


@dataclass(frozen=True)
class Small:
    caught: bool  # a check about the faulty GPU(s) or node did not pass
    false: int  # healthy GPUs whose check of the metric did not pass
    healthy: int
    undecided: frozenset[str]  # the comparisons of the metric the verdict lists as undecided


def run_small(job: tuple[str, int]) -> Small:
    """One small fleet: what the evaluator decides on the studied metric, and what it says it could not."""
    name, seed = job
    nodes, gpus, faults = SMALL[name]
    work = Path(tempfile.mkdtemp(prefix="gpucert-detect-"))
    try:
        (work / "spec.yaml").write_text(yaml.safe_dump(spec_doc(nodes, None, gpus)))
        (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes, NOISE["goal"], faults, seed, gpus)))
        spec, baseline = runner.load_inputs(work / "spec.yaml")
        ev = Evaluation(runner.prepare(spec, work / "reports", runner.Mode.MEASURE), spec, baseline)
        bad_gpus = {(TARGET[0], faults[0]["gpu"])} if "gpu" in faults[0] else {(TARGET[0], g) for g in range(gpus)}
        caught, false = False, 0
        for node in ev.inventory.names:
            node_key = CheckKey(f"straggler.{METRIC}", node)
            node_bad = node_key in ev.plan.required and ev.decide(node_key).status is not CheckStatus.PASS
            caught |= node_bad and node == TARGET[0]
            for g in range(gpus):
                bad = ev.decide(CheckKey(METRIC, node, g)).status is not CheckStatus.PASS
                if (node, g) in bad_gpus:
                    caught |= bad
                else:
                    false += int(bad or node_bad)
        undecided = frozenset(u["comparison"] for u in ev.peers.undecided() if METRIC in u["metrics"])
        return Small(caught, false, nodes * gpus - len(bad_gpus), undecided)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def small_fleets(seeds: range, jobs: int) -> list[str]:
    out = [
        "",
        f"### Fleets too small for a comparison ({METRIC}, the goal's noise, the default)",
        "",
        "A slow node needs the node-level comparison (four nodes or more); a 2-GPU node has one peer on its node. "
        "`undecided`: the comparisons `verdict.json` lists as not made for this metric, in how many fleets.",
        "",
        "| fleet, fault | caught | false alarms per healthy GPU | undecided |",
        "|---|---|---|---|",
    ]
    jobs_ = [(name, seed) for name in SMALL for seed in seeds]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run_small, jobs_, chunksize=1))
    for name in SMALL:
        mine = [r for (n, _), r in zip(jobs_, results, strict=True) if n == name]
        said: dict[str, int] = {}
        for r in mine:
            for c in r.undecided:
                said[c] = said.get(c, 0) + 1
        listed = "; ".join(f"{c} ({k}/{len(mine)})" for c, k in sorted(said.items())) or "none"
        caught = rate(sum(r.caught for r in mine), len(mine))
        false = fa_rate(sum(r.false for r in mine), sum(r.healthy for r in mine))
        out.append(f"| {name} | {caught} | {false} | {listed} |")
    return out


def rate(k: int, n: int) -> str:
    return f"{k / n:.1%} ({k}/{n})" if n else "-"


def fa_rate(k: int, n: int) -> str:
    return f"{k / n:.2%} ({k}/{n})" if n else "-"


def study(cells: list[Cell], jobs: int) -> dict[tuple[int, str, str], list[tuple[Tally, Tally]]]:
    totals: dict[tuple[int, str, str], list[tuple[Tally, Tally]]] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for cell, result in zip(cells, pool.map(run_cell, cells, chunksize=1), strict=True):
            slot = totals.setdefault(
                (cell.nodes, cell.noise, cell.scenario), [(Tally(), Tally()) for _ in cell.settings]
            )
            for (t, a), (t1, a1) in zip(slot, result, strict=True):
                t.add(t1)
                if a1 is not None:
                    a.add(a1)
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=1, help="processes (the evaluations of one fleet stay together)")
    ap.add_argument("--results", type=Path, help="also write the tables into this file, between its markers")
    ap.add_argument("--smoke", action="store_true", help="2 seeds of 4 x 8, one setting: the code path only")
    ap.add_argument("--drift", action="store_true", help="the drift study instead (benchmarks/drift.py)")
    ap.add_argument("--node-level", action="store_true", help="the node-level study instead (nodelevel.py)")
    ap.add_argument("--combined", action="store_true", help="one statistic over a GPU's metrics (combined.py)")
    ap.add_argument("--part", choices=("both", "peers", "drift"), default="both", help="--combined: which rules")
    ap.add_argument("--rho", type=float, nargs="+", default=[0.0, 0.5], help="--combined: noise.metricCorrelation")
    ap.add_argument("--first-seed", type=int, default=0, help="--node-level, --combined: the first seed")
    ap.add_argument("--history", type=int, default=3, help="--drift: earlier runs per board")
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256], help="--drift: nodes per fleet")
    args = ap.parse_args()
    if args.drift:
        import drift

        return drift.run(args)
    if args.node_level:
        import nodelevel

        return nodelevel.run(args)
    if args.combined:
        import combined

        return combined.run(args)
    default = Setting(StragglerSpec().max_deviation, StragglerSpec().min_z)
    sizes = (4,) if args.smoke else (4, 32)
    seeds = range(2 if args.smoke else args.seeds)
    sweep = (
        (default,) if args.smoke else tuple(Setting(d, z) for d in (0.02, 0.03, 0.04, 0.05) for z in (3.0, 3.5, 4.0))
    )
    swept = "straggler 8%" if args.smoke else SWEPT  # the smoke's straggler is one no setting misses
    t0 = time.perf_counter()
    cells = _cells(sizes, seeds, sweep, default, swept, smoke=args.smoke)
    totals = study(cells, args.jobs)
    small = small_fleets(seeds, args.jobs)
    elapsed = time.perf_counter() - t0
    lines = report(totals, sweep, default, sizes, len(seeds), elapsed, swept) + small
    text = "\n".join(lines)
    print(text)
    write_section(args.results, "detection", text)
    return 0


def _cells(
    sizes: tuple[int, ...], seeds: range, sweep: tuple[Setting, ...], default: Setting, swept: str, *, smoke: bool
) -> list[Cell]:
    """The study's cells: per fleet size and seed, every setting on the goal's noise for the swept straggler and
    clean fleets (the trade-off); then, unless a smoke run, every other noise and scenario at the default."""
    cells: list[Cell] = []
    for n in sizes:
        for seed in seeds:
            for scenario in ("clean", swept):
                cells.append(Cell(n, "goal", scenario, seed, sweep, every_metric=scenario == "clean"))
            if smoke:
                continue
            for noise in NOISE:
                for scenario in SCENARIOS:
                    if noise == "goal" and scenario in ("clean", swept):
                        continue
                    settings: tuple[Setting, ...] = (default,)
                    if scenario.endswith("pcie.h2d"):
                        settings = (default, Setting(default.max_deviation, default.min_z, pcie_samples=20))
                    cells.append(Cell(n, noise, scenario, seed, settings, every_metric=scenario == "clean"))
    return cells


def report(
    totals: dict[tuple[int, str, str], list[tuple[Tally, Tally]]],
    sweep: tuple[Setting, ...],
    default: Setting,
    sizes: tuple[int, ...],
    seeds: int,
    elapsed: float,
    swept: str,
) -> list[str]:
    out = [
        f"Measured in one run: {seeds} seeds per cell, fleets of {' and '.join(f'{n} x 8' for n in sizes)} GPUs, "
        f"{elapsed:.0f} s. Detection: fleets whose faulty GPU's {METRIC} check (or, for a slow node, the node's "
        "node-level check) did not pass. False alarms: healthy GPUs whose check of the studied metric did not pass "
        "(their node's node-level finding included).",
        "",
        f"### Trade-off on the goal's noise (cv 1%, per-GPU spread sd 1%): a {swept} on {METRIC}",
        "",
        f"| setting | fleet | {swept} caught | false alarms per healthy GPU | per healthy GPU, any of 9 metrics "
        "| clean fleets that fail |",
        "|---|---|---|---|---|---|",
    ]
    for i, s in enumerate(sweep):
        for n in sizes:
            hit = totals[(n, "goal", swept)][i][0]
            clean, every = totals[(n, "goal", "clean")][i]
            fa_k, fa_n = clean.false + hit.false, clean.healthy + hit.healthy
            mark = " **(default)**" if s == default else ""
            out.append(
                f"| {s}{mark} | {n} x 8 | {rate(hit.caught, hit.fleets)} | {fa_rate(fa_k, fa_n)} | "
                f"{fa_rate(every.false_any, every.healthy_any)} | {rate(every.fleets_flagged, every.fleets)} |"
            )
    out += [
        "",
        f"### Every scenario at the default ({default})",
        "",
        "Noise: `kind` cv 1% only (the simulator before); `goal` cv 1% and gpuSpread 1%; `real` the example "
        "fleets' values (cv 1%, gpuSpread 1%, nodeSpread 0.5%, Student-t df 5, 0.5% of samples up to 5% slow); "
        "`noisy` cv 2% and gpuSpread 1%.",
        "",
        "| noise | fleet | scenario | caught | false alarms per healthy GPU (studied metric) |",
        "|---|---|---|---|---|",
    ]

    def order(item: tuple[tuple[int, str, str], Any]) -> tuple[int, int, int]:
        (n, noise, scenario), _ = item
        return list(NOISE).index(noise), n, list(SCENARIOS).index(scenario)

    for (n, noise, scenario), tallies in sorted(totals.items(), key=order):
        at = sweep.index(default) if noise == "goal" and scenario in ("clean", swept) else 0
        for i, (t, _) in enumerate(tallies if at == 0 else tallies[at : at + 1]):
            what = scenario + (", certify.samples.pcie 20" if i == 1 else "")
            caught = "-" if scenario == "clean" else rate(t.caught, t.fleets)
            if t.findings_on_node:
                caught += f"; findings about the node per fleet: {sorted(set(t.findings_on_node))}"
            out.append(f"| {noise} | {n} x 8 | {what} | {caught} | {fa_rate(t.false, t.healthy)} |")
    out += ["", "Clean fleets, every per-GPU metric (9 checks per GPU) at the default:", ""]
    out += ["| noise | fleet | healthy GPUs flagged on any metric | clean fleets that fail |", "|---|---|---|---|"]
    for (n, noise, scenario), tallies in sorted(totals.items(), key=order):
        if scenario == "clean":
            a = tallies[sweep.index(default) if noise == "goal" else 0][1]
            out.append(
                f"| {noise} | {n} x 8 | {fa_rate(a.false_any, a.healthy_any)} | {rate(a.fleets_flagged, a.fleets)} |"
            )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
