"""Handover acceptance end to end, through the `gpucert` command as the manual's "Handover acceptance"
(docs/acceptance.md) runs it, on its example (examples/handover/).

A simulated 16-node fleet with faults on 4 nodes: certify (fail), the punch list (4 boards with serials), the fleet
"repaired" on 3 nodes, `--retest` (measures exactly those 4, carries 12), one waiver for the fourth, `accept` (pass
with 1 waiver), `countersign`, `verify` with both keys; then each tamper (an edited waiver, an expired waiver, a
carried node's evidence swapped, a signature removed) caught. One module-scoped flow; the tamper cases work on
copies of its folders.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest

from ..in_process import gpucert_here, next_second
from .conftest import ROOT, assert_round_trip

FAULTY = {
    ("health.ecc", "gpu-node-3", 2),
    ("memory.bandwidth", "gpu-node-7", 1),
    ("dcgm.memory", "gpu-node-11", 4),
    ("straggler.compute.gemm.bf16", "gpu-node-14", 6),
}
MEASURED_AGAIN = {"gpu-node-3", "gpu-node-7", "gpu-node-11", "gpu-node-14"}
STRAGGLER = "straggler.compute.gemm.bf16"


SPEC, AFTER = "examples/handover/spec.yaml", "examples/handover/spec-after-repair.yaml"


def set_expiry(project: Path, expires: date) -> None:
    """The example waiver's expiry, relative to today: the flow must not turn into an expired waiver one day."""
    path = project / "examples" / "handover" / "waivers.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["waivers"][0]["expires"] = expires.isoformat()
    path.write_text(yaml.safe_dump(doc))


def project_copy(dst: Path) -> Path:
    shutil.copytree(ROOT / "examples", dst / "examples")
    shutil.copytree(ROOT / "baselines", dst / "baselines")
    return dst


