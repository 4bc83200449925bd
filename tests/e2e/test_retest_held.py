"""A re-test holds its carried nodes' evidence by its head, with the figures its source signed in figures.json
(evaluate/held.py), where the same code derived them from the same file under the same inputs and the re-test's own
key verified the source: then no carried node's document is read, and the verdict and the re-test's own figures are
what re-deriving everything from the evidence gives. Where any of that does not hold, nothing is held.

One signed certification of five nodes with two GPUs (health, memory, P2P), three failing with an ECC error, then a
re-test after the repair, the three coming back slower (every carried node's peers move)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpucert.acceptance.retest import _heads
from gpucert.acceptance.retest_kept import held_figures
from gpucert.evaluate.evaluation import Evaluation, counted
from gpucert.evaluate.held import FIGURES_SCHEMA, figures_document
from gpucert.measure.evidence_held import is_held
from gpucert.plan.records import read_retest_record
from gpucert.plan.runfolder import RunFolder
from gpucert.pytest.carried import decide_carried
from gpucert.pytest.context import RunContext
from gpucert.report import attest
from gpucert.report.derivation import VerdictContradicted, verdict_differences

from ..in_process import gpucert_here
from .conftest import fleet_doc, gpucert, spec_doc
from .test_handover_acceptance import new_run, ok, runs

CARRIED = ("gpu-node-4", "gpu-node-5")
AGAIN = ("gpu-node-1", "gpu-node-2", "gpu-node-3")


@dataclass(frozen=True)
class Runs:
    work: Path
    source: Path
    retest: Path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    work = tmp_path_factory.mktemp("held")
    ecc = [{"kind": "ecc", "node": n, "gpu": 0, "uncorrected": 1} for n in AGAIN]
    slower = [{"kind": "slow", "node": n, "metric": "memory.bandwidth", "factor": 0.9} for n in AGAIN]
    spec = spec_doc(probes=["health", "memory", "p2p"])
    del spec["certify"]["multinode"]
    spec["expect"] |= {"nodes": 5, "gpusPerNode": 2}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(ecc, nodes=5, gpus=2)))
    ok(gpucert("keygen", "keys", cwd=work))
    sign = ("-q", "--sign-key", "keys/gpucert.key")
    ok(gpucert("certify", "spec.yaml", *sign, cwd=work), 1)
    (source,) = runs(work / "reports")
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(slower, nodes=5, gpus=2)))
    ok(gpucert("certify", "spec.yaml", *sign, "--retest", str(source), cwd=work), 1)
    return Runs(work, source, new_run(work / "reports", {source}))


def _figures(run: Path) -> dict[str, object]:
    return json.loads((run / "figures.json").read_bytes())


def _held_view(run: Path) -> Evaluation:
    """The re-test's evaluation as its session opens it (RunContext holds the carried nodes)."""
    return RunContext(Evaluation.from_run(run)).evaluation


def test_a_run_signs_the_figures_its_evidence_gives(made: Runs) -> None:
    doc = _figures(made.source)
    assert doc["schema"] == FIGURES_SCHEMA
    assert sorted(doc["nodes"]) == [f"gpu-node-{i}" for i in range(1, 6)]  # type: ignore[call-overload]
    assert "figures.json" in attest.read_envelope(made.source / "certificate.intoto.json").signed_digests()
    assert doc == json.loads(figures_document(Evaluation.from_run(made.source)))


def test_the_source_s_figures_are_kept_by_a_hard_link(made: Runs) -> None:
    """retest/source/figures.json (8.8 MB at 1,024 x 8) is the source's file, linked as carried evidence is (the
    same file system here), not a second copy written."""
    kept, source = made.retest / "retest" / "source" / "figures.json", made.source / "figures.json"
    assert kept.read_bytes() == source.read_bytes()
    assert kept.stat().st_ino == source.stat().st_ino


