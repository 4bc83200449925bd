"""Every finding of a run folder as JSON lines, for a byte-for-byte comparison of the rules before and after a change
that must not change a decision (issue 28: the rules made cheaper, decided identically).

    PYTHONPATH=<tree>/src python benchmarks/decisions_dump.py RUN_DIR OUT.jsonl [reverse]
    cmp before.jsonl after.jsonl

Each required check's finding as the session counts it (`counted`: status, message, figures, cause), the peers'
`against_sku` and `undecided`, and every GPU's figure as the reports read it (`sampled`), sorted by key. `reverse`
reads the figures first and decides the checks backwards: a cache filled in another order must decide the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpucert.evaluate.evaluation import Evaluation, counted
from gpucert.plan.checks import GPU_METRICS, NODE_METRICS


def figures(ev: Evaluation) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in ev.inventory.names:
        for metric in (*GPU_METRICS, *NODE_METRICS):
            for gpu in [None] if metric in NODE_METRICS else range(ev.pools.gpus_per_node(node) or 8):
                try:
                    out[f"{node}/{metric}/{gpu}"] = repr(ev.sampled(metric, node, gpu))
                except Exception as exc:  # the same exception both times is the same answer
                    out[f"{node}/{metric}/{gpu}"] = repr(exc)
    return out


def main() -> int:
    run, target = Path(sys.argv[1]), Path(sys.argv[2])
    backwards = len(sys.argv) > 3 and sys.argv[3] == "reverse"
    ev = Evaluation.from_run(run)
    keys = list(ev.plan.required)
    told = figures(ev) if backwards else {}
    found: dict[str, Any] = {}
    for key in keys[::-1] if backwards else keys:
        try:
            found[str(key)] = counted(ev, key).to_json()
        except Exception as exc:
            found[str(key)] = repr(exc)
    if not backwards:
        told = figures(ev)
    with target.open("w") as fh:
        for k in sorted(found):
            fh.write(json.dumps([k, found[k]], sort_keys=True) + "\n")
        fh.write(json.dumps({"against_sku": ev.peers.against_sku(), "undecided": ev.peers.undecided()}) + "\n")
        for k in sorted(told):
            fh.write(json.dumps([k, told[k]]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