def ok(r: subprocess.CompletedProcess[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    assert r.returncode == code, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@dataclass
class Flow:
    work: Path
    run1: Path
    run2: Path
    acceptance: Path
    punch_csv: str
    punch_json: dict[str, Any]
    retest_out: str
    verify_out: str

    def key(self, who: str, private: bool = False) -> str:
        return str(self.work / "keys" / who / ("gpucert.key" if private else "gpucert.pub"))

    def verdict(self, run: Path) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((run / "verdict.json").read_text())
        return data

    def copy(self, folder: Path, tmp_path: Path) -> Path:
        dst = tmp_path / folder.name
        shutil.copytree(folder, dst)
        return dst


def runs(reports: Path) -> set[Path]:
    """The run folders under reports/ (gpucert keeps its own hidden folders beside them: .history, .schedule)."""
    return {p for p in reports.iterdir() if not p.name.startswith(".")}


def new_run(reports: Path, before: set[Path]) -> Path:
    (run,) = runs(reports) - before
    return run


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Flow:
    work = project_copy(tmp_path_factory.mktemp("handover"))
    reports = work / "reports"
    set_expiry(work, date.today() + timedelta(days=365))
    ok(gpucert_here("keygen", "keys/vendor", cwd=work))
    ok(gpucert_here("keygen", "keys/buyer", cwd=work))
    ok(gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/vendor/gpucert.key", cwd=work), 1)
    (run1,) = runs(reports)
    punch_csv = ok(gpucert_here("punchlist", str(run1), "--format", "csv", cwd=work), 1).stdout
    punch_json = json.loads(ok(gpucert_here("punchlist", str(run1), "--format", "json", cwd=work), 1).stdout)
    # the example waiver names the board the punch list names
    waiver = yaml.safe_load((work / "examples" / "handover" / "waivers.yaml").read_text())["waivers"][0]
    assert waiver["select"]["serial"] == next(r["serial"] for r in punch_json["rows"] if r["node"] == "gpu-node-14")
    before = runs(reports)
    next_second()
    args = ("certify", AFTER, "-q", "--sign-key", "keys/vendor/gpucert.key", "--retest", str(run1))
    retest = ok(gpucert_here(*args, cwd=work))
    run2 = new_run(reports, before)
    ok(gpucert_here("accept", str(run1), str(run2), "--sign-key", "keys/vendor/gpucert.key", cwd=work))
    (acceptance,) = (work / "acceptance").iterdir()
    ok(gpucert_here("countersign", str(acceptance), "--key", "keys/buyer/gpucert.key", cwd=work))
    keys = ("--key", "keys/vendor/gpucert.pub", "--key", "keys/buyer/gpucert.pub")
    verified = ok(gpucert_here("verify", str(acceptance), *keys, cwd=work))
    return Flow(work, run1, run2, acceptance, punch_csv, punch_json, retest.stdout, verified.stdout)


def test_the_runs_records_parse_and_round_trip(flow: Flow) -> None:
    """The certification's and the re-test's verdict, run.json and re-test record (carried nodes with their
    provenance, a retest summary) parse into their typed models and serialise back byte for byte."""
    assert (flow.run2 / "retest" / "record.json").is_file()
    for run in (flow.run1, flow.run2):
        assert_round_trip(run)


def test_the_first_certification_fails_on_the_four_faults(flow: Flow) -> None:
    v = flow.verdict(flow.run1)
    assert v["result"] == "fail"
    assert {(f["check"], f["node"], f["gpu"]) for f in v["findings"]} == FAULTY


def test_the_punch_list_names_each_failing_board_worst_first(flow: Flow) -> None:
    rows = list(csv.DictReader(io.StringIO(flow.punch_csv)))
    assert [(r["node"], r["gpu"], r["checks"], r["severity"]) for r in rows] == [
        ("gpu-node-3", "2", "health.ecc", "hardware"),
        ("gpu-node-11", "4", "dcgm.memory", "hardware"),
        ("gpu-node-7", "1", "memory.bandwidth", "performance"),
        ("gpu-node-14", "6", STRAGGLER, "straggler"),
    ]
    evidence = {n: json.loads((flow.run1 / "evidence" / f"{n}.json").read_text()) for n in MEASURED_AGAIN}
    for r in rows:
        board = evidence[r["node"]]["gpus"][int(r["gpu"])]
        assert (r["serial"], r["uuid"], r["pci_bus_id"], r["vbios"]) == (
            board["serial"],
            board["uuid"],
            board["pci_bus_id"],
            board["vbios"],
        )
        assert r["serial"]
        assert r["evidence"] == f"evidence/{r['node']}.json"
    assert rows[1]["dcgm_errors"] == "DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS (83)"
    assert rows[2]["observed"].endswith("GB/s")
    assert rows[2]["limit"] == "2670 GB/s"  # 3 significant digits (2668.0 as measured, in the JSON)
    assert flow.punch_json["rows"][0]["findings"][0]["expected"] == 0


def test_the_retest_measures_exactly_the_four_and_carries_the_twelve(flow: Flow) -> None:
    v = flow.verdict(flow.run2)
    assert v["result"] == "pass"
    assert v["kind"] == "retest"
    # the node that passed only by its waiver says so, in verdict.json and in the terminal's node table
    assert v["nodes"]["gpu-node-14"]["result"] == "waived"
    (row,) = [line for line in flow.retest_out.splitlines() if line.startswith("│ gpu-node-14 ")]
    assert "WAIVED" in row
    assert "PASS" not in row
    assert set(v["retest"]["measured"]) == MEASURED_AGAIN
    assert len(v["retest"]["carried"]) == 12
    assert not MEASURED_AGAIN & set(v["retest"]["carried"])
    assert v["retest"]["source"] == flow.run1.name
    identities = {ev.node for ev in RunFolder(flow.run2).read_identities()}  # retest/identity.json
    for node, s in v["nodes"].items():
        if node in MEASURED_AGAIN:
            assert s["carriedFrom"] is None
            continue
        carried = s["carriedFrom"]
        source = (flow.run1 / "evidence" / f"{node}.json").read_bytes()
        assert (flow.run2 / "evidence" / f"{node}.json").read_bytes() == source
        assert carried["run"] == flow.run1.name
        assert carried["sha256"] == hashlib.sha256(source).hexdigest()
        assert carried["measured"] == s["measured"]
        assert carried["ageSeconds"] >= 0
        assert node in identities  # its identity was read again
    assert (flow.run2 / "retest" / "source.intoto.json").read_bytes() == (flow.run1 / attest.ENVELOPE).read_bytes()
    assert "4 nodes measured now, 12 carried over" in flow.retest_out


def test_the_waived_straggler_is_judged_against_the_whole_fleet_and_waived(flow: Flow) -> None:
    v = flow.verdict(flow.run2)
    (f,) = v["findings"]
    assert (f["check"], f["node"], f["gpu"], f["status"]) == (STRAGGLER, "gpu-node-14", 6, "waived")
    assert "fleet median over 128 GPUs" in f["message"]  # the twelve carried nodes are its peers
    assert f["waiver"]["id"] == "waivers[0]"
    assert f["waiver"]["accept"] == {"min": 640.0}
    assert v["summary"]["waived"] == 1
    assert v["summary"]["failed"] == 0
    assert v["coverage"]["complete"] is True
    example = flow.work / "examples" / "handover" / "waivers.yaml"
    assert (flow.run2 / "inputs" / "waivers.yaml").read_bytes() == example.read_bytes()


def test_every_report_says_the_check_was_waived(flow: Flow) -> None:
    junit = (flow.run2 / "junit.xml").read_text()
    assert '<property name="gpucert_waived" value="1" />' in junit
    assert '<property name="gpucert_result" value="pass" />' in junit
    # JUnit has no word for waived: the item's testcase passes (as the certification does) and says its waiver, never
    # a skip (the verdict skipped nothing)
    assert 'type="pytest.xfail"' not in junit
    suite = ET.fromstring(junit).find("testsuite")
    assert suite is not None
    assert suite.get("skipped") == "0"
    (waived,) = [c for c in suite.iter("testcase") if c.find("properties/property[@name='gpucert_waived']") is not None]
    assert waived.get("name") == "test_gemm[gpu-node-14-bf16]"
    assert not [child for child in waived if child.tag in ("skipped", "failure", "error")]
    assert waived.find("properties/property[@name='gpucert_waived']").get("value") == "waivers[0]"  # type: ignore[union-attr]
    said = waived.findtext("system-out") or ""
    assert said.startswith(f"WAIVED: [{STRAGGLER}] gpu-node-14: 1 of 8 GPUs did not pass (1 waived)")
    assert f"\n  [{STRAGGLER}] gpu6 waived: " in said
    assert "WAIVED by waivers[0]" in said
    results = [json.loads(p.read_text()) for p in (flow.run2 / "allure-results").glob("*-result.json")]
    (waived,) = [r for r in results if r["status"] != "passed"]
    assert waived["status"] == "skipped"
    assert waived["name"] == f"{STRAGGLER} on gpu-node-14 (waived)"  # Allure's trees show the name, not why
    assert waived["statusDetails"]["known"] is True
    assert "WAIVED by waivers[0]" in waived["statusDetails"]["message"]
    html = (flow.run2 / "report.html").read_text()
    assert "1 waived" in html
    assert "carried from" in html
    assert f"waived: {STRAGGLER}@gpu-node-14/gpu6 by waivers[0]" in flow.retest_out
    predicate = json.loads(attest.read_envelope(flow.run2 / attest.ENVELOPE).payload)["predicate"]
    assert predicate["waivers"]["waived"] == 1
    assert predicate["retest"]["source"] == flow.run1.name


def test_the_acceptance_record_covers_every_node_with_its_run(flow: Flow) -> None:
    record = json.loads((flow.acceptance / "acceptance.json").read_text())
    assert record["result"] == "pass", record["problems"]
    assert record["totals"] == {"expected": 16, "nodes": 16, "passed": 12, "repaired": 3, "waived": 1, "failed": 0}
    status = {n: v["status"] for n, v in record["nodes"].items()}
    assert status["gpu-node-14"] == "waived"
    assert {n for n, s in status.items() if s == "repaired"} == MEASURED_AGAIN - {"gpu-node-14"}
    assert all(v["run"] == flow.run2.name for v in record["nodes"].values())  # the latest run per node wins
    assert record["nodes"]["gpu-node-3"]["history"][0]["result"] == "fail"
    assert record["nodes"]["gpu-node-5"]["carriedFrom"]["run"] == flow.run1.name
    (w,) = record["waivers"]
    assert w["covers"] == [f"{STRAGGLER}@gpu-node-14/gpu6"]
    assert w["inForce"] is True
    html = (flow.acceptance / "report.html").read_text()
    for words in ("Passed with a waiver: 1", "Repaired and passed: 3", "Passed: 12", "Failed: 0", "PO 4411"):
        assert words in html
    assert "id='history'" in html
    assert html.count("(carried)") == 12
    # the pool's index at handover (issue 27): every GPU with figures (carried nodes too), the waived board's 7%
    table = html[html.index("<table id='acceptance-index'>") :]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in table[: table.index("</table>")].split("<tr>")[2:]]
    assert sum(int(row[1]) for row in rows) == 128
    assert sum(float(row[3]) for row in rows) > 0.06
    assert min(float(row[4]) for row in rows) < 0.95


def test_verify_reports_both_signatures_and_the_openssl_recipe_checks_each(flow: Flow) -> None:
    fps = [attest.fingerprint(attest.load_public_key(Path(flow.key(w)))) for w in ("vendor", "buyer")]
    assert f"signature 1 (keyid {fps[0]}): valid, made with key {fps[0]}" in flow.verify_out.replace("\n", " ")
    assert f"signature 2 (keyid {fps[1]}): valid" in flow.verify_out.replace("\n", " ")
    assert "VALID" in flow.verify_out
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    readme = (ROOT / "docs" / "acceptance.md").read_text()  # the manual page the recipe moved to from README
    block = readme.split("<!-- verify-recipe -->")[1].split("```bash")[1].split("```")[0]
    for index, who in enumerate(("vendor", "buyer")):
        script = block.replace("KEY=gpucert.pub I=0", f"KEY={flow.key(who)} I={index}")
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=flow.acceptance, capture_output=True, text=True
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Signature Verified Successfully" in r.stdout
        assert "every signed file matches" in r.stdout


# ---- each tamper caught ------------------------------------------------------------------------------------------


def test_an_edited_waiver_is_caught(flow: Flow, tmp_path: Path) -> None:
    run2 = flow.copy(flow.run2, tmp_path)
    waivers = run2 / "inputs" / "waivers.yaml"
    waivers.write_text(waivers.read_text().replace("min: 640.0", "min: 500.0"))
    r = ok(gpucert_here("verify", str(run2), "--key", flow.key("vendor"), cwd=tmp_path), 1)
    assert "changed: inputs/waivers.yaml" in r.stdout
    r = ok(gpucert_here("accept", str(flow.run1), str(run2), "--sign-key", flow.key("vendor", True), cwd=tmp_path), 2)
    assert "does not verify (changed: inputs/waivers.yaml)" in r.stderr
    assert not (tmp_path / "acceptance").exists() or not any((tmp_path / "acceptance").iterdir())


def test_an_expired_waiver_is_a_finding_and_the_failure_stands(flow: Flow, tmp_path: Path) -> None:
    set_expiry(project_copy(tmp_path), date.today() - timedelta(days=1))  # before the run's newest measurement
    ok(gpucert_here("evaluate", AFTER, "--evidence", str(flow.run2), "-q", cwd=tmp_path), 1)
    (run,) = runs(tmp_path / "reports")
    v = json.loads((run / "verdict.json").read_text())
    found = {(f["check"], f["node"], f["gpu"], f["status"]) for f in v["findings"]}
    assert found == {("waiver.expired", None, None, "fail"), (STRAGGLER, "gpu-node-14", 6, "fail")}
    assert v["coverage"]["skips"] == [{"cause": "waiver.expired@fleet[waivers[0]]", "checks": 1}]
    assert len(v["retest"]["carried"]) == 12  # the re-evaluation keeps where the evidence came from


def test_a_carried_nodes_swapped_evidence_is_caught(flow: Flow, tmp_path: Path) -> None:
    run2 = flow.copy(flow.run2, tmp_path)
    path = run2 / "evidence" / "gpu-node-5.json"
    doc = json.loads(path.read_text())
    samples = doc["gpus"][0]["measurements"]["memory.bandwidth"]["samples"]
    doc["gpus"][0]["measurements"]["memory.bandwidth"]["samples"] = [x * 1.05 for x in samples]
    path.write_text(json.dumps(doc))
    # even re-signed by the vendor's own key, the carried file is not what the source run signed for the node (a
    # changed folder is not signed over its certificate: the forger removes it first)
    (run2 / "certificate.intoto.json").unlink()
    r = ok(gpucert_here("sign", str(run2), "--key", flow.key("vendor", True), cwd=tmp_path), 2)  # sign refuses it
    assert f"carried: evidence/gpu-node-5.json is not the evidence run {flow.run1.name} signed" in r.stdout
    attest.sign_run(run2, Path(flow.key("vendor", True)), rederive=False)  # as a gpucert without these checks
    r = ok(gpucert_here("verify", str(run2), "--key", flow.key("vendor"), cwd=tmp_path), 1)
    assert f"carried: evidence/gpu-node-5.json is not the evidence run {flow.run1.name} signed" in r.stdout
    r = ok(gpucert_here("accept", str(flow.run1), str(run2), "--sign-key", flow.key("vendor", True), cwd=tmp_path), 2)
    assert "carried: evidence/gpu-node-5.json" in r.stderr
    # and a source run altered before the re-test is refused before anything is measured
    run1 = flow.copy(flow.run1, tmp_path)
    shutil.copy(path, run1 / "evidence" / "gpu-node-5.json")
    spec = str(flow.work / AFTER)
    r = ok(gpucert_here("certify", spec, "--retest", str(run1), cwd=tmp_path), 2)
    assert "no longer matches what it signed (evidence/gpu-node-5.json)" in r.stderr
    (run1 / attest.ENVELOPE).unlink()
    r = ok(gpucert_here("certify", spec, "--retest", str(run1), cwd=tmp_path), 2)
    assert "only from a signed run" in r.stderr
    assert not (tmp_path / "reports").exists()


def test_a_removed_signature_is_caught(flow: Flow, tmp_path: Path) -> None:
    acceptance = flow.copy(flow.acceptance, tmp_path)
    env_path = acceptance / attest.ENVELOPE
    env = json.loads(env_path.read_text())
    env["signatures"] = env["signatures"][:1]
    env_path.write_text(json.dumps(env))
    buyer = attest.fingerprint(attest.load_public_key(Path(flow.key("buyer"))))
    keys = ("--key", flow.key("vendor"), "--key", flow.key("buyer"))
    r = ok(gpucert_here("verify", str(acceptance), *keys, cwd=tmp_path), 1)
    assert f"not signed with the key {buyer} (yet)" in r.stdout.replace("\n", " ")
    assert "INVALID" in r.stdout
    assert "VALID" in ok(gpucert_here("verify", str(acceptance), "--key", flow.key("vendor"), cwd=tmp_path)).stdout


def test_a_retest_of_a_retest_measures_a_swapped_board_and_carries_the_rest_from_where_it_was_measured(
    flow: Flow, tmp_path: Path
) -> None:
    project = project_copy(tmp_path)
    set_expiry(project, date.today() + timedelta(days=365))
    fleet = project / "examples" / "handover" / "fleet-repaired.yaml"
    doc = yaml.safe_load(fleet.read_text())
    doc["faults"].append({"kind": "swapped-gpu", "node": "gpu-node-5", "gpu": 3})  # a board changed since
    fleet.write_text(yaml.safe_dump(doc))
    args = ("certify", AFTER, "-q", "--sign-key", flow.key("vendor", True), "--retest", str(flow.run2))
    ok(gpucert_here(*args, cwd=project))
    (run3,) = runs(project / "reports")
    v = flow.verdict(run3)
    assert v["retest"]["measured"] == ["gpu-node-5"]
    assert v["retest"]["why"]["gpu-node-5"].startswith("changed: gpu3 serial ")
    assert len(v["retest"]["carried"]) == 15
    twice = v["nodes"]["gpu-node-1"]["carriedFrom"]
    assert (twice["run"], twice["measuredIn"]) == (flow.run2.name, flow.run1.name)
    assert v["nodes"]["gpu-node-3"]["carriedFrom"]["measuredIn"] == flow.run2.name
    assert v["result"] == "pass"
    assert v["summary"]["waived"] == 1
    r = ok(gpucert_here("verify", str(run3), "--key", flow.key("vendor"), cwd=project))
    assert "carried evidence: 15 nodes, each file as its source run signed it" in r.stdout
    # junit.xml covers the carried nodes as measured ones (issue 28): their passed checks in the summaries, the
    # carried waived board's check a passed testcase that says its waiver and where it was carried from
    suite = junit_suite(run3)
    assert summed(suite) == v["summary"]["passed"]
    (waived,) = [c for c in suite.iter("testcase") if prop(c, "gpucert_waived")]
    assert (waived.get("classname"), waived.get("name")) == ("gpucert.carried.performance", GEMM_14)
    assert (prop(waived, "gpucert_waived"), prop(waived, "gpucert_carried_from")) == ("waivers[0]", flow.run2.name)
    # the waiver expired since: the carried board's check fails, and junit.xml says it as its item would, naming
    # the node, the GPU and the check that failed (a waiver renewed from it names the verdict's check)
    set_expiry(project, date.today() - timedelta(days=1))
    before = runs(project / "reports")
    next_second()
    ok(gpucert_here("evaluate", AFTER, "--evidence", str(run3), "-q", cwd=project), 1)
    expired = new_run(project / "reports", before)
    v = flow.verdict(expired)
    assert {(f["check"], f["node"], f["gpu"], f["status"]) for f in v["findings"]} == {
        ("waiver.expired", None, None, "fail"),
        (STRAGGLER, "gpu-node-14", 6, "fail"),
    }
    assert "gpu-node-14" in v["retest"]["carried"]
    suite = junit_suite(expired)
    assert summed(suite) == v["summary"]["passed"]
    (carried,) = [c for c in suite.iter("testcase") if c.get("classname", "").startswith("gpucert.carried.")]
    assert carried.get("name") == GEMM_14
    message = carried.find("failure").get("message", "").splitlines()  # type: ignore[union-attr]
    assert message[0] == f"[{STRAGGLER}] gpu-node-14: 1 of 8 GPUs did not pass (1 fail)"
    assert message[1].startswith(f"  [{STRAGGLER}] gpu6 fail: gpu-node-14/gpu6 compute.gemm.bf16 ")
    # CI counts testcases: the expired waiver's, the carried board's and the run's own fail; the waiver's match skips
    s = v["summary"]
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (str(s["failed"] + 1), "0", "1")


GEMM_14 = "compute.gemm.bf16[gpu-node-14]"


def junit_suite(run: Path) -> ET.Element:
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    return suite


def prop(case: ET.Element, name: str) -> str | None:
    found = case.find(f"properties/property[@name='{name}']")
    return None if found is None else found.get("value")


def summed(suite: ET.Element) -> int:
    """How many passed checks the testsuite's summaries stand for."""
    return sum(
        int(prop(c, "checks") or 0)
        for c in suite.iter("testcase")
        if c.get("classname", "").startswith("gpucert.passed.")
    )


def test_a_run_that_measured_nothing_cannot_cover_a_node(flow: Flow, tmp_path: Path) -> None:
    ok(gpucert_here("configure", str(flow.work / SPEC), "-q", "--reports", "reports", cwd=tmp_path))
    (plan_only,) = runs(tmp_path / "reports")
    ok(gpucert_here("sign", str(plan_only), "--key", flow.key("vendor", True), cwd=tmp_path))
    r = ok(gpucert_here("accept", str(plan_only), "--sign-key", flow.key("vendor", True), cwd=tmp_path), 2)
    assert "a plan run measured no GPU" in r.stderr


def test_a_waived_node_is_recorded_as_a_handover_baseline_saying_waived(flow: Flow, tmp_path: Path) -> None:
    """A node that passed by its waiver (verdict v3 `waived`) is recorded like a passing one, and says so."""
    out = tmp_path / "nodes"
    r = gpucert_here("baseline", "record", str(flow.run2), "--out", str(out), cwd=flow.work)
    assert r.returncode == 0, r.stdout + r.stderr
    recorded = yaml.safe_load(next(out.rglob("gpu-node-14.yaml")).read_text())
    assert recorded["recorded"]["result"] == "waived"


def test_a_waived_node_of_a_v2_verdict_is_recorded_saying_waived(flow: Flow, tmp_path: Path) -> None:
    """A run from before verdict v3 says `pass` for a node that passed by its waiver, with the check in its
    `waivedChecks`: its handover baseline says waived all the same."""
    run = tmp_path / flow.run2.name
    shutil.copytree(flow.run2, run)
    (run / "certificate.intoto.json").unlink()
    v = json.loads((run / "verdict.json").read_text())
    v["schema"] = "gpucert.io/verdict/v2"
    v.pop("kind")
    for node in v["nodes"].values():
        node["result"] = "pass" if node["result"] == "waived" else node["result"]
    (run / "verdict.json").write_text(json.dumps(v))
    out = tmp_path / "nodes"
    r = gpucert_here("baseline", "record", str(run), "--out", str(out), "--allow-unsigned", cwd=flow.work)
    assert r.returncode == 0, r.stdout + r.stderr
    mine = out / v["spec"]  # handover baselines are per spec: --out names their root
    assert yaml.safe_load((mine / "gpu-node-14.yaml").read_text())["recorded"]["result"] == "waived"
    assert yaml.safe_load((mine / "gpu-node-1.yaml").read_text())["recorded"]["result"] == "pass"
