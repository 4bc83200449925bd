"""Waivers: the document, which findings a waiver selects, whether it covers them (limit, expiry), its own checks,
and what the verdict makes of a waived finding. Pure: no pytest session, no run folder."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.evaluate.rules.waivers import EXPIRED, UNMATCHED, WaiverBook
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.required import Plan
from gpucert.report.verdict import Outcome, build_verdict
from gpucert.spec.cluster import duration_seconds, load_spec
from gpucert.spec.waivers import Waivers, load_waivers

ROOT = Path(__file__).resolve().parents[2]
FAIL, PASS, SKIP, ERROR, WAIVED = (
    CheckStatus.FAIL,
    CheckStatus.PASS,
    CheckStatus.SKIP,
    CheckStatus.ERROR,
    CheckStatus.WAIVED,
)
STRAGGLER = "straggler.compute.gemm.bf16"
AT = datetime(2027, 2, 1, 12, 0, tzinfo=UTC)


def waiver(**over: object) -> dict[str, object]:
    w: dict[str, object] = {
        "check": STRAGGLER,
        "select": {"node": "gpu-node-14", "gpu": 6},
        "accept": "as-is",
        "reason": "within the spec sheet; credit in PO 4411",
        "approvedBy": "buyer: j.doe; vendor: a.smith",
        "expires": date(2027, 3, 1),
    }
    w.update(over)
    return w


def write(tmp_path: Path, *waivers: dict[str, object]) -> Path:
    doc = {"apiVersion": "gpucert.io/v1alpha1", "kind": "Waivers", "metadata": {"name": "w"}, "waivers": list(waivers)}
    path = tmp_path / "waivers.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def book(tmp_path: Path, *waivers: dict[str, object], at: datetime = AT) -> WaiverBook:
    return WaiverBook(load_waivers(write(tmp_path, *waivers)), at)


def straggler(node: str = "gpu-node-14", gpu: int | None = 6, observed: float | None = 651.6) -> Finding:
    return Finding(STRAGGLER, FAIL, node, gpu, "7.0% below its peers", observed=observed, expected=700.5)


SERIALS = {("gpu-node-14", 6): "6997872841412", ("gpu-node-2", 3): "111"}


def serial_of(node: str, gpu: int) -> str | None:
    return SERIALS.get((node, gpu))


# ---- the document -----------------------------------------------------------------------------------------------


def test_a_waivers_document_loads(tmp_path: Path) -> None:
    doc = load_waivers(write(tmp_path, waiver(), waiver(select={"serial": "111"}, accept={"min": 640})))
    assert isinstance(doc, Waivers)
    assert [str(w.select) for w in doc.waivers] == ["gpu-node-14/gpu6", "serial 111"]
    assert str(doc.waivers[1].accept) == "min 640"
    assert doc.waivers[0].to_json()["approvedBy"].startswith("buyer")


@pytest.mark.parametrize(
    ("over", "key", "words"),
    [
        ({"check": "node.reachable"}, "waivers[0].check", "cannot be waived: other checks depend on it"),
        ({"check": "inventory.gpus"}, "waivers[0].check", "cannot be waived"),
        ({"check": "stack.version"}, "waivers[0].check", "change the spec"),
        ({"check": "waiver.expired"}, "waivers[0].check", "a waiver's own check"),
        ({"check": "gemm.bf16"}, "waivers[0].check", "not a gpucert check id"),
        ({"select": {"node": "gpu-node-1", "serial": "1"}}, "waivers[0].select", "select one of"),
        ({"select": {"gpu": 3}}, "waivers[0].select", "select one of"),
        ({"select": {"serial": "1", "gpu": 3}}, "waivers[0].select", "`gpu` needs the `node`"),
        ({"select": {"node": "../etc"}}, "waivers[0].select.node", "not a Kubernetes node name"),
        ({"select": {"nod": "gpu-node-1"}}, "waivers[0].select.nod", "did you mean node"),
        ({"accept": {"min": 1, "max": 2}}, "waivers[0].accept", "one of `min` or `max`"),
        ({"accept": "as is"}, "waivers[0].accept", "write `accept: as-is`"),
        ({"accept": {"mni": 3}}, "waivers[0].accept", "mni"),
        ({"reason": ""}, "waivers[0].reason", "is blank"),
        # issue 23 item 3: a waiver is people's decision; whitespace approves nothing
        ({"reason": "   "}, "waivers[0].reason", "is blank"),
        ({"approvedBy": " \t "}, "waivers[0].approvedBy", "is blank"),
        ({"approvedBy": ""}, "waivers[0].approvedBy", "is blank"),
        ({"expires": "next spring"}, "waivers[0].expires", ""),
        # issue 25: a rail is one rail of a node, of a check judged per rail
        ({"check": "fabric.rdma_bw", "select": {"rail": 1}}, "waivers[0].select", "select {node: X, rail: N}"),
        ({"check": "fabric.port", "select": {"node": "n1", "gpu": 0, "rail": 1}}, "waivers[0].select", "never with"),
        ({"check": "fabric.port", "select": {"node": "n1", "rail": -1}}, "waivers[0].select.rail", "at least 0"),
        ({"select": {"node": "n1", "rail": 1}}, "waivers[0]", f"{STRAGGLER} is not judged per rail"),
    ],
)
def test_a_bad_waiver_names_file_key_and_fix(tmp_path: Path, over: dict[str, object], key: str, words: str) -> None:
    path = write(tmp_path, waiver(**over))
    with pytest.raises(ConfigError) as exc:
        load_waivers(path)
    assert exc.value.path == path
    assert exc.value.key is not None
    assert exc.value.key.startswith(key.rsplit(".", 1)[0])
    assert words in str(exc.value)
    assert exc.value.line is not None


def test_a_missing_approval_and_a_waiver_written_twice_are_refused(tmp_path: Path) -> None:
    w = waiver()
    del w["approvedBy"]
    with pytest.raises(ConfigError, match=r"waivers\[0\]\.approvedBy: required key is missing"):
        load_waivers(write(tmp_path, w))
    with pytest.raises(ConfigError, match=r"waivers\[1\]: waives straggler.* again \(see waivers\[0\]\)"):
        load_waivers(write(tmp_path, waiver(), waiver(reason="other words")))


@pytest.mark.parametrize(
    ("approved_by", "strangers"),
    [
        ("buyer: j.doe; vendor: m.mallory", "m.mallory"),
        ("m.mallory", "m.mallory"),
        ("buyer: j.doe, vendor: a.smith, intern: x", "x"),
        ("buyer: ; vendor: a.smith; e.vil", "e.vil"),
    ],
)
def test_an_approver_the_spec_does_not_name_is_refused(tmp_path: Path, approved_by: str, strangers: str) -> None:
    path = write(tmp_path, waiver(approvedBy=approved_by))
    with pytest.raises(ConfigError) as exc:
        load_waivers(path, ["j.doe", "a.smith"])
    assert exc.value.key == "waivers[0].approvedBy"
    assert f"{strangers} is not among the spec's approvers (acceptance.approvers: a.smith, j.doe)" in str(exc.value)
    # the same waiver loads where the spec names no approvers, and where it names them all
    assert load_waivers(path).waivers[0].approved_by == approved_by
    assert load_waivers(write(tmp_path, waiver()), ["j.doe", "a.smith"]).waivers[0].approvers() == [
        "j.doe",
        "a.smith",
    ]


def test_the_spec_names_its_waivers_and_a_maximum_evidence_age(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    doc["acceptance"] = {"waivers": "waivers.yaml", "maxEvidenceAge": "30d"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.acceptance.max_evidence_age_s == 30 * 86400
    assert spec.resolve(spec.acceptance.waivers or "") == tmp_path / "waivers.yaml"
    doc["acceptance"]["maxEvidenceAge"] = "a month"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"acceptance\.maxEvidenceAge: 'a month' is not a duration"):
        load_spec(tmp_path / "spec.yaml")
    assert load_spec(ROOT / "examples" / "demo.yaml").acceptance.waivers is None


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("12h", 43200), ("2w", 1209600)])
def test_durations(text: str, seconds: int) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "0d", "-1d", "1.5d", "30", "30y"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        duration_seconds(text)


# ---- matching and covering --------------------------------------------------------------------------------------


def test_a_waiver_selects_by_node_gpu_or_serial(tmp_path: Path) -> None:
    by_gpu, by_node, by_serial = (
        book(tmp_path, waiver(select=s)).doc.waivers[0]
        for s in ({"node": "gpu-node-14", "gpu": 6}, {"node": "gpu-node-14"}, {"serial": "6997872841412"})
    )
    here, other_gpu, other_node = straggler(), straggler(gpu=5), straggler(node="gpu-node-2", gpu=3)
    other_check = Finding("memory.bandwidth", FAIL, "gpu-node-14", 6, "slow")
    assert by_gpu.selects(here, serial_of)
    assert not by_gpu.selects(other_gpu, serial_of)
    assert by_node.selects(here, serial_of)
    assert by_node.selects(other_gpu, serial_of)
    assert not by_node.selects(other_node, serial_of)
    assert by_serial.selects(here, serial_of)
    assert not by_serial.selects(other_gpu, serial_of)
    assert not any(w.selects(other_check, serial_of) for w in (by_gpu, by_node, by_serial))
    # the serial follows the board: the same board in another slot is still selected
    moved = {("gpu-node-2", 3): "6997872841412"}
    assert by_serial.selects(straggler(node="gpu-node-2", gpu=3), lambda n, g: moved.get((n, g)))


def test_a_waiver_selects_one_rail_of_a_node_for_a_per_rail_fabric_check(tmp_path: Path) -> None:
    rail1, node = (
        book(tmp_path, waiver(check="fabric.rdma_bw", select=s)).doc.waivers[0]
        for s in ({"node": "gpu-node-2", "rail": 1}, {"node": "gpu-node-2"})
    )
    slow = Finding("fabric.rdma_bw", FAIL, "gpu-node-2", None, "rail 1 slow", observed=250.0)
    assert str(rail1.select) == "gpu-node-2/rail1"
    assert rail1.selects(slow, serial_of, 1)
    assert not rail1.selects(slow, serial_of, 0)
    assert not rail1.selects(slow, serial_of)  # a rail not known is never taken for the one selected
    assert node.selects(slow, serial_of, 0)  # a node's every rail
    covered = WaiverBook(Waivers.model_validate({"apiVersion": "gpucert.io/v1alpha1", "kind": "Waivers",
                         "metadata": {"name": "w"}, "waivers": [waiver(check="fabric.rdma_bw",
                         select={"node": "gpu-node-2", "rail": 1})]}), AT)  # fmt: skip
    assert covered.waive(slow, serial_of, 1).status is WAIVED
    assert covered.waive(slow, serial_of, 0).status is FAIL


def test_a_covered_failure_is_waived_with_its_waiver_never_dropped(tmp_path: Path) -> None:
    f = book(tmp_path, waiver()).waive(straggler(), serial_of)
    assert f.status is WAIVED
    assert f.waiver == "waivers[0]"
    assert "7.0% below its peers" in f.message  # what was found stays said
    assert "WAIVED by waivers[0]" in f.message
    assert "PO 4411" in f.message
    assert "2027-03-01" in f.message
    assert f.to_json()["waiver"] == "waivers[0]"
    assert Finding.from_json(f.to_json()) == f


def test_an_accepted_limit_must_still_be_met(tmp_path: Path) -> None:
    b = book(tmp_path, waiver(accept={"min": 640.0}))
    assert b.waive(straggler(observed=651.6), serial_of).status is WAIVED
    assert b.waive(straggler(observed=640.0), serial_of).status is WAIVED
    below = b.waive(straggler(observed=630.0), serial_of)
    assert below.status is FAIL
    assert "waivers[0] does not cover it: it accepts min 640, and 630 is beyond that" in below.message
    no_value = b.waive(straggler(observed=None), serial_of)
    assert no_value.status is FAIL
    assert "no measured value" in no_value.message
    assert book(tmp_path, waiver(accept={"max": 90.0})).waive(straggler(observed=91.0), serial_of).status is FAIL


def test_a_waiver_is_in_force_through_its_expiry_date_and_not_a_day_more(tmp_path: Path) -> None:
    on_the_day = datetime(2027, 3, 1, 23, 59, tzinfo=UTC)
    after = datetime(2027, 3, 2, 0, 0, tzinfo=UTC)
    assert book(tmp_path, waiver(), at=on_the_day).waive(straggler(), serial_of).status is WAIVED
    late = book(tmp_path, waiver(), at=after).waive(straggler(), serial_of)
    assert late.status is FAIL
    assert "it expired on 2027-03-01 (the run is of 2027-03-02)" in late.message
    assert late.waiver is None


def test_only_failures_are_waived_never_errors_skips_or_passes(tmp_path: Path) -> None:
    b = book(tmp_path, waiver(select={"node": "gpu-node-14"}))
    for status in (ERROR, SKIP, PASS):
        f = Finding(STRAGGLER, status, "gpu-node-14", 6, "could not be decided", cause="x" if status is SKIP else None)
        assert b.waive(f, serial_of) == f


def test_the_first_waiver_that_covers_wins(tmp_path: Path) -> None:
    b = book(
        tmp_path,
        waiver(accept={"min": 700.0}),
        waiver(select={"serial": "6997872841412"}, reason="second"),
    )
    f = b.waive(straggler(), serial_of)
    assert f.status is WAIVED
    assert f.waiver == "waivers[1]"


# ---- the waiver's own checks -------------------------------------------------------------------------------------


def test_an_expired_waiver_is_a_finding_and_matches_nothing(tmp_path: Path) -> None:
    b = book(tmp_path, waiver(expires=date(2027, 1, 31)))
    expired = b.expired("waivers[0]")
    assert expired.status is FAIL
    assert expired.check == EXPIRED
    assert "expired on 2027-01-31, before this run (2027-02-01)" in expired.message
    unmatched = b.unmatched("waivers[0]", [(CheckKey("compute.gemm.bf16", "gpu-node-14", 6), straggler())])
    assert unmatched.status is SKIP
    assert unmatched.cause == str(CheckKey(EXPIRED, None, None, "waivers[0]"))
    assert book(tmp_path, waiver()).expired("waivers[0]").status is PASS


def test_a_waiver_that_matches_no_failure_is_a_finding(tmp_path: Path) -> None:
    b = book(tmp_path, waiver())
    key = CheckKey("compute.gemm.bf16", "gpu-node-14", 6)
    assert b.unmatched("waivers[0]", [(key, straggler())]).status is PASS
    repaired = Finding("compute.gemm.bf16", PASS, "gpu-node-14", 6, "in line")
    found = b.unmatched("waivers[0]", [(key, repaired)])
    assert found.status is FAIL
    assert found.check == UNMATCHED
    assert "the check passed there" in found.message
    nowhere = b.unmatched("waivers[0]", [])
    assert nowhere.status is FAIL
    assert "no such check there" in nowhere.message
    below_baseline = Finding("compute.gemm.bf16", FAIL, "gpu-node-14", 6, "below the baseline")
    assert b.unmatched("waivers[0]", [(key, below_baseline)]).status is FAIL  # another check failed there
    cause = str(CheckKey("node.reachable", "gpu-node-14"))
    unreachable = Finding("compute.gemm.bf16", SKIP, "gpu-node-14", 6, "not measured", cause=cause)
    skipped = b.unmatched("waivers[0]", [(key, unreachable)])
    assert skipped.status is SKIP
    assert skipped.cause == cause
    assert b.unmatched("waivers[0]", [], "outside this recertification of gpu-node-3").status is PASS


# ---- the verdict ---------------------------------------------------------------------------------------------------


def _verdict(outcomes: dict[CheckKey, Finding], required: set[CheckKey], waivers: dict[str, object]) -> dict:
    return build_verdict(
        run="r",
        spec="s",
        target="simulated",
        nodes=["gpu-node-14"],
        gpus=8,
        plan=Plan(("certify",), frozenset(required)),
        outcomes={k: Outcome(f) for k, f in outcomes.items()},
        selected=set(outcomes),
        waivers=waivers,  # type: ignore[arg-type]
    ).to_json()


def test_a_waived_finding_passes_the_run_and_is_listed_with_its_waiver(tmp_path: Path) -> None:
    b = book(tmp_path, waiver())
    key = CheckKey("compute.gemm.bf16", "gpu-node-14", 6)
    ok = CheckKey("memory.bandwidth", "gpu-node-14", 6)
    outcomes = {key: b.waive(straggler(), serial_of), ok: Finding("memory.bandwidth", PASS, "gpu-node-14", 6)}
    v = _verdict(outcomes, {key, ok}, {wid: w.to_json() for wid, w in b.by_id.items()})
    assert v["result"] == "pass"
    assert v["summary"]["waived"] == 1
    assert v["summary"]["failed"] == 0
    (f,) = v["findings"]
    assert f["status"] == "waived"
    assert f["waiver"]["id"] == "waivers[0]"
    assert f["waiver"]["approvedBy"].startswith("buyer")
    assert v["nodes"]["gpu-node-14"]["waivedChecks"] == [STRAGGLER]
    # the row says what happened to the node: it passed because a waiver accepted a failure (v3)
    assert v["nodes"]["gpu-node-14"]["result"] == "waived"
    assert v["fleet"]["result"] == "pass"


def test_waivers_never_complete_an_incomplete_run(tmp_path: Path) -> None:
    b = book(tmp_path, waiver())
    key = CheckKey("compute.gemm.bf16", "gpu-node-14", 6)
    missing = CheckKey("memory.bandwidth", "gpu-node-14", 6)
    v = _verdict({key: b.waive(straggler(), serial_of)}, {key, missing}, {})
    assert v["result"] == "incomplete"
    assert v["coverage"]["complete"] is False


def test_a_skip_that_follows_from_a_waived_check_is_an_error(tmp_path: Path) -> None:
    """Fail closed: a waiver covers a measured deviation, not the checks that could not run because of it."""
    b = book(tmp_path, waiver())
    key = CheckKey("compute.gemm.bf16", "gpu-node-14", 6)
    after = CheckKey("handover.compute.gemm.bf16", "gpu-node-14", 6)
    follows = Finding("handover.compute.gemm.bf16", SKIP, "gpu-node-14", 6, "not judged", cause=str(key))
    v = _verdict({key: b.waive(straggler(), serial_of), after: follows}, {key, after}, {})
    assert v["result"] == "fail"
    assert any(f["status"] == "error" and "which did not fail (waived)" in f["message"] for f in v["findings"])
