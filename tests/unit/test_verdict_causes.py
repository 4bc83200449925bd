"""A skip's cause found by its key's name (report/verdict.py `_cause_finder`) as a map of every outcome by name finds
it: the verdict of ~10^5 checks names only the few hundred causes its skips give (issue 28), and reads the same."""

from __future__ import annotations

import pytest

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.report.verdict import Outcome, judge_skips


def _by_every_name(outcomes: dict[CheckKey, Outcome]) -> dict[str, Finding | None]:
    """What each skip's cause was before: a map of every outcome's finding by str(key), the later key kept."""
    by_name = {str(k): o.finding for k, o in outcomes.items()}
    return {str(k): by_name.get(o.finding.cause or "") for k, o in outcomes.items()}


def _outcomes(*pairs: tuple[CheckKey, Finding]) -> dict[CheckKey, Outcome]:
    return {k: Outcome(f) for k, f in pairs}


def _f(key: CheckKey, status: CheckStatus, cause: str | None = None) -> tuple[CheckKey, Finding]:
    return key, Finding(key.check, status, node=key.node, gpu=key.gpu, message="m", cause=cause)


FLEET = CheckKey("inventory.nodes")
NODE_FLEET = CheckKey("inventory.nodes", "fleet")  # a node named `fleet`: its key's name is the fleet's own
CASES = {
    "cause failed": [
        _f(CheckKey("node.reachable", "n1"), CheckStatus.FAIL),
        _f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, "node.reachable@n1"),
    ],
    "cause passed": [
        _f(CheckKey("node.reachable", "n1"), CheckStatus.PASS),
        _f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, "node.reachable@n1"),
    ],
    "cause did not run": [_f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, "node.reachable@n1")],
    "no cause": [_f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, None)],
    "a GPU's cause": [
        _f(CheckKey("health.ecc", "n1", 3), CheckStatus.PASS),
        _f(CheckKey("health.xid", "n1", 3), CheckStatus.SKIP, "health.ecc@n1/gpu3"),
    ],
    "a detail's cause": [
        _f(CheckKey("stack.version", "n1", None, "driver"), CheckStatus.FAIL),
        _f(CheckKey("stack.skew", "n1"), CheckStatus.SKIP, "stack.version@n1[driver]"),
    ],
    "not a key's name": [
        _f(CheckKey("health.ecc", "n1", 3), CheckStatus.PASS),
        _f(CheckKey("health.xid", "n1", 3), CheckStatus.SKIP, "health.ecc@n1/gpuX"),
    ],
    "a name that reads back otherwise": [
        _f(CheckKey("health.ecc", "n1", 3), CheckStatus.PASS),
        _f(CheckKey("health.xid", "n1", 3), CheckStatus.SKIP, "health.ecc@n1/gpu03"),
    ],
    "the fleet, and a node named fleet (fleet later)": [
        _f(NODE_FLEET, CheckStatus.FAIL),
        _f(FLEET, CheckStatus.PASS),
        _f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, "inventory.nodes@fleet"),
    ],
    "the fleet, and a node named fleet (node later)": [
        _f(FLEET, CheckStatus.PASS),
        _f(NODE_FLEET, CheckStatus.FAIL),
        _f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, "inventory.nodes@fleet"),
    ],
    "a node named fleet alone": [
        _f(NODE_FLEET, CheckStatus.PASS),
        _f(CheckKey("health.ecc", "n1", 0), CheckStatus.SKIP, "inventory.nodes@fleet"),
    ],
}


@pytest.mark.parametrize("case", CASES)
def test_a_skip_is_judged_by_the_cause_a_map_of_every_name_finds(case: str) -> None:
    outcomes = _outcomes(*CASES[case])
    expected_causes = _by_every_name(outcomes)
    judged, not_run, made = judge_skips(outcomes)
    for key, o in outcomes.items():
        f = o.finding
        if f.status is not CheckStatus.SKIP:
            assert judged[key] is f
            continue
        cause = expected_causes[str(key)]
        assert (key in not_run) is (cause is None)
        # an error exactly where the cause ran and did not fail
        turned = cause is not None and cause.status not in (CheckStatus.FAIL, CheckStatus.ERROR)
        assert judged[key].status is (CheckStatus.ERROR if turned else CheckStatus.SKIP)
        assert (judged[key] in made) is turned
