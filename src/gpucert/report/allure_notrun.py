"""Allure results for the required checks a run did not run: one per node (and one for the fleet's own checks, named
apart from any node: allure_passed.py FLEET),
`skipped`, with how many of its checks were deselected or not reached, a step per check family and each check a
step of it.

Allure's overview donut reads the share of passed results (allure-generator 2.x, PieChartView.getChartTitle:
passed / total). A run that did not run every check has only its results to count: `-k gpu-node-2` on four nodes
wrote the certification (broken) and gpu-node-2's passed checks (passed), and the overview read 50% green for a run
that did a quarter of its checks. With a result per node whose checks did not run, it reads as what was not done."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping

from allure_commons.model2 import Label, Parameter, Status, StatusDetails, TestResult, TestStepResult

from gpucert.plan.checks import CheckKey, family_of
from gpucert.report.allure_passed import shown, spoken
from gpucert.report.verdict import Outcome

__all__ = ["DESELECTED", "NOT_REACHED", "NOT_RUN_CATEGORY", "not_run", "not_run_results"]

DESELECTED, NOT_REACHED = "deselected", "not reached"
NOT_RUN_CATEGORY: dict[str, object] = {
    "name": "Not run (the run is INCOMPLETE)",
    "matchedStatuses": ["skipped"],
    "messageRegex": r"(?s).*required checks? did not run.*",
}


def not_run(
    required: Iterable[CheckKey], outcomes: Mapping[CheckKey, Outcome], selected: set[CheckKey] | None
) -> dict[CheckKey, str]:
    """Each required check with no outcome, and why, as the verdict's coverage counts it (report/verdict.py): not
    selected is deselected, selected is not reached; a session that never said what it selected, not reached."""
    # frozenset.difference(dict) looks each key up with the hash the set keeps (CPython's set_difference): a
    # 1,024 x 8 plan has ~190,000 keys (the order: not_run_results groups them)
    absent = frozenset(required).difference(outcomes)
    return {key: DESELECTED if selected is not None and key not in selected else NOT_REACHED for key in absent}


def not_run_results(missing: Mapping[CheckKey, str], started_ms: int, stopped_ms: int) -> list[TestResult]:
    """One skipped result per node (or the fleet) with required checks that did not run."""
    by_node: dict[str | None, list[tuple[CheckKey, str]]] = defaultdict(list)
    for key, why in missing.items():
        by_node[key.node].append((key, why))  # None: the fleet's own, apart from a node named `fleet`
    ordered = sorted(by_node.items(), key=lambda item: shown(item[0]))
    return [_result(node, items, started_ms, stopped_ms) for node, items in ordered]


def _result(where: str | None, items: list[tuple[CheckKey, str]], started_ms: int, stopped_ms: int) -> TestResult:
    why: dict[str, int] = {DESELECTED: 0, NOT_REACHED: 0}
    checks: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # family -> check -> keys
    for key, said in items:
        why[said] += 1
        checks[family_of(key.check).value][key.check] += 1
    n, node, token = len(items), spoken(where), shown(where)
    counted = ", ".join(f"{k} {w}" for w, k in why.items() if k)
    message = (
        f"{node}: {n} required check{'s' if n != 1 else ''} did not run ({counted}): the run is INCOMPLETE, and "
        "no verdict on them (deselected: -k, --deselect, -m, --lf or a suite left off; not reached: -x, "
        "--maxfail or an interrupt)"
    )
    steps = [
        TestStepResult(
            name=f"{family}: {sum(inner.values())} checks did not run",
            status=Status.SKIPPED,
            start=started_ms,
            stop=started_ms,
            steps=[
                TestStepResult(name=f"{check} ({k})", status=Status.SKIPPED, start=started_ms, stop=started_ms)
                for check, k in sorted(inner.items())
            ],
        )
        for family, inner in sorted(checks.items())
    ]
    return TestResult(
        uuid=str(uuid.uuid4()),
        name=f"{n} required check{'s' if n != 1 else ''} did not run on {node}",
        fullName=f"gpucert.not_run[{token}]",
        historyId=f"not_run[{token}]",
        status=Status.SKIPPED,
        statusDetails=StatusDetails(message=message),
        start=started_ms,
        stop=stopped_ms,
        steps=steps,
        labels=[
            Label("epic", "not run"),
            Label("feature", "checks that did not run"),
            Label("story", token),
            Label("suite", "not run"),
        ],
        parameters=[Parameter("node", token), Parameter("checks", str(n))],
    )
