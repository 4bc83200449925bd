"""A signature never blesses a verdict its own evidence contradicts (hostile sweep: certify with a node failing
health.ecc, edit verdict.json so the node passes, re-sign with the vendor's key; `verify` said VALID and `accept`
recorded the node passed with 2 uncorrected ECC errors in its evidence). `sign` refuses such a folder (exit 1),
`verify` reports it INVALID, `accept` refuses it (exit 2); an honest folder of every kind gpucert signs still
signs, verifies and is accepted; a signed folder is not signed over without `--replace`, nor at all once changed.
One 3 x 2 fleet (health and memory only) serves every case."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli.main import main
from gpucert.plan.runfolder import RunFolder
from gpucert.report.derivation import verdict_differences

from .conftest import ROOT, fleet_doc, spec_doc

BAD_NODE = "gpu-node-1"
OTHER_BAD = "gpu-node-3"  # fails too: the run stays `fail` when gpu-node-1 is made to pass
Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keys, a spec of a 3 x 2 fleet whose gpu-node-1 GPU 1 has 2 uncorrected ECC errors (and gpu-node-3 GPU 0 a
    failed row remapping), and its signed certification (it fails) in reports/certify."""
    work = tmp_path_factory.mktemp("derivation")
    assert main(["keygen", str(work / "keys")]) == 0
    doc = spec_doc(probes=["health", "memory"])
    doc["certify"].pop("multinode")
    doc["expect"].update(nodes=3, gpusPerNode=2)
    faults = [
        {"kind": "ecc", "node": BAD_NODE, "gpu": 1, "uncorrected": 2},
        {"kind": "remapped-rows", "node": OTHER_BAD, "gpu": 0, "failure": True},
    ]
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(faults, nodes=3, gpus=2)))
    (work / "spec.yaml").write_text(yaml.safe_dump(doc))
    args = ["certify", str(work / "spec.yaml"), "--reports", str(work / "reports" / "certify"), "-q"]
    assert main([*args, "--sign-key", key(work)]) == 1
    return work


def key(work: Path, public: bool = False) -> str:
    return str(work / "keys" / ("gpucert.pub" if public else "gpucert.key"))


