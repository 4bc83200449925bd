"""What a re-test's carried nodes cost the controller: `decide_carried` over a re-test folder, CPU seconds, after the
measured nodes' checks were decided (as the session's items decide them first, building the peer indexes), each
repeat on a fresh evaluation. `--dump FILE` writes every carried outcome's finding (and kept evidence) as JSON lines,
in the order decided, for a byte-for-byte comparison of two trees (`cmp`).

    PYTHONPATH=src .venv/bin/python benchmarks/carried_decide.py RETEST_RUN_DIR [--repeat 3] [--dump out.jsonl]

A folder re-tested by other code than this tree's keeps no decision (acceptance/retest_kept.py): the script says so,
and then times every carried check decided by the rules.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

from gpucert.cli.main import THRESHOLDS
from gpucert.evaluate.evaluation import Evaluation, counted
from gpucert.pytest.carried import decide_carried
from gpucert.pytest.context import RunContext


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dump", type=Path)
    args = ap.parse_args()
    gc.set_threshold(*THRESHOLDS)  # as the command runs
    for _ in range(args.repeat):
        ctx = RunContext(Evaluation.from_run(args.run_dir))
        if not ctx.carried:
            ap.error(f"{args.run_dir} carried no node (not a re-test)")
        for key in ctx.evaluation.plan.required:
            if key.node not in ctx.carried:
                counted(ctx.evaluation, key)
        t = time.process_time()
        n = decide_carried(ctx)
        spent = time.process_time() - t
        said = ctx.kept.said() if ctx.kept is not None else ""
        print(f"decide_carried {spent:.3f} s CPU for {n} checks of {len(ctx.carried)} carried nodes; {said}")
    if args.dump is not None:
        with args.dump.open("w") as fh:
            for key, outcome in ctx.outcomes.items():
                found = [str(key), outcome.finding.to_json(), ctx.evidence_of.get(key)]
                fh.write(json.dumps(found, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
