"""The controller's rules alone: every check a run folder's plan requires, decided in this process over its evidence
(what a re-test's carried nodes cost, and gpucert's own share of a full run beside pytest's cost per item).

    PYTHONPATH=src .venv/bin/python benchmarks/decisions.py RUN_DIR [--profile N]

Prints the CPU seconds to open the run and plan it, and to decide every check (per check); --profile N adds the N
functions with the most own time under cProfile (a second pass over a fresh evaluation).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from gpucert.evaluate.evaluation import Evaluation


def decide_all(run: Path) -> tuple[float, float, int]:
    """CPU seconds to open and plan, CPU seconds to decide, and how many checks."""
    t0 = time.process_time()
    ev = Evaluation.from_run(run)
    keys = list(ev.plan.required)
    t1 = time.process_time()
    for key in keys:
        try:
            ev.decide(key)
        except Exception:  # a check that cannot be decided is the controller's error: timed the same
            continue
    return t1 - t0, time.process_time() - t1, len(keys)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args()
    opened, decided, n = decide_all(args.run_dir)
    each = decided / n * 1e6
    print(f"open + plan {opened:.2f} s CPU; {n} checks decided in {decided:.2f} s CPU ({each:.0f} us each)")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(decide_all, args.run_dir)
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
