"""A soak's verdict (`verdict.json`, `gpucert.io/verdict/v3`, kind `soak`) and what its signature states: per node
whether it stayed clean for the soak's duration, with the findings of the round that took it out. Pure: the
Verdict is built from the soak's result; writing and signing are the caller's.

A node passes when its clean hours reach the duration; a node that left fails with its round's findings; a node
whose clock restarted (`--rejoin`) and has not reached the duration is incomplete: never a pass.
"""

from __future__ import annotations

from typing import Any

from gpucert.report.verdict_model import Coverage, Group, NodeSummary, Summary, Verdict, VerdictFinding

__all__ = ["SOAK_PREDICATE_TYPE", "soak_predicate", "soak_verdict"]

SOAK_PREDICATE_TYPE = "https://gpucert.io/soak/v1"


def soak_verdict(
    *,
    run: str,
    spec: str,
    target: str,
    result: str,
    nodes: dict[str, dict[str, Any]],
    gpus_per_node: int,
    fabric: dict[str, Any] | None = None,
) -> Verdict:
    """The soak's verdict from its per-node outcome (`soak/result.json`'s nodes) and, where it ran, the all-reduce
    across the nodes (its `fabric`: a fleet-level group and its findings)."""
    rows = [*nodes.values(), *([fabric] if fabric is not None else [])]
    findings = [VerdictFinding.model_validate(f) for v in rows for f in v["findings"]]
    fabric_failed = int(fabric is not None and fabric["result"] == "fail")
    summaries = {
        node: NodeSummary(
            result="pass" if v["result"] == "pass" else "fail" if v["result"] == "fail" else "incomplete",
            passed=int(v["result"] == "pass"),
            failed=int(v["result"] == "fail"),
            errors=0,
            skipped=0,
            failing=tuple(sorted({f["check"] for f in v["findings"]})),
            pool=v["pool"],
        )
        for node, v in nodes.items()
    }
    done = [n for n, v in nodes.items() if v["result"] != "incomplete"]
    failed = sum(1 for v in nodes.values() if v["result"] == "fail")
    passed = sum(1 for v in nodes.values() if v["result"] == "pass")
    return Verdict.model_validate(
        {
            "schema": "gpucert.io/verdict/v3",
            "run": run,
            "kind": "soak",
            "spec": spec,
            "target": target,
            "result": result,
            "coverage": Coverage(
                suites=("soak",),
                required=len(nodes),
                ran=len(done),
                not_reached=len(nodes) - len(done),
                complete=len(done) == len(nodes),
                missing=tuple(n for n in nodes if n not in done),
            ),
            "summary": Summary(
                nodes=len(nodes),
                gpus=len(nodes) * gpus_per_node,
                checks=len(nodes),
                passed=passed,
                failed=failed,
                errors=0,
                skipped=len(nodes) - passed - failed,
            ),
            "findings": findings,
            "fleet": Group(
                result="pass" if result == "pass" else "fail" if result == "fail" else "incomplete",
                passed=int(fabric is not None and not fabric_failed),
                failed=fabric_failed,
                errors=0,
                skipped=0,
            ),
            "nodes": summaries,
        }
    )


def soak_predicate(
    verdict: Verdict, *, spec_sha256: str, started: str, finished: str, soak: dict[str, Any], nodes: dict[str, Any]
) -> dict[str, Any]:
    """What the soak's signature states beside the digests of its files."""
    return {
        "spec": {"name": verdict.spec, "sha256": spec_sha256},
        "target": verdict.target,
        "run": {"id": verdict.run, "started": started, "finished": finished},
        "result": verdict.result,
        "soak": soak,
        "nodes": {n: {"result": v["result"], "cleanHours": v["cleanHours"]} for n, v in nodes.items()},
    }