def test_the_retest_holds_its_carried_nodes_and_reads_none_of_their_documents(made: Runs) -> None:
    ctx = RunContext(Evaluation.from_run(made.retest))
    ev = ctx.evaluation
    assert sorted(n for n in ev.inventory.names if ev.held(n) is not None) == list(CARRIED)
    decide_carried(ctx)  # as the session decides them: the local checks kept, the rest by the rules
    for key in ev.plan.required:  # and every other check of the run, as its items do
        if key.node not in CARRIED:
            counted(ev, key)
    ev.peers.against_sku()
    ev.peers.undecided()
    figures_document(ev)
    assert all(is_held(ev.evidence(n)) for n in CARRIED)  # type: ignore[arg-type]
    assert not any(is_held(ev.evidence(n)) for n in AGAIN)  # type: ignore[arg-type]


def test_held_decides_as_reading_every_document(made: Runs) -> None:
    """The re-test's verdict and its own figures.json are what an evaluation reading every document gives."""
    assert verdict_differences(Evaluation.from_run(made.retest).folder).named() == []
    assert _figures(made.retest) == json.loads(figures_document(Evaluation.from_run(made.retest)))
    held, plain = _held_view(made.retest), Evaluation.from_run(made.retest)
    for key in sorted(plain.plan.required, key=lambda k: k.sort_key()):
        assert held.decide(key) == plain.decide(key), key


def _copy(made: Runs, tmp_path: Path) -> Path:
    run = tmp_path / made.retest.name
    shutil.copytree(made.retest, run, symlinks=True)
    return run


@pytest.mark.parametrize(
    "spoil",
    [
        "figures",  # retest/source/figures.json is not the one its source signed
        "signer",  # the re-test record says no key verified the source
        "code",  # the source's run.json names other gpucert code
    ],
)
def test_nothing_is_held_where_a_gate_fails(made: Runs, tmp_path: Path, spoil: str) -> None:
    run = _copy(made, tmp_path)
    kept = run / "retest" / "source"
    if spoil == "figures":
        doc = json.loads((kept / "figures.json").read_bytes())
        doc["nodes"]["gpu-node-4"]["figures"]["memory.bandwidth"][0][1] *= 2
        (kept / "figures.json").write_text(json.dumps(doc))
    elif spoil == "signer":
        record = json.loads((run / "retest" / "record.json").read_bytes())
        record["source"]["signer"] = None
        (run / "retest" / "record.json").write_text(json.dumps(record))
    else:
        info = json.loads((kept / "run.json").read_bytes())
        info["gpucert_code"] = "sha256:" + "0" * 64
        (kept / "run.json").write_text(json.dumps(info))
    view = Evaluation.from_run(run)
    assert held_figures(view, read_retest_record(view.folder)) == {}


def test_a_carried_file_changed_is_not_held(made: Runs, tmp_path: Path) -> None:
    run = _copy(made, tmp_path)
    path = run / "evidence" / "gpu-node-4.json"
    doc = json.loads(path.read_bytes())
    path.unlink()  # a hard link to the source's file: write a file of its own
    path.write_text(json.dumps(doc, indent=1))  # the same document, other bytes
    view = Evaluation.from_run(run)
    assert sorted(held_figures(view, read_retest_record(view.folder))) == ["gpu-node-5"]


def test_figures_the_evidence_does_not_give_are_not_signed(made: Runs, tmp_path: Path) -> None:
    """A run folder whose figures.json was changed is not signed: a re-test would take its figures."""
    run = tmp_path / made.source.name
    shutil.copytree(made.source, run)
    (run / "certificate.intoto.json").unlink()
    doc = _figures(run)
    doc["nodes"]["gpu-node-4"]["figures"]["memory.bandwidth"][0][1] *= 2  # type: ignore[index]
    (run / "figures.json").write_text(json.dumps(doc))
    with pytest.raises(VerdictContradicted, match=r"figures\.json"):
        attest.sign_run(run, made.work / "keys" / "gpucert.key")


