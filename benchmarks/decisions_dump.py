"""Every finding of a run folder as JSON lines, for a byte-for-byte comparison of the rules before and after a change
that must not change a decision (issue 28: the rules made cheaper, decided identically).

    PYTHONPATH=<tree>/src python benchmarks/decisions_dump.py RUN_DIR OUT.jsonl [reverse|nodes]
    cmp before.jsonl after.jsonl

Each required check's finding as the session counts it (`counted`: status, message, figures, cause), the peers'
`against_sku` and `undecided`, and every GPU's figure as the reports read it (`sampled`), sorted by key. `reverse`
reads the figures first and decides the checks backwards: a cache filled in another order must decide the same.
`nodes` decides each node's checks together, as a re-test decides its carried nodes' (`counted_node`): the same
findings as `counted`'s, key by key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpucert.evaluate.evaluation import Evaluation, counted, counted_node
from gpucert.plan.checks import GPU_METRICS, NODE_METRICS, CheckKey


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


def by_node(ev: Evaluation, keys: list[CheckKey]) -> dict[str, Any]:
    """Each node's keys decided together (`counted_node`), the fleet's one by one."""
    nodes: dict[str | None, list[CheckKey]] = {}
    for key in keys:
        nodes.setdefault(key.node, []).append(key)
    found: dict[str, Any] = {}
    for node, mine in nodes.items():
        try:
            findings = [counted(ev, k) for k in mine] if node is None else counted_node(ev, node, mine)
            found.update((str(k), f.to_json()) for k, f in zip(mine, findings, strict=True))
        except Exception as exc:
            found.update((str(k), repr(exc)) for k in mine)
    return found


def main() -> int:
    run, target = Path(sys.argv[1]), Path(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else ""
    backwards = mode == "reverse"
    ev = Evaluation.from_run(run)
    keys = list(ev.plan.required)
    told = figures(ev) if backwards else {}
    found: dict[str, Any] = by_node(ev, keys) if mode == "nodes" else {}
    for key in (keys[::-1] if backwards else keys) if mode != "nodes" else ():
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
