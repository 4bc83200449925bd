"""The typed Verdict and records (issue 24 step 2): what build_verdict returns serialises as verdict.json always
did (key order, nulls, keys absent when there is nothing to say), parses back equal, and a hostile or older
document is refused, or read, with one line naming the file and the key."""

from __future__ import annotations

import inspect
import json
from dataclasses import MISSING, FrozenInstanceError, fields, make_dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from gpucert.errors import EvidenceError
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.records import RetestRecord, RunInfo, parse_record
from gpucert.plan.required import Plan
from gpucert.report import summary
from gpucert.report.summary import summary_lines, summary_tables
from gpucert.report.verdict import Outcome, build_verdict, headline
from gpucert.report.verdict_model import Verdict, parse_verdict

WAIVER = {"check": "health.ecc", "select": {"node": "b", "gpu": 0}, "accept": "as-is", "reason": "PO 4411"}


def _built(**more: Any) -> Verdict:
    reach = [CheckKey("node.reachable", n) for n in ("a", "b", "c")]
    ecc = [CheckKey("health.ecc", n, 0) for n in ("a", "b", "c")]
    findings = {
        reach[0]: Finding("node.reachable", CheckStatus.PASS, "a"),
        reach[1]: Finding("node.reachable", CheckStatus.PASS, "b"),
        reach[2]: Finding("node.reachable", CheckStatus.FAIL, "c", None, "down [not ready]"),
        ecc[0]: Finding("health.ecc", CheckStatus.FAIL, "a", 0, "2 uncorrected", observed=2, expected=0, limit=0),
        ecc[1]: Finding("health.ecc", CheckStatus.WAIVED, "b", 0, "accepted", waiver="waivers[0]"),
        ecc[2]: Finding("health.ecc", CheckStatus.SKIP, "c", 0, "down", cause=str(reach[2])),
    }
    return build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=["a", "b", "c"],
        gpus=3,
        plan=Plan(("certify",), frozenset(findings)),
        outcomes={k: Outcome(f) for k, f in findings.items()},
        selected=set(findings),
        waivers={"waivers[0]": {**WAIVER, "approvedBy": "buyer: j.doe", "expires": "2027-03-01"}},
        **more,
    )


def test_the_json_keeps_its_keys_in_order_its_nulls_and_its_numbers() -> None:
    v = _built()
    out = v.to_json()
    assert list(out)[:6] == ["schema", "run", "kind", "spec", "target", "result"]
    assert not {"retest", "preflight", "recertify"} & out.keys()  # absent, not null
    assert (out["fleetAgainstSku"], out["undecided"]) == ([], [])
    (ecc_a,) = [f for f in out["findings"] if f["node"] == "a"]
    keys = ["check", "node", "gpu", "status", "observed", "expected", "limit", "unit", "message", "cause"]
    assert list(ecc_a) == keys
    assert (ecc_a["observed"], ecc_a["limit"], ecc_a["unit"]) == (2, 0, None)
    assert json.dumps(ecc_a["observed"]) == "2"  # an int stays an int (2, not 2.0)
    (waived,) = [f for f in out["findings"] if f["status"] == "waived"]
    assert list(waived["waiver"]) == ["id", "check", "select", "accept", "reason", "approvedBy", "expires"]
    assert out["nodes"]["c"] | {} == {
        "result": "fail",
        "passed": 0,
        "failed": 1,
        "errors": 0,
        "skipped": 1,
        "waived": 0,
        "failing": ["node.reachable"],
        "waivedChecks": [],
        "measured": None,
        "carriedFrom": None,
        "pool": None,
    }
    assert parse_verdict(json.loads(json.dumps(out)), "verdict.json") == v


