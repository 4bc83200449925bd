"""Node-level study: how often the node-level straggler (`straggler.<metric>`, gpu null) finds a whole node a few
percent slow as one finding, and how often a clean fleet shows any node-level finding on any per-GPU metric.

Each fleet is measured by gpucert's simulator (SimulatedTarget.measure_node, the realistic noise: board spread 1%,
node spread 0.5%, sample cv 1%, Student-t tails, rare outliers) and judged by gpucert's own peer comparisons
(evaluate/peers.py, the index the suites' checks read) without the run folder and pytest around it, so fleets of
256 x 8 fit in seconds. A slow node's fleet is the clean fleet with that node measured again slowed (the simulator
draws each node from its own generator, so the others are the same).

    .venv/bin/python benchmarks/detection.py --node-level [--seeds 10] [--results benchmarks/RESULTS.md]
    .venv/bin/python benchmarks/detection.py --node-level --smoke
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
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.plan.checks import NODE_METRICS, CheckStatus
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[1]
NODE = "gpu-node-2"
REAL = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005, "tails": {"df": 5, "outliers": 0.005, "depth": 0.05}}
PROBES = (Probe.MEMORY, Probe.COMPUTE, Probe.PCIE, Probe.P2P)
STUDIED = ("memory.bandwidth", "compute.gemm.bf16", "pcie.h2d")  # a slow node on each of these, one at a time


def _target(tmp: Path, nodes: int, seed: int, faults: list[dict[str, Any]]) -> tuple[SimulatedTarget, Any, Any]:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "nodelevel"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "gpusPerNode": 8},
        "seed": seed,
        "noise": REAL,
        "faults": faults,
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(doc))
    baselines = {"H100-SXM5-80GB": load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")}
    return SimulatedTarget(spec, load_fleet(tmp / "fleet.yaml", spec), baselines), spec, baselines


def _peers(spec: Any, baselines: Any, evidence: list[NodeEvidence]) -> PeerComparisons:
    pool = spec.pool_names[0]
    return PeerComparisons(lambda _pool: evidence, spec, {pool: next(iter(baselines.values()))})


def _node_findings(peers: PeerComparisons, metrics: list[str], nodes: list[str]) -> set[tuple[str, str]]:
    pool = peers.spec.pool_names[0]
    out = set()
    for metric in metrics:
        idx = peers.index(metric, pool)
        for node in nodes:
            f = idx.node_level(node)
            if f is not None and f.status is not CheckStatus.PASS:
                out.add((metric, node))
    return out


def one_fleet(tmp: Path, nodes: int, seed: int, slows: tuple[float, ...]) -> dict[str, Any]:
    """The clean fleet's node-level findings on every per-GPU metric; per studied metric, whether the slow node is
    one node-level finding (and how many per-GPU stragglers its GPUs show besides)."""
    t, spec, baselines = _target(tmp, nodes, seed, [])
    plan = MeasurePlan(f"2026-12-01T00-00-00Z-nodelevel-{seed}", PROBES, 2)
    clean = [t.measure_node(n, plan) for n in t.names]
    peers = _peers(spec, baselines, clean)
    pool = spec.pool_names[0]
    metrics = [m for m in peers.metrics(pool) if m not in NODE_METRICS]
    out: dict[str, Any] = {"false": _node_findings(peers, metrics, t.names), "metrics": len(metrics), "caught": {}}
    for slow, metric in ((slow, metric) for slow in slows for metric in STUDIED):
        fault = [{"kind": "slow", "node": NODE, "metric": metric, "factor": round(1 - slow, 4)}]
        ts, _, _ = _target(tmp, nodes, seed, fault)
        ev = [e if e.node != NODE else ts.measure_node(NODE, plan) for e in clean]
        p = _peers(spec, baselines, ev)
        idx = p.index(metric, pool)
        found = idx.node_level(NODE)
        gpus = sum(idx.judge((NODE, g)).status is not CheckStatus.PASS for g in range(8))
        out["caught"][(slow, metric)] = (found is not None and found.status is CheckStatus.FAIL, gpus)
    return out


def run(args: Any) -> int:
    sizes = (16,) if args.smoke else tuple(args.sizes)
    seeds = 2 if args.smoke else args.seeds
    slows = (0.04,) if args.smoke else (0.03, 0.04)
    t0 = time.perf_counter()
    lines = [
        f"Measured in one run: {seeds} seeds per fleet size (seeds {args.first_seed}-{args.first_seed + seeds - 1}), "
        "realistic noise (board spread 1%, "
        "node spread 0.5%, cv 1%, Student-t df 5, 0.5% outliers to -5%), the default straggler settings.",
        "",
        "| fleet | slow node | caught as one node-level finding: " + " / ".join(STUDIED) + " | per-GPU "
        "stragglers on the slow node | clean fleets with any node-level finding (every per-GPU metric) |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="gpucert-nodelevel-") as tmp:
        for n in sizes:
            results = []
            for seed in range(args.first_seed, args.first_seed + seeds):
                results.append(one_fleet(Path(tmp), n, seed, slows))
                print(f"{n} x 8 seed {seed}: {results[-1]}", file=sys.stderr, flush=True)
            for slow in slows:
                caught = " / ".join(f"{sum(r['caught'][(slow, m)][0] for r in results)}/{seeds}" for m in STUDIED)
                extra = sum(r["caught"][(slow, m)][1] for r in results for m in STUDIED)
                flagged = sum(bool(r["false"]) for r in results)
                pairs = sum(len(r["false"]) for r in results)
                judged = seeds * n * results[0]["metrics"]
                lines.append(
                    f"| {n} x 8 | {slow:.0%} | {caught} | {extra} | {flagged}/{seeds} ({pairs} of {judged} "
                    "node-metric figures) |"
                )
                print(lines[-1], flush=True)
    lines += ["", f"{time.perf_counter() - t0:.0f} s."]
    text = "\n".join(lines)
    print(text)
    write_section(args.results, "nodelevel", text)
    return 0
