"""verdict.json (`gpucert.io/verdict/v1`): the machine-readable result of a run. Pure but for the final write."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucert.checks import CheckStatus, Finding

__all__ = [
    "VERDICT_SCHEMA",
    "NodeSummary",
    "build_verdict",
    "node_summaries",
    "read_verdict",
    "write_verdict",
]

VERDICT_SCHEMA = "gpucert.io/verdict/v1"


def _sort_key(f: Finding) -> tuple[str, str, int, str]:
    return (f.node or "", f.check, -1 if f.gpu is None else f.gpu, f.message)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    node: str
    passed: int
    failed: int
    errors: int
    skipped: int
    failing_checks: tuple[str, ...]

    @property
    def result(self) -> str:
        return "fail" if self.failed or self.errors else "pass"


def node_summaries(outcomes: Iterable[Finding]) -> list[NodeSummary]:
    counts: dict[str, Counter[CheckStatus]] = defaultdict(Counter)
    failing: dict[str, set[str]] = defaultdict(set)
    for f in outcomes:
        key = f.node or "(fleet)"
        counts[key][f.status] += 1
        if f.status in (CheckStatus.FAIL, CheckStatus.ERROR):
            failing[key].add(f.check)
    return [
        NodeSummary(
            node,
            c[CheckStatus.PASS],
            c[CheckStatus.FAIL],
            c[CheckStatus.ERROR],
            c[CheckStatus.SKIP],
            tuple(sorted(failing[node])),
        )
        for node, c in sorted(counts.items())
    ]


def build_verdict(
    *, run: str, spec: str, target: str, nodes: int, gpus: int, outcomes: list[Finding]
) -> dict[str, Any]:
    c = Counter(f.status for f in outcomes)
    findings = sorted((f for f in outcomes if f.status in (CheckStatus.FAIL, CheckStatus.ERROR)), key=_sort_key)
    return {
        "schema": VERDICT_SCHEMA,
        "run": run,
        "spec": spec,
        "target": target,
        "result": "fail" if findings else "pass",
        "summary": {
            "nodes": nodes,
            "gpus": gpus,
            "checks": len(outcomes),
            "passed": c[CheckStatus.PASS],
            "failed": c[CheckStatus.FAIL],
            "errors": c[CheckStatus.ERROR],
            "skipped": c[CheckStatus.SKIP],
        },
        "findings": [f.to_json() for f in findings],
        "nodes": {
            s.node: {
                "result": s.result,
                "passed": s.passed,
                "failed": s.failed,
                "errors": s.errors,
                "skipped": s.skipped,
                "failing": list(s.failing_checks),
            }
            for s in node_summaries(outcomes)
        },
    }


def write_verdict(path: Path, verdict: dict[str, Any]) -> None:
    path.write_text(json.dumps(verdict, indent=1) + "\n", encoding="utf-8")


def write_run_info(run_dir: Path, *, run: str, spec: str, target: str, started: float, finished: float) -> None:
    """run.json: when the run ran and with which gpucert, for the attestation's predicate."""
    from gpucert import __version__
    from gpucert.resources import source_commit

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    info = {
        "run": run,
        "spec": spec,
        "target": target,
        "started": iso(started),
        "finished": iso(finished),
        "gpucert_version": __version__,
        "git_commit": source_commit(),
    }
    (run_dir / "run.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


def read_verdict(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