def test_beside_the_checks_the_verdict_says_what_it_was_given() -> None:
    preflight = {"skipped": True}
    beside = {"preflight": preflight, "recertify": {"node": "a", "handover": None, "fleetPeers": 3, "summary": "x"}}
    out = _built(beside=beside).to_json()
    assert out["preflight"] == preflight
    assert out["recertify"] == {"node": "a", "handover": None, "fleetPeers": 3, "summary": "x"}
    assert list(out)[-2:] == ["preflight", "recertify"]


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda v: v["summary"].update(passed="3"), "summary.passed input should be a valid integer"),
        (lambda v: v["summary"].update(failed=True), "summary.failed input should be a valid integer"),
        (lambda v: v["nodes"].update(b=[]), "nodes.b input should be a valid dictionary"),
        (lambda v: v.pop("coverage"), "coverage is missing"),
        (lambda v: v.update(result="passed"), "result input should be 'pass', 'fail' or 'incomplete'"),
        (lambda v: v.update(schema="gpucert.io/verdict/v9"), "schema input should be"),
        (lambda v: v["findings"][0].update(gpu="0"), "findings[0].gpu"),
    ],
)
def test_a_hostile_verdict_is_refused_naming_the_file_and_the_key(tamper: Any, words: str, tmp_path: Path) -> None:
    v = _built().to_json()
    tamper(v)
    path = tmp_path / "verdict.json"
    with pytest.raises(EvidenceError) as err:
        parse_verdict(v, path)
    said = str(err.value)
    assert said.startswith(f"{path}: ")
    assert words in said, said
    assert "\n" not in said
    assert "pydantic" not in said


def test_not_an_object_is_refused() -> None:
    with pytest.raises(EvidenceError, match="expected a JSON object, got list"):
        parse_verdict([], "verdict.json")


def test_a_v2_verdict_is_read_as_a_certification() -> None:
    """As the first v2 writer wrote it: no kind, no pools, groups without waived counts."""
    group = {"result": "pass", "passed": 1, "failed": 0, "errors": 0, "skipped": 0, "failing": []}
    v2 = {
        "schema": "gpucert.io/verdict/v2",
        "run": "r",
        "spec": "s",
        "target": "simulated",
        "result": "pass",
        "coverage": {"required": 1, "ran": 1, "complete": True},
        "summary": {"nodes": 1, "gpus": 8, "checks": 1, "passed": 1, "failed": 0, "errors": 0, "skipped": 0},
        "findings": [],
        "fleet": {**group, "passed": 0},
        "nodes": {"gpu-node-1": group},
    }
    v = parse_verdict(v2, "verdict.json")
    assert v.what == "certify"
    assert headline(v) == "Certification PASS"
    assert v.nodes["gpu-node-1"].waived == 0
    assert v.pools == {}


def test_the_summary_says_the_same_to_the_terminal_and_the_command_line() -> None:
    v = _built()
    loud = [line.text for line in summary_lines(v, shout=True)]
    quiet = [line.text for line in summary_lines(v, shout=False)]
    assert loud[0].startswith("CERTIFICATION FAIL: 6 of 6 required checks ran; 2 passed, 2 failed, 0 errors")
    assert quiet[0].startswith("Certification FAIL: 6 of 6 required checks ran")
    assert loud[1:] == quiet[1:]
    assert "FAIL health.ecc@a/gpu0" in loud
    assert any(t.startswith("waived: health.ecc@b/gpu0 by waivers[0] (PO 4411; approved by buyer: j.doe") for t in loud)
    nodes, findings = summary_tables(v)
    assert [row[0][0] for row in nodes.rows] == ["a", "b", "c"]  # the fleet passed: no row of its own
    assert ("down [not ready]", None) in [row[3] for row in findings.rows]