def run_in(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return run


def forged(work: Path, tmp_path: Path, edit: Edit) -> Path:
    """A copy of the signed certification with its verdict.json edited, its certificate removed."""
    run = tmp_path / "run"
    shutil.copytree(run_in(work / "reports" / "certify"), run)
    path = run / "verdict.json"
    verdict = json.loads(path.read_text())
    edit(verdict)
    path.write_text(json.dumps(verdict, indent=1) + "\n")
    result = verdict["result"]
    for name, said in (("junit.xml", 'name="gpucert_result" value="{}"'), ("report.html", "Certification {}")):
        was, now = ("FAIL", result.upper()) if name == "report.html" else ("fail", result)
        text = (run / name).read_text()
        (run / name).write_text(text.replace(said.format(was), said.format(now)))
    (run / "certificate.intoto.json").unlink()
    return run


def _move(verdict: dict[str, Any], node: str | None, frm: str, to: str, n: int = 1) -> None:
    """Move `n` checks of `node` (None: the fleet's) from one count to another, in its group and the summary."""
    group = verdict["fleet"] if node is None else verdict["nodes"][node]
    for counts in (group, verdict["summary"]):
        counts[frm] -= n
        counts[to] += n


def node_passes(verdict: dict[str, Any]) -> None:
    """The sweep's forgery: the failing node passes, its findings dropped, the counts moved."""
    mine = [f for f in verdict["findings"] if f["node"] == BAD_NODE]
    verdict["findings"] = [f for f in verdict["findings"] if f["node"] != BAD_NODE]
    _move(verdict, BAD_NODE, "failed", "passed", len(mine))
    verdict["nodes"][BAD_NODE].update(result="pass", failing=[])


def finding_dropped_as_skipped(verdict: dict[str, Any]) -> None:
    """The failure dropped from the findings and counted as a skip."""
    verdict["findings"] = [f for f in verdict["findings"] if f["node"] != BAD_NODE]
    _move(verdict, BAD_NODE, "failed", "skipped")
    verdict["nodes"][BAD_NODE].update(result="pass", failing=[])


def status_changed(verdict: dict[str, Any]) -> None:
    """The failure said to be waived (a waiver accepts it): the node `waived`, the run a pass."""
    finding = next(f for f in verdict["findings"] if f["node"] == BAD_NODE)
    finding["status"] = "waived"
    _move(verdict, BAD_NODE, "failed", "waived")
    verdict["nodes"][BAD_NODE].update(result="waived", failing=[], waivedChecks=[finding["check"]])


def counts_moved(verdict: dict[str, Any]) -> None:
    """A passed check of a sound node counted as skipped instead: every result as it was."""
    _move(verdict, "gpu-node-2", "passed", "skipped")


def result_pass(verdict: dict[str, Any]) -> None:
    """Every failure waived and the run a pass (`forged` says so in junit.xml and report.html too)."""
    for finding in verdict["findings"]:
        finding["status"] = "waived"
        _move(verdict, finding["node"], "failed", "waived")
        verdict["nodes"][finding["node"]].update(result="waived", failing=[], waivedChecks=[finding["check"]])
    verdict["result"] = "pass"


FORGERIES = [node_passes, finding_dropped_as_skipped, status_changed, counts_moved, result_pass]


def test_the_honest_certification_follows_from_its_evidence(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_in(work / "reports" / "certify")
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["result"] == "fail"
    found = {(f["check"], f["node"], f["gpu"]) for f in verdict["findings"]}
    assert found == {("health.ecc", BAD_NODE, 1), ("health.remapped_rows", OTHER_BAD, 0)}
    assert not verdict_differences(RunFolder(run))
    assert main(["verify", str(run), "--key", key(work, public=True)]) == 0
    assert "the verdict follows from its evidence" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("edit", FORGERIES, ids=lambda f: f.__name__)
def test_a_forged_verdict_is_refused_by_sign_verify_and_accept(
    work: Path, tmp_path: Path, edit: Edit, capsys: pytest.CaptureFixture[str]
) -> None:
    run = forged(work, tmp_path, edit)
    capsys.readouterr()
    assert main(["sign", str(run), "--key", key(work)]) == 1
    err = capsys.readouterr().err
    assert "the verdict does not follow from the evidence; not signed:" in err
    assert not (run / "certificate.intoto.json").exists()
    # as an older gpucert signed it: the signature and every digest good, the verdict still not the evidence's
    from gpucert.report import attest

    attest.sign_run(run, Path(key(work)), rederive=False)
    assert main(["verify", str(run), "--key", key(work, public=True)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out
    assert "changed:" not in out
    said = [line for line in out.splitlines() if "the verdict does not follow from the evidence: " in line]
    assert said, out
    if edit is not counts_moved:
        assert any("health.ecc on gpu-node-1 GPU 1: the verdict says" in line for line in said), said
    out_dir = tmp_path / "acceptance"
    assert main(["accept", str(run), "--sign-key", key(work), "--out", str(out_dir)]) == 2
    err = capsys.readouterr().err
    assert "does not follow from its evidence" in err
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_the_differences_name_check_node_gpu_and_both_sides(work: Path, tmp_path: Path) -> None:
    run = forged(work, tmp_path, node_passes)
    lines = verdict_differences(RunFolder(run)).named()
    assert "health.ecc on gpu-node-1 GPU 1: the verdict says passed or skipped (not listed), the evidence fail" in lines
    assert "gpu-node-1: the verdict says pass, the evidence fail" in lines
    assert any(line.startswith("summary: the verdict counts") for line in lines), lines


def test_a_signed_folder_is_not_signed_over(work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --replace a signed folder is refused (countersign adds a signature); with it, only while every file
    still matches the certificate; the replaced certificate verifies."""
    run = tmp_path / "run"
    shutil.copytree(run_in(work / "reports" / "certify"), run)
    capsys.readouterr()
    assert main(["sign", str(run), "--key", key(work)]) == 2
    assert "gpucert countersign" in capsys.readouterr().err
    assert main(["sign", str(run), "--key", key(work), "--replace"]) == 0
    assert main(["verify", str(run), "--key", key(work, public=True)]) == 0
    (run / "junit.xml").write_text((run / "junit.xml").read_text() + " ")
    capsys.readouterr()
    assert main(["sign", str(run), "--key", key(work), "--replace"]) == 2
    err = capsys.readouterr().err
    assert "junit.xml no longer match" in err
    assert "certify the evidence anew" in err


def test_an_honest_static_gate_signs_and_verifies(work: Path) -> None:
    """The static gate re-derives as it was judged. The other kinds' honest folders verify where they are made: a
    certification above, configure only in test_run_kinds.py, a re-test with its carried evidence and a waiver in
    test_handover_acceptance.py and test_retest_fabric.py, a recertification in test_recertify.py."""
    gate = ROOT / "examples" / "gate.yaml"
    assert main(["configure", str(gate), "--static", "--reports", str(work / "static"), "-q"]) == 0
    run = run_in(work / "static")
    assert main(["sign", str(run), "--key", key(work)]) == 0
    assert not verdict_differences(RunFolder(run))
    assert main(["verify", str(run), "--key", key(work, public=True)]) == 0


def test_a_node_said_to_pass_in_a_run_that_names_only_some_missing_checks_is_still_decided(work: Path) -> None:
    """More checks missing than the verdict names (MISSING_LISTED): which ran is not known, yet a node said to pass
    must have run and passed every one of its checks, and every finding listed must be the evidence's."""
    from gpucert.evaluate.evaluation import Evaluation
    from gpucert.plan.checks import CheckKey
    from gpucert.report.verdict import MISSING_LISTED
    from gpucert.report.verdict_model import parse_verdict

    run = run_in(work / "reports" / "certify")
    doc = json.loads((run / "verdict.json").read_text())
    open_nodes = ("gpu-node-2", OTHER_BAD)  # the nodes whose checks are named missing: not said to pass
    named = [k for k in Evaluation.from_run(run).plan.required if k.node in open_nodes]
    assert len(named) > MISSING_LISTED
    named = sorted(named, key=CheckKey.sort_key)[:MISSING_LISTED]
    cut = MISSING_LISTED + 10
    doc["coverage"].update(ran=doc["coverage"]["ran"] - cut, deselected=cut, complete=False)
    doc["coverage"]["missing"] = [str(k) for k in named]
    doc["nodes"]["gpu-node-2"]["result"] = "incomplete"
    honest = parse_verdict(doc, run / "verdict.json")
    assert not verdict_differences(RunFolder(run), honest)
    node_passes(doc)
    lines = verdict_differences(RunFolder(run), parse_verdict(doc, run / "verdict.json")).named()
    # whether its ECC check ran is not known here (not listed as missing is no proof with the list cut), but a pass
    # needs it run and passed
    assert lines[0] == f"{BAD_NODE}: the verdict says pass, the evidence fail", lines


def test_a_run_of_another_gpucert_verifies_without_re_deriving_and_is_not_accepted(
    work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another version's rules may decide a check otherwise: verify says the verdict was not re-derived and why (the
    signature and every digest still decide VALID); sign and accept, which give trust now, refuse it naming both
    versions. Made here by editing run.json's gpucert_version and signing as that version would have."""
    from gpucert.report import attest

    run = tmp_path / "run"
    shutil.copytree(run_in(work / "reports" / "certify"), run)
    (run / "certificate.intoto.json").unlink()
    info = json.loads((run / "run.json").read_text())
    info["gpucert_version"] = "0.0.9"
    (run / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    capsys.readouterr()
    assert main(["sign", str(run), "--key", key(work)]) == 1
    assert "decided by gpucert 0.0.9, this is gpucert" in capsys.readouterr().err
    attest.sign_run(run, Path(key(work)), rederive=False)
    assert main(["verify", str(run), "--key", key(work, public=True)]) == 0
    out = capsys.readouterr().out
    assert "the verdict was NOT re-derived: the run was decided by gpucert 0.0.9" in " ".join(out.split())
    assert main(["accept", str(run), "--sign-key", key(work), "--out", str(tmp_path / "acceptance")]) == 2
    assert "decided by gpucert 0.0.9" in " ".join(capsys.readouterr().err.split())
