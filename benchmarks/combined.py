"""Combined-statistic study (issue 27): a GPU a few percent slow on every metric, judged by one statistic over its
metrics (`straggler.combined`, `drift.combined`) beside the per-metric rules (`straggler.<metric>`,
`drift.<metric>`) on the same fleets, and how often each flags a healthy GPU; with each metric's board, node and
run-to-run offsets drawn independently (the simulator's default) and correlated across metrics
(`noise.metricCorrelation`).

Each fleet is measured by gpucert's simulator (SimulatedTarget.measure_node) and judged by gpucert's own code
without the run folders and pytest around it: peers by evaluate/peers.py (the index and combined view the checks
read), drift by the pure functions the `drift` family calls (rules/drift.py, rules/combined.py), as
benchmarks/drift.py does. A faulty fleet is the clean fleet with the faulty node measured again.

    .venv/bin/python benchmarks/detection.py --combined [--seeds 20] [--sizes 16 64 256] [--results RESULTS.md]
    .venv/bin/python benchmarks/detection.py --combined --smoke
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from results import write_section

from gpucert.evaluate.peers import PeerComparisons
from gpucert.evaluate.rules.combined import Combined, judge_drift_combined, judge_peer_combined
from gpucert.evaluate.rules.drift import (
    DEFAULT_CONFIDENCE,
    DEFAULT_LIMIT,
    Earlier,
    drift_bar,
    drift_fall,
    judge_drift,
    own_repeatability,
    pooled_repeatability,
    sampling_error,
)
from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.stats import mad, median
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.plan.checks import NODE_METRICS, CheckStatus
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[1]
TARGET = ("gpu-node-2", 3)
REAL = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}}
PEER_PROBES = (Probe.MEMORY, Probe.COMPUTE, Probe.PCIE, Probe.P2P)
DRIFT_PROBES = (Probe.MEMORY, Probe.COMPUTE, Probe.PCIE)
RUN_TO_RUN = 0.005  # the goal: repeatability 0.5%
Key = tuple[str, int | None]


def _target(tmp: Path, nodes: int, seed: int, rho: float, faults: list[dict[str, Any]], rr: float = 0.0) -> Any:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    noise: dict[str, Any] = {**REAL, "metricCorrelation": rho}
    if rr:
        noise["runToRun"] = {"cv": rr, "source": "the study's setting"}
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "combined"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "gpusPerNode": 8},
        "seed": seed,
        "noise": noise,
        "faults": faults,
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(doc))
    baselines = {"H100-SXM5-80GB": load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")}
    return SimulatedTarget(spec, load_fleet(tmp / "fleet.yaml", spec), baselines), spec, baselines


def _slow(metrics: list[str], d: float) -> list[dict[str, Any]]:
    return [
        {"kind": "slow", "node": TARGET[0], "gpu": TARGET[1], "metric": m, "factor": round(1 - d, 4)} for m in metrics
    ]


# ---- peers ----------------------------------------------------------------------------------------------------


def _peer_judgements(spec: Any, baselines: Any, evidence: list[NodeEvidence]) -> dict[Key, tuple[bool, bool]]:
    """Per GPU: (any per-metric straggler fails, straggler.combined fails)."""
    pool = spec.pool_names[0]
    peers = PeerComparisons(lambda _pool: evidence, spec, {pool: next(iter(baselines.values()))})
    metrics = [m for m in peers.metrics(pool) if m not in NODE_METRICS]
    combined, bar = peers.combined(pool)
    out: dict[Key, tuple[bool, bool]] = {}
    keys = list(peers.index(metrics[0], pool).values)
    for key in keys:
        per = any(peers.index(m, pool).judge(key).status is CheckStatus.FAIL for m in metrics if key in
                  peers.index(m, pool).values)  # fmt: skip
        found = judge_peer_combined(key, combined, bar, "its node's peers")
        out[key] = (per, found is not None and found.status is CheckStatus.FAIL)
    return out


def peer_fleet(tmp: Path, nodes: int, seed: int, rho: float, drops: tuple[float, ...]) -> dict[float, Any]:
    t, spec, baselines = _target(tmp, nodes, seed, rho, [])
    plan = MeasurePlan(f"2026-12-01T00-00-00Z-combined-{seed}", PEER_PROBES, 2)
    clean = [t.measure_node(n, plan) for n in t.names]
    metrics = [
        m for m in baselines["H100-SXM5-80GB"].metrics if m.split(".")[0] in ("memory", "compute", "pcie", "p2p")
    ]
    metrics = [m for m in metrics if m not in NODE_METRICS and m != "nccl.all_reduce.multinode"]
    out: dict[float, Any] = {}
    for d in drops:
        ev = clean
        if d:
            ts, _, _ = _target(tmp, nodes, seed, rho, _slow(metrics, d))
            ev = [e if e.node != TARGET[0] else ts.measure_node(TARGET[0], plan) for e in clean]
        out[d] = _peer_judgements(spec, baselines, ev)
    return out


# ---- drift ----------------------------------------------------------------------------------------------------


def _medians(t: Any, run: str, nodes: list[str] | None = None) -> dict[str, dict[Key, Earlier]]:
    plan = MeasurePlan(run, DRIFT_PROBES, 2)
    out: dict[str, dict[Key, Earlier]] = {}
    for node in nodes or t.names:
        for g in t.measure_node(node, plan).gpus:
            for metric, meas in g.measurements.items():
                m = median(meas.samples)
                fig = Earlier(run, run, m, spread=1.4826 * mad(meas.samples, m) / m, n=len(meas.samples))
                out.setdefault(metric, {})[(node, g.index)] = fig
    return out


def _drift_judgements(now: dict[str, dict[Key, Earlier]], earlier: dict[str, dict[Key, list[Earlier]]]) -> Any:
    """Per GPU: (any drift.<metric> fails, drift.combined fails), as drift_checks decides them."""
    metrics = sorted(now)
    boards = list(now[metrics[0]])
    bar = drift_bar(len(boards) * (len(metrics) + 1), DEFAULT_CONFIDENCE)
    per: dict[Key, bool] = dict.fromkeys(boards, False)
    falls: dict[str, dict[Key, float]] = {}
    zs: dict[str, dict[Key, float]] = {}
    for metric in metrics:
        hist = earlier[metric]
        ratios = [now[metric][k].median / (sum(e.median for e in hist[k]) / len(hist[k])) for k in boards]
        pooled = pooled_repeatability(ratios, [len(hist[k]) for k in boards])
        falls[metric], zs[metric] = {}, {}
        for k in boards:
            own = own_repeatability(hist[k])
            rr = own if own is not None else pooled
            fig = now[metric][k]
            f = judge_drift(
                metric, k[0], k[1] or 0, Sampled(fig.median, fig.n, "x"), hist[k], repeatability=rr, bar=bar
            )
            per[k] |= f.status is CheckStatus.FAIL
            fall, se = drift_fall(fig.median, hist[k], max(rr or 0.0, sampling_error(hist[k])))
            falls[metric][k], zs[metric][k] = fall, -fall / se
    combined = Combined.of(zs, bar)
    out = {}
    for k in boards:
        mine = {m: falls[m][k] for m in metrics}
        found = judge_drift_combined(k, combined, mine, bar=bar, limit=DEFAULT_LIMIT, source="study")
        out[k] = (per[k], found is not None and found.status is CheckStatus.FAIL)
    return out


def drift_fleet(tmp: Path, nodes: int, seed: int, rho: float, drops: tuple[float, ...], history: int) -> Any:
    t, _, _ = _target(tmp, nodes, seed, rho, [], RUN_TO_RUN)
    runs = [_medians(t, f"2026-12-{d + 1:02d}T00-00-00Z-study") for d in range(history)]
    last = f"2026-12-{history + 1:02d}T00-00-00Z-study"
    clean_now = _medians(t, last)
    earlier = {m: {k: [r[m][k] for r in runs] for k in clean_now[m]} for m in clean_now}
    out = {}
    for d in drops:
        now = clean_now
        if d:
            ts, _, _ = _target(tmp, nodes, seed, rho, _slow(sorted(clean_now), d), RUN_TO_RUN)
            slow = _medians(ts, last, [TARGET[0]])
            now = {m: {**clean_now[m], **slow[m]} for m in clean_now}
        out[d] = _drift_judgements(now, earlier)
    return out


# ---- the study ------------------------------------------------------------------------------------------------


def _rows(kind: str, n: int, rho: float, results: list[dict[float, Any]], drops: tuple[float, ...]) -> list[str]:
    rows = []
    seeds = len(results)
    for d in drops:
        got = [r[d] for r in results]
        if not d:
            per_fa = sum(v[0] for g in got for v in g.values())
            comb_fa = sum(v[1] for g in got for v in g.values())
            judged = sum(len(g) for g in got)
            fleets = sum(any(v[0] or v[1] for v in g.values()) for g in got)
            rows.append(
                f"| {kind} | {n} x 8 | {rho:g} | clean | - | - | - | per metric {per_fa}/{judged}, combined "
                f"{comb_fa}/{judged} | {fleets}/{seeds} |"
            )
            continue
        per = sum(g[TARGET][0] for g in got)
        comb = sum(g[TARGET][1] for g in got)
        either = sum(g[TARGET][0] or g[TARGET][1] for g in got)
        fa = sum(v[0] or v[1] for g in got for k, v in g.items() if k != TARGET)
        fleets = sum(any(v[0] or v[1] for k, v in g.items() if k != TARGET) for g in got)
        judged = sum(len(g) - 1 for g in got)
        rows.append(
            f"| {kind} | {n} x 8 | {rho:g} | {d:.1%} on every metric | {per}/{seeds} | {comb}/{seeds} | "
            f"{either}/{seeds} | {fa}/{judged} (either) | {fleets}/{seeds} |"
        )
    return rows


def run(args: Any) -> int:
    smoke = bool(args.smoke)
    sizes = (16,) if smoke else tuple(args.sizes)
    seeds = 2 if smoke else args.seeds
    rhos = (0.0,) if smoke else tuple(args.rho)
    peer_drops = (0.0, 0.04) if smoke else (0.0, 0.02, 0.03, 0.04)
    drift_drops = (0.0, 0.025) if smoke else (0.0, 0.015, 0.02, 0.025)
    history = args.history
    t0 = time.perf_counter()
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpucert-combined-") as tmp:
        for n in sizes:
            for rho in rhos:
                first = args.first_seed
                if getattr(args, "part", "both") != "drift":
                    peer = [peer_fleet(Path(tmp), n, s, rho, peer_drops) for s in range(first, first + seeds)]
                    rows += _rows("peers", n, rho, peer, peer_drops)
                    print("\n".join(rows[-len(peer_drops) :]), file=sys.stderr, flush=True)
                if getattr(args, "part", "both") == "peers":
                    continue
                drift = [drift_fleet(Path(tmp), n, s, rho, drift_drops, history) for s in range(first, first + seeds)]
                rows += _rows("drift", n, rho, drift, drift_drops)
                print("\n".join(rows[-len(drift_drops) :]), file=sys.stderr, flush=True)
    head = [
        f"Measured in one run: {seeds} fleets per row (seeds {args.first_seed}-{args.first_seed + seeds - 1}), "
        f"{time.perf_counter() - t0:.0f} s. Noise: cv 1%, gpuSpread 1%, nodeSpread 0.5%, Student-t df 5, 0.5% of "
        f"samples up to 5% slow; drift: run-to-run {RUN_TO_RUN:.1%} per board and run, {history} earlier runs, "
        f"limit {DEFAULT_LIMIT:.0%}, confidence {DEFAULT_CONFIDENCE}. rho: noise.metricCorrelation (the board's, "
        "node's and run's offsets alike across its metrics). The faulty GPU "
        f"({TARGET[0]}/gpu{TARGET[1]}) is slow by the same fraction on every metric (peers: the 9 per-GPU metrics; "
        "drift: the 8 drift metrics, in the last run only).",
        "",
        "| rule | fleet | rho | scenario | caught per metric (any fails) | caught combined | caught by either | "
        "healthy GPUs flagged | fleets with a false alarm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    text = "\n".join(head + rows)
    print(text)
    write_section(args.results, "combined", text)
    return 0
