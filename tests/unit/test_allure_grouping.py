"""report/allure.py groups a run's outcomes by node and check wherever they come in the run: a re-test's carried
nodes each at once, its measured items check by check across nodes (so a node's outcomes are interleaved with
others'). Each node's passed result takes each check's own span, whatever the order."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.required import Plan
from gpucert.report.allure import write_allure
from gpucert.report.verdict import Outcome, build_verdict

PASS, FAIL = CheckStatus.PASS, CheckStatus.FAIL
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _outcome(check: str, node: str | None, gpu: int | None, status: CheckStatus, at: float) -> Any:
    return CheckKey(check, node, gpu), Outcome(
        Finding(check, status, node, gpu, "slow" if status is FAIL else ""), at, at + 1
    )


# as measured items report: one check on every node, then the next; n2's failing GPU took its own time
INTERLEAVED = [
    _outcome("memory.bandwidth", "n1", 0, PASS, 10.0),
    _outcome("memory.bandwidth", "n2", 0, PASS, 20.0),
    _outcome("memory.bandwidth", "n1", 1, PASS, 12.0),
    _outcome("inventory.nodes", None, None, PASS, 1.0),
    _outcome("memory.bandwidth", "n2", 1, FAIL, 22.0),
    _outcome("node.reachable", "n1", None, PASS, 5.0),
    _outcome("node.reachable", "n2", None, PASS, 20.0),
]


def _write(folder: Path, pairs: list[Any]) -> dict[str, str]:
    outcomes = dict(pairs)
    plan = Plan(("certify",), frozenset(outcomes))
    verdict = build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=["n1", "n2"],
        gpus=2,
        plan=plan,
        outcomes=outcomes,
        selected=set(outcomes),
    )
    write_allure(folder, outcomes, {}, verdict=verdict, started_ms=7, stopped_ms=99)
    texts = [_UUID.sub("U", p.read_text(encoding="utf8")) for p in folder.glob("*-result.json")]
    return {json.loads(t)["fullName"]: t for t in texts}


def _steps(result: str) -> dict[str, tuple[int, int, str]]:
    steps = [s for family in json.loads(result)["steps"] for s in family["steps"]]
    return {s["name"]: (s["start"], s["stop"], s.get("parameters", [{}])[0].get("value", "")) for s in steps}


def test_each_nodes_checks_are_grouped_with_their_own_spans_whatever_the_order(tmp_path: Path) -> None:
    results = _write(tmp_path / "interleaved", INTERLEAVED)
    assert sorted(results) == [
        "certify.memory.bandwidth[n2]",
        "gpucert.certification",
        "gpucert.passed[@fleet]",
        "gpucert.passed[n1]",
        "gpucert.passed[n2]",
    ]
    assert _steps(results["gpucert.passed[n1]"]) == {
        "memory.bandwidth (2 GPUs)": (10000, 13000, "0,1"),
        "node.reachable": (5000, 6000, ""),
    }
    # n2's passed GPU and node check share one span; its failed GPU's is not theirs
    assert _steps(results["gpucert.passed[n2]"]) == {
        "memory.bandwidth (1 GPU)": (20000, 21000, "0"),
        "node.reachable": (20000, 21000, ""),
    }
    failed = json.loads(results["certify.memory.bandwidth[n2]"])
    assert (failed["start"], failed["stop"]) == (20000, 23000)
    by_node = sorted(INTERLEAVED, key=lambda pair: (pair[0].node or "", pair[0].check, pair[0].gpu or 0))
    assert _write(tmp_path / "by_node", by_node) == results
