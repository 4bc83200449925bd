"""`python -m gpucert.probes --plan plan.json`: run one node's probes and print its evidence document."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from gpucert.errors import GpucertError
from gpucert.probes.framing import frame
from gpucert.probes.runner import ProbePlan, run_plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpucert.probes", description=__doc__)
    ap.add_argument("--plan", required=True, help="the probe plan (JSON) for this node")
    ap.add_argument("--node", default=None, help="this node's name (a probe Job passes spec.nodeName)")
    ap.add_argument("--framed", action="store_true", help="frame the document with its length and sha256")
    args = ap.parse_args(argv)
    try:
        data = json.loads(Path(args.plan).read_text(encoding="utf-8"))
        if args.node:
            data["node"] = args.node
        plan = ProbePlan.model_validate(data)
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        print(f"gpucert.probes: error: {args.plan}: {exc}", file=sys.stderr)
        return 2
    try:
        evidence = run_plan(plan)
    except GpucertError as exc:
        print(f"gpucert.probes: error: {exc}", file=sys.stderr)
        return exc.exit_code
    document = evidence.model_dump_json(by_alias=True)
    sys.stdout.write(frame(document) if args.framed else document + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
