"""What a re-test's kept decisions save: the carried nodes' local checks of a re-test folder decided by the rules, or
kept from the source's signed verdict (acceptance/retest_kept.py: the gates, then a kept finding each), CPU seconds,
each on a fresh evaluation whose evidence was read beforehand (as the session's items have read it).

    PYTHONPATH=src .venv/bin/python benchmarks/kept_decisions.py RETEST_RUN_DIR [--repeat 3]

The folder must be a re-test made by this tree's code (its source's run.json names this code's digest), else
nothing is kept and the script says why.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpucert.acceptance.retest_kept import kept_decisions
from gpucert.evaluate.catalog import REGISTRY
from gpucert.evaluate.evaluation import Evaluation, counted
from gpucert.plan.checks import CheckKey
from gpucert.plan.records import RetestRecord, read_retest_record
from gpucert.plan.runfolder import RunFolder


def fresh(run: RunFolder, record: RetestRecord) -> tuple[Evaluation, list[CheckKey]]:
    """A new evaluation of the run with every node's evidence read, and the carried nodes' local checks."""
    ev = Evaluation.from_run(run)
    for node in ev.inventory.names:
        ev.usable(node)
    keys = [k for k in ev.plan.required if k.node in record.carried and REGISTRY.rule_for(k.check).local]
    return ev, keys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    run = RunFolder(args.run_dir)
    record = read_retest_record(run)
    if record is None:
        ap.error(f"{args.run_dir} is not a re-test (no retest/record.json)")
    for _ in range(args.repeat):
        ev, keys = fresh(run, record)
        t = time.process_time()
        for key in keys:
            counted(ev, key)
        rules = time.process_time() - t
        ev, keys = fresh(run, record)
        t = time.process_time()
        kept = kept_decisions(ev, record)
        gates = time.process_time() - t
        for key in keys:
            if kept.keeps(key):
                kept.findings([key])[0]
        total = time.process_time() - t
        if kept.refused:
            print(f"nothing kept: {kept.refused}")
        print(
            f"{len(keys)} local checks of {len(record.carried)} carried nodes ({len(kept.nodes)} kept): "
            f"rules {rules:.2f} s CPU, kept {total:.2f} s (the gates {gates:.2f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
