"""The soak controller's cost at fleet scale (issue 26): its share of the wall time between rounds, and its memory
over the rounds, on a simulated fleet in compressed time.

    PYTHONPATH=src python benchmarks/soak.py --nodes 64 --duration 24h --round 1h --time-scale 3600
    PYTHONPATH=src python benchmarks/soak.py --nodes 16 --duration 168h --round 1h --time-scale 0

With --time-scale 3600 an hour's round takes a second of wall time: the nodes' share (the simulated probes and the
wait for the round to end) stands in for the Jobs on a cluster. Prints the controller's time between rounds (judging,
committing the round, progress: every node waits on it), its time taking each node's round in as it arrives
(writing and summarising it: on a cluster, while the other nodes still run), both as shares of the wall time, and
the resident memory after each round (its growth per round: the round medians the trend test keeps).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from gpucert.fleet.soak import start_soak
from gpucert.fleet.soak.controller import Progress

ROOT = Path(__file__).resolve().parents[1]


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _write_spec(work: Path, nodes: int, duration: str, round_: str, scale: float) -> Path:
    fleet = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "soak-bench"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "namePrefix": "gpu-node-", "gpusPerNode": 8},
        "noise": {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005},
        "seed": 3,
        "soak": {"timeScale": scale, "faults": []},
    }
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"]["fleet"] = "fleet.yaml"
    spec["expect"]["nodes"] = nodes
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    spec["soak"] = {"duration": duration, "round": round_}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return work / "spec.yaml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--duration", default="24h")
    ap.add_argument("--round", default="1h")
    ap.add_argument("--time-scale", type=float, default=3600.0, help="simulated seconds per wall second (0: no wait)")
    args = ap.parse_args()
    rss: list[float] = []

    def after_round(p: Progress) -> None:
        rss.append(_rss_mib())

    with tempfile.TemporaryDirectory(prefix="gpucert-soak-") as tmp:
        work = Path(tmp)
        spec = _write_spec(work, args.nodes, args.duration, args.round, args.time_scale)
        result = start_soak(spec, work / "reports", on_progress=after_round)
        disk = sum(f.stat().st_size for f in (result.run / "soak").rglob("*") if f.is_file())
    rounds = len(rss)
    print(f"{args.nodes} nodes, {rounds} rounds of {args.round}, time scale {args.time_scale:g}: {result.result}")
    print(f"wall {result.wall_s:.1f} s ({result.wall_s / rounds:.3f} s a round)")
    print(
        f"controller between rounds {result.controller_s:.2f} s = {result.controller_s / result.wall_s:.2%} of the "
        f"wall ({result.controller_s / rounds * 1000:.0f} ms a round)"
    )
    print(
        f"  of which CPU {result.controller_cpu_s:.2f} s = {result.controller_cpu_s / result.wall_s:.2%} of the wall "
        f"({result.controller_cpu_s / rounds * 1000:.0f} ms a round; the rest is waiting for a busy machine's CPU)"
    )
    print(
        f"taking rounds in as they came {result.ingest_s:.2f} s = {result.ingest_s / result.wall_s:.2%} of the wall "
        f"({result.ingest_s / rounds / args.nodes * 1000:.2f} ms a node-round)"
    )
    quarter = max(rounds // 4, 1)
    growth = (rss[-1] - rss[quarter - 1]) / max(rounds - quarter, 1) * 1024
    print(
        f"RSS after round {quarter}: {rss[quarter - 1]:.0f} MiB; after round {rounds}: {rss[-1]:.0f} MiB "
        f"({growth:.0f} KiB a round); on disk {disk / 2**20:.0f} MiB ({disk / rounds / 2**20:.1f} MiB a round)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