def test_run_json_and_the_retest_record_are_typed_too(tmp_path: Path) -> None:
    info = {"run": "r", "spec": "s", "mode": "measure", "reevaluates": None, "waivers": False, "started": "t"}
    info |= {"gpucert_version": "0.1.0", "git_commit": None, "target": "simulated", "finished": "t2"}
    assert parse_record(RunInfo, info, "run.json", "a run.json").to_json() == info
    intent = {k: v for k, v in info.items() if k not in ("target", "finished")}
    assert parse_record(RunInfo, intent, "run.json", "a run.json").to_json() == intent
    with pytest.raises(EvidenceError, match=r"run.json: waivers input should be a valid boolean"):
        parse_record(RunInfo, {**info, "waivers": "yes"}, "run.json", "a run.json")
    record = {"schema": "gpucert.io/retest/v1", "source": {"run": "r1"}, "carried": {"n1": {"run": "r1"}}}
    with pytest.raises(EvidenceError, match=r"record.json: carried.n1.measuredIn is missing"):
        parse_record(RetestRecord, record, tmp_path / "record.json", "a re-test record")


def test_a_recertify_record_is_read_typed_and_refused_naming_its_key(tmp_path: Path) -> None:
    from gpucert.plan.records import RecertifyRecord

    record = {"schema": "gpucert.io/recertify/v1", "node": "gpu-node-3", "holder": "h", "handover": None}
    typed = parse_record(RecertifyRecord, {**record, "fleetPeers": {"gpu-node-1": "run-1"}, "cordon": {}}, "r", "r")
    assert (typed.node, typed.fleet_peers, typed.handover) == ("gpu-node-3", {"gpu-node-1": "run-1"}, None)
    with pytest.raises(EvidenceError, match=r"recertify.json: fleetPeers input should be a valid dictionary"):
        parse_record(RecertifyRecord, {**record, "fleetPeers": 3}, tmp_path / "recertify.json", "a recertify record")


def test_a_soaks_verdict_is_headed_as_a_soak() -> None:
    soak = _built().model_copy(update={"kind": "soak"})
    assert headline(soak) == "Soak FAIL"
    assert summary_lines(soak, shout=True)[0].text.startswith("SOAK FAIL: ")


def test_past_nodes_listed_the_table_lists_who_did_not_pass_and_sums_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"n{i}" for i in range(1, 6)]
    findings = {CheckKey("node.reachable", n): Finding("node.reachable", CheckStatus.PASS, n) for n in names}
    findings |= {CheckKey("health.ecc", n, 0): Finding("health.ecc", CheckStatus.PASS, n, 0) for n in names}
    findings[CheckKey("health.ecc", "n4", 0)] = Finding("health.ecc", CheckStatus.FAIL, "n4", 0, "2 uncorrected")
    v = build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=names,
        gpus=5,
        plan=Plan(("certify",), frozenset(findings)),
        outcomes={k: Outcome(f) for k, f in findings.items()},
        selected=set(findings),
    )
    assert [row[0][0] for row in summary_tables(v)[0].rows] == names  # a small fleet: a row per node
    monkeypatch.setattr(summary, "NODES_LISTED", 3)
    rows = summary_tables(v)[0].rows
    assert [row[0][0] for row in rows] == ["n4", "4 nodes passed"]
    assert [cell[0] for cell in rows[1]] == ["4 nodes passed", "PASS", "8", "0", "0", "0", "0", ""]


def test_an_outcome_is_made_as_the_dataclass_would_make_it() -> None:
    # Outcome's __init__ is written out (each slot set by its descriptor, as Finding's): it takes the fields the
    # dataclass declares, in their order, with their defaults, sets each, and the outcome stays frozen
    spec = [(f.name, f.type) if f.default is MISSING else (f.name, f.type, f.default) for f in fields(Outcome)]
    declared = make_dataclass("Declared", spec)
    ours, theirs = inspect.signature(Outcome.__init__), inspect.signature(declared.__init__)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
    found = Finding("health.ecc", CheckStatus.PASS, "a", 0)
    made = Outcome(found, 1.5, 2.5)
    assert (made.finding, made.start, made.stop) == (found, 1.5, 2.5)
    assert Outcome(finding=found, stop=2.5, start=1.5) == made
    assert (Outcome(found).start, Outcome(found).stop) == (0.0, 0.0)
    assert replace(made, stop=3.0).stop == 3.0
    with pytest.raises(FrozenInstanceError):
        made.start = 0.0  # type: ignore[misc]
