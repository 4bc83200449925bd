"""CPU to build a run's peer indexes (issue 28: the first measured checks of a re-test build every metric's index
of the pool): each pool's figures believed (rules/performance_batch.py) and each metric's PeerIndex, then what the
checks ask of them (a node's node-level finding and quiet keys, the pool's combined z), on a run folder's evidence
read beforehand. CPU seconds (process time: the machine is shared), the best of --repeat fresh views.

    PYTHONPATH=<tree>/src python benchmarks/peer_index.py RUN_DIR [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

from gpucert.cli.main import THRESHOLDS
from gpucert.evaluate import peers
from gpucert.evaluate.evaluation import Evaluation


def once(run: Path) -> dict[str, float]:
    ev = Evaluation.from_run(run)
    for node in ev.inventory.names:  # the evidence read first: its cost is not the indexes'
        ev.usable(node)
    gc.collect()
    out: dict[str, float] = {}
    t = time.process_time()
    for pool in ev.spec.pool_names:
        for metric in ev.peers.metrics(pool):
            ev.peers.index(metric, pool)
    out["indexes"] = time.process_time() - t
    t = time.process_time()
    for pool in ev.spec.pool_names:
        node = ev.pools.members(pool)[0]
        for metric in ev.peers.metrics(pool):
            index = ev.peers.index(metric, pool)
            index.node_level(node)
            index.quiet((node, 0), stability=peers.unstable_is_judged(metric))
    out["node level, quiet"] = time.process_time() - t
    t = time.process_time()
    for pool in ev.spec.pool_names:
        ev.peers.combined(pool)
    out["combined"] = time.process_time() - t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    gc.set_threshold(*THRESHOLDS)  # as the command runs
    runs = [once(args.run) for _ in range(args.repeat)]
    for what in runs[0]:
        print(f"{what:20s} {min(r[what] for r in runs):.3f} s CPU (best of {len(runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
