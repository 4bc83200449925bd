"""`python -m gpucert.measure.probes --plan plan.json`: run one node's probes and print its evidence document.

With `--framed` every probe's part is printed framed as soon as it finishes, and the document last (see
`framing`: probe output version 2, bounded frames within one pod log's budget), so a pod killed half-way keeps
what it measured. With `--processes N --rendezvous HOST:PORT` this
process is one node of an all-reduce across N nodes (its rank from `--rank`, default $JOB_COMPLETION_INDEX);
process 0 prints the multi-node evidence document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpucert.errors import GpucertError
from gpucert.measure.probes.framing import DOCUMENT, Framer
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.measure.probes.stream import framer
from gpucert.measure.probes.watchdog import abandoned


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpucert.measure.probes", description=__doc__)
    ap.add_argument("--plan", required=True, help="the probe plan (JSON) for this node")
    ap.add_argument("--node", default=None, help="this node's name (a probe Job passes spec.nodeName)")
    ap.add_argument(
        "--framed",
        action="store_true",
        help="write the evidence as numbered, checksummed frames (probe output version 2)",
    )
    ap.add_argument("--processes", type=int, default=0, help="all-reduce across this many nodes (one process each)")
    ap.add_argument("--rank", type=int, default=None, help="this process's rank (default: $JOB_COMPLETION_INDEX)")
    ap.add_argument("--rendezvous", default=None, metavar="HOST:PORT", help="process 0's address (multi-node)")
    ap.add_argument("--rendezvous-timeout", type=float, default=600, help="seconds to wait for every process")
    ap.add_argument("--pool", default=None, help="measure this pool's rails (the plan's pool_rails) as the fabric")
    args = ap.parse_args(argv)
    if args.processes and not args.rendezvous:
        ap.error("--processes needs --rendezvous HOST:PORT")
    try:
        plan = _load_plan(args.plan, args.node, args.pool)
    except (OSError, json.JSONDecodeError, ValidationError, KeyError) as exc:
        print(f"gpucert.measure.probes: error: {args.plan}: {exc}", file=sys.stderr)
        return 2
    out = Framer(sys.stdout.write, sys.stdout.flush)
    try:
        if args.processes:
            from gpucert.measure.probes.multinode import run_multinode

            host, _, port = args.rendezvous.rpartition(":")
            rank = args.rank if args.rank is not None else int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
            fabric = run_multinode(
                plan, rank=rank, processes=args.processes, host=host, port=int(port), timeout_s=args.rendezvous_timeout
            )
            if fabric is None:
                print(f"gpucert.measure.probes: rank {rank} done")
                return 0
            document = fabric.model_dump_json(by_alias=True)
        else:
            emit = framer(out) if args.framed else None
            document = run_plan(plan, emit=emit).model_dump_json(by_alias=True)
    except GpucertError as exc:
        print(f"gpucert.measure.probes: error: {exc}", file=sys.stderr)
        return _leave(exc.exit_code)
    except (OSError, TimeoutError, ConnectionError) as exc:  # a hung all-reduce on a rank other than 0, too
        print(f"gpucert.measure.probes: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return _leave(3)
    if not args.framed:
        sys.stdout.write(document + "\n")
        sys.stdout.flush()
    elif not out.emit(DOCUMENT, document, final=True):
        print(
            f"gpucert.measure.probes: error: the evidence is over the log's {out.budget} byte budget", file=sys.stderr
        )
    return _leave(0)


def _load_plan(path: str, node: str | None, pool: str | None) -> ProbePlan:
    """The plan file, for `node` (its name over the plan's), measuring `pool`'s rails as the fabric."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if node:
        data["node"] = node
    if pool is not None:
        data["fabric_rails"] = _pool_rails(data, pool)
    return ProbePlan.model_validate(data)


def _pool_rails(data: dict[str, Any], pool: str) -> Any:
    """The rails `--pool` names, from the plan's pool_rails; a pool the plan has none for is an error, never
    another pool's rails (nor every port)."""
    rails = data.get("pool_rails")
    if not isinstance(rails, dict) or pool not in rails:
        known = ", ".join(sorted(rails)) if isinstance(rails, dict) else "none"
        raise KeyError(f"pool_rails has no rails for pool {pool!r} (--pool); it has: {known or 'none'}")
    return rails[pool]


def _leave(code: int) -> int:
    """`code`, or leave at once where a hung probe's thread (and its CUDA context) would hold the exit forever."""
    if abandoned():
        print(f"gpucert.measure.probes: abandoned {', '.join(abandoned())}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