def test_figures_no_evidence_can_give_are_refused_by_sign_in_a_line(made: Runs, tmp_path: Path) -> None:
    """A document whose head says a NaN gives no figures.json (JSON cannot say it: evaluate/held.py): a folder that
    holds one anyway (its evidence edited after its run) is refused by sign as contradicted, not with json's
    ValueError as a traceback."""
    run = tmp_path / made.source.name
    shutil.copytree(made.source, run)
    (run / "certificate.intoto.json").unlink()
    path = run / "evidence" / "gpu-node-4.json"
    doc = json.loads(path.read_bytes())
    nan = [float("nan")] * 5
    point = {"size_bytes": 1024, "time_us": nan, "algbw": nan, "busbw": nan}
    doc["nccl"] = {"op": "all_reduce", "ranks": 2, "points": [point], "correct": True}
    path.write_text(json.dumps(doc))
    with pytest.raises(VerdictContradicted, match=r"figures\.json cannot be derived from the run's evidence"):
        attest.sign_run(run, made.work / "keys" / "gpucert.key")


def test_a_re_evaluation_holds_nothing_no_key_of_its_own_verified(made: Runs, tmp_path: Path) -> None:
    """`gpucert evaluate` of a re-test folder copies its retest/ (the record, the source's certificate and records)
    and checks no signature (it is given no key): a source certificate anyone wrote, naming a figures.json that
    halves a carried node's figures, must not decide its checks. The re-evaluation says what its evidence says."""
    run = _copy(made, tmp_path)
    kept = run / "retest" / "source"
    doc = json.loads((kept / "figures.json").read_bytes())
    for row in doc["nodes"]["gpu-node-4"]["figures"]["memory.bandwidth"]:
        row[1] /= 2  # a straggler by these figures
    data = json.dumps(doc).encode()
    (kept / "figures.json").write_bytes(data)
    certificate = run / "retest" / "source.intoto.json"
    envelope = json.loads(certificate.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    for subject in statement["subject"]:
        if subject["name"] == "figures.json":
            subject["digest"]["sha256"] = hashlib.sha256(data).hexdigest()
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()  # its signature no longer holds
    certificate.write_text(json.dumps(envelope))
    record = json.loads((run / "retest" / "record.json").read_bytes())
    record["source"]["certificate"] = "sha256:" + hashlib.sha256(certificate.read_bytes()).hexdigest()
    (run / "retest" / "record.json").write_text(json.dumps(record, indent=1) + "\n")
    reports = tmp_path / "again"
    ok(gpucert_here("evaluate", "spec.yaml", "--evidence", str(run), "-q", "--reports", str(reports), cwd=made.work), 1)
    (again,) = runs(reports)
    assert json.loads((again / "verdict.json").read_bytes())["nodes"]["gpu-node-4"]["result"] == "pass"
    assert verdict_differences(Evaluation.from_run(again).folder).named() == []


def test_choosing_holds_no_head_of_a_figures_json_other_than_the_signed_one(made: Runs, tmp_path: Path) -> None:
    """A re-test chooses what to carry by the heads of its source's figures.json (a carried node's identity is its
    head's): only by the bytes the source signed, read once and hashed, not a file swapped after open_source checked
    the folder (a GPU's serial said otherwise would carry a node whose board was changed)."""
    run = tmp_path / made.source.name
    shutil.copytree(made.source, run)
    signed = attest.read_envelope(run / "certificate.intoto.json").signed_digests()
    assert sorted(_heads(RunFolder(run), signed, "SHA256:the-key")) == [f"gpu-node-{i}" for i in range(1, 6)]
    doc = _figures(run)
    doc["nodes"]["gpu-node-4"]["head"]["gpus"][0]["serial"] = "a board it no longer has"  # type: ignore[index]
    (run / "figures.json").write_text(json.dumps(doc))
    assert _heads(RunFolder(run), signed, "SHA256:the-key") == {}
