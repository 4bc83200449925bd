"""Soak drift inside the reference rounds (sweep defect 5), over the simulated fleet: a board that degrades in
round 1 of a soak leaves at round 1 (the first rounds' median was already degraded, and the baseline's bar is the
SKU's), and a soak no longer than referenceRounds cannot judge drift: every node is incomplete, never pass."""

from __future__ import annotations

from pathlib import Path

from gpucert.fleet.soak import start_soak

from .soak_spec import soak_spec


def test_a_board_7_percent_down_from_round_1_leaves_at_round_1(tmp_path: Path) -> None:
    fault = {"kind": "degrade", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.93}
    spec = soak_spec(tmp_path, {"duration": "5h", "round": "1h"}, [fault | {"after": "1h"}])
    result = start_soak(spec, tmp_path / "reports")
    assert result.result == "fail"
    node = result.nodes["gpu-node-2"]
    assert (node["result"], node["leftRound"]) == ("fail", 1)
    assert {(f["check"], f["gpu"]) for f in node["findings"]} == {("soak.drift.memory.bandwidth", 3)}
    assert result.nodes["gpu-node-1"]["result"] == "pass"


def test_a_soak_no_longer_than_its_reference_rounds_is_incomplete_not_pass(tmp_path: Path) -> None:
    spec = soak_spec(tmp_path, {"duration": "3h", "round": "1h", "criteria": {"referenceRounds": 3}}, [])
    result = start_soak(spec, tmp_path / "reports")
    assert result.result == "incomplete"
    assert {v["result"] for v in result.nodes.values()} == {"incomplete"}
    assert "needs at least 4 rounds (--duration, --round)" in result.nodes["gpu-node-1"]["notJudged"]
    verdict = (result.run / "verdict.json").read_text(encoding="utf-8")
    assert '"result": "incomplete"' in verdict
    longer = soak_spec(tmp_path, {"duration": "4h", "round": "1h", "criteria": {"referenceRounds": 3}}, [])
    assert start_soak(longer, tmp_path / "longer").result == "pass"
