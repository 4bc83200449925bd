"""A node named `fleet` (a valid Kubernetes node name) and the fleet's own checks are two Allure results, each
counted as the verdict counts its group: they were grouped by `key.node or "fleet"` and merged into one, judged by
the fleet's group (report/allure.py, allure_notrun.py). The simulated fleet cannot name a node `fleet` (its names are
a prefix and a number: spec/simulated_fleet.py Nodes), so the results are written from outcomes directly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.required import Plan
from gpucert.report.allure import write_allure
from gpucert.report.allure_notrun import not_run
from gpucert.report.verdict import Outcome, build_verdict

PASS, FAIL = CheckStatus.PASS, CheckStatus.FAIL


def _results(tmp_path: Path) -> dict[str, dict[str, Any]]:
    ran = {
        CheckKey("inventory.nodes"): Finding("inventory.nodes", PASS, None),  # the fleet's own
        CheckKey("node.reachable", "fleet"): Finding("node.reachable", PASS, "fleet"),  # the node named fleet
        CheckKey("health.ecc", "fleet", 0): Finding("health.ecc", FAIL, "fleet", 0, "2 uncorrected"),
        CheckKey("node.reachable", "gpu-node-2"): Finding("node.reachable", PASS, "gpu-node-2"),
    }
    left = {CheckKey("pool.membership"), CheckKey("health.ecc", "fleet", 1)}  # deselected: one of each
    plan = Plan(("certify",), frozenset({*ran, *left}))
    outcomes = {k: Outcome(f) for k, f in ran.items()}
    verdict = build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=["fleet", "gpu-node-2"],
        gpus=2,
        plan=plan,
        outcomes=outcomes,
        selected=set(ran),
    )
    missing = not_run(plan.required, outcomes, set(ran))
    write_allure(tmp_path, outcomes, {}, verdict=verdict, started_ms=1, stopped_ms=2, missing=missing)
    results = [json.loads(p.read_text()) for p in tmp_path.glob("*-result.json")]
    assert len({r["historyId"] for r in results}) == len(results)  # none a retry of another in Allure's eyes
    return {r["fullName"]: r for r in results}


def test_a_node_named_fleet_is_a_result_of_its_own_beside_the_fleets_checks(tmp_path: Path) -> None:
    results = _results(tmp_path)
    assert sorted(results) == [
        "certify.health.ecc[fleet]",
        "gpucert.certification",
        "gpucert.not_run[@fleet]",
        "gpucert.not_run[fleet]",
        "gpucert.passed[@fleet]",
        "gpucert.passed[fleet]",
        "gpucert.passed[gpu-node-2]",
    ]
    fleet, node = results["gpucert.passed[@fleet]"], results["gpucert.passed[fleet]"]
    assert fleet["name"] == "1 check passed on the fleet (1 kind) (INCOMPLETE: not every check ran)"
    assert node["name"] == "1 check passed on fleet (1 kind); the node FAILED (see its failing checks)"  # its own group
    assert [s["name"] for f in fleet["steps"] for s in f["steps"]] == ["inventory.nodes"]
    assert [s["name"] for f in node["steps"] for s in f["steps"]] == ["node.reachable"]
    assert results["gpucert.not_run[fleet]"]["statusDetails"]["message"].startswith("fleet: 1 required check")
    assert results["gpucert.not_run[@fleet]"]["statusDetails"]["message"].startswith("the fleet: 1 required check")
