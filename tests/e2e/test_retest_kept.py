"""A re-test's carried nodes keep their signed decisions where nothing they depend on changed (issue 28), and the
verdict is still the one re-evaluating everything gives.

One signed certification of five nodes, three of them failing with an ECC error, then a re-test with the same spec
file: the fleet file under it is repaired, and the three nodes come back with slower GPUs (memory.bandwidth) and a
newer kernel, which moves every check that compares a carried node with its pool (its stragglers, and stack.skew,
which now fails gpu-node-4 and gpu-node-5: the old kernel is now the odd one). The carried nodes keep the decisions of
their local checks (health, dcgm, the stack against its pins, ...; evaluate/catalog.py) and the rest is decided
again. Then each gate is turned off on a copy of the re-test's folder, and that run or node is decided by the rules.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.acceptance import retest_kept
from gpucert.acceptance.retest import verify_carried
from gpucert.acceptance.retest_kept import Kept, kept_decisions
from gpucert.evaluate.catalog import REGISTRY
from gpucert.evaluate.evaluation import Evaluation, counted
from gpucert.plan.checks import CheckKey
from gpucert.plan.records import read_retest_record
from gpucert.plan.runfolder import RunFolder
from gpucert.pytest.carried import decide_carried
from gpucert.pytest.context import RunContext
from gpucert.report import attest
from gpucert.report.derivation import verdict_differences
from gpucert.resources import code_digest

from .conftest import fleet_doc, gpucert, spec_doc
from .test_handover_acceptance import new_run, ok, runs
from .test_retest_decided import failing, judged, verdict

CARRIED = {"gpu-node-4", "gpu-node-5"}
AGAIN = ("gpu-node-1", "gpu-node-2", "gpu-node-3")


@dataclass(frozen=True)
class Runs:
    work: Path
    source: Path
    retest: Path
    said: str  # the re-test command's output


def _fleets(work: Path) -> tuple[dict[str, object], dict[str, object]]:
    ecc = [{"kind": "ecc", "node": n, "gpu": 0, "uncorrected": 1} for n in AGAIN]
    newer = [{"kind": "version", "node": n, "component": "kernel", "version": "6.8.0"} for n in AGAIN]
    slower = [{"kind": "slow", "node": n, "metric": "memory.bandwidth", "factor": 0.9} for n in AGAIN]
    return fleet_doc(ecc, nodes=5, gpus=2), fleet_doc(newer + slower, nodes=5, gpus=2)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    work = tmp_path_factory.mktemp("kept")
    first, repaired = _fleets(work)
    spec = spec_doc(probes=["health", "dcgm", "memory"])
    del spec["certify"]["multinode"]
    spec["expect"] |= {"nodes": 5, "gpusPerNode": 2}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(first))
    ok(gpucert("keygen", "keys", cwd=work))
    sign = ("-q", "--sign-key", "keys/gpucert.key")
    ok(gpucert("certify", "spec.yaml", *sign, cwd=work), 1)
    (source,) = runs(work / "reports")
    (work / "fleet.yaml").write_text(yaml.safe_dump(repaired))  # the cluster changed; the spec file did not
    again = ok(gpucert("certify", "spec.yaml", *sign, "--retest", str(source), cwd=work), 1)
    return Runs(work, source, new_run(work / "reports", {source}), again.stdout)


def kept_of(run: Path) -> Kept:
    folder = RunFolder(run)
    record = read_retest_record(folder)
    assert record is not None
    return kept_decisions(Evaluation.from_run(folder), record)


def carried_outcomes(run: Path) -> Iterator[tuple[object, str, str, str]]:
    """What the session's controller decides for each carried check (pytest/carried.py), beside what the rules decide
    of it in a fresh evaluation: (key, the kept path's status, the rules' status, the kept path's message)."""
    ctx = RunContext(Evaluation.from_run(run))
    assert decide_carried(ctx) > 0
    fresh = Evaluation.from_run(run)
    for key, outcome in ctx.outcomes.items():
        yield key, outcome.finding.status.value, counted(fresh, key).status.value, outcome.finding.message


def test_carried_nodes_keep_their_local_decisions_and_the_verdict_is_a_full_re_evaluations(made: Runs) -> None:
    retest = verdict(made.retest)
    assert set(retest["retest"]["carried"]) == CARRIED
    slower = {("memory.bandwidth", n) for n in AGAIN}  # below the SKU's figure
    assert failing(retest) == {("stack.skew", "gpu-node-4"), ("stack.skew", "gpu-node-5")} | slower
    kept = kept_of(made.retest)
    assert (kept.refused, kept.nodes, kept.why_not) == (None, CARRIED, {})
    said = " ".join(made.said.split())  # the command says what was kept (rich may fold the line)
    assert f"re-test: 2 carried nodes kept their local checks' signed decisions from {made.source.name}" in said
    # every check the session keeps is local and says so; every one it decides again is not; both as the rules say
    seen = {True: 0, False: 0}
    for key, status, rules, message in carried_outcomes(made.retest):
        local = REGISTRY.rule_for(key.check).local  # type: ignore[attr-defined]
        assert ("kept: the same evidence, stack, inputs and gpucert code" in message) is local, key
        assert status == rules, key
        seen[local] += 1
    assert seen[True] >= 2 * 30  # health, dcgm, the stack against its pins, ... of both nodes
    assert seen[False] >= 2 * 5  # their stragglers, stack.skew, ...
    # and the verdict is the one `gpucert evaluate` gives over the same evidence, every check decided by the rules
    plain = made.work / "plain"
    shutil.copytree(made.retest / "evidence", plain / "evidence")
    for name in ("inventory.json", "stack.json"):
        shutil.copyfile(made.retest / name, plain / name)
    before = runs(made.work / "reports")
    ok(gpucert("evaluate", "spec.yaml", "--evidence", str(plain / "evidence"), "-q", cwd=made.work), 1)
    full = verdict(new_run(made.work / "reports", before))
    assert "retest" not in full
    assert judged(retest) == judged(full)


def test_carried_checks_are_decided_node_by_node_in_one_order_whatever_the_hashes(made: Runs) -> None:
    """The plan's required checks are a set, in the order its keys hash to (strings' hashes change per process): the
    session decides the carried ones in CheckKey.sort_key's order, so every later pass over the outcomes (the rules',
    the verdict's ties, the reports') meets them node by node, the same in every run."""
    ctx = RunContext(Evaluation.from_run(made.retest))
    assert decide_carried(ctx) > 0
    keys = list(ctx.outcomes)
    assert {k.node for k in keys} == CARRIED
    assert keys == sorted(keys, key=CheckKey.sort_key)


def test_the_retest_folder_keeps_the_sources_records_as_signed_and_its_verdict_is_re_derived(made: Runs) -> None:
    """The copies are the source's files; the re-test's carried evidence is what its source signed, and its verdict
    is the one every check decided again by the rules gives (what `gpucert verify` holds it to)."""
    for name in retest_kept.KEPT_RECORDS:
        assert (made.retest / "retest" / "source" / name).read_bytes() == (made.source / name).read_bytes()
    assert json.loads((made.source / "run.json").read_text())["gpucert_code"] == code_digest()
    assert json.loads((made.retest / "run.json").read_text())["gpucert_code"] == code_digest()
    assert verify_carried(made.retest, None) == []
    assert not verdict_differences(RunFolder(made.retest))


def copy_of(made: Runs, name: str) -> Path:
    run = made.work / name
    shutil.copytree(made.retest, run)
    (run / "certificate.intoto.json").unlink()
    return run


def test_other_gpucert_code_keeps_nothing(made: Runs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retest_kept, "code_digest", lambda: "sha256:" + "0" * 64)
    kept = kept_of(made.retest)
    assert kept.nodes == frozenset()
    assert "decided by other gpucert code" in str(kept.refused)
    assert all("kept" not in message for *_, message in carried_outcomes(made.retest))


def test_another_spec_or_waivers_keep_nothing(made: Runs) -> None:
    run = copy_of(made, "spec-edited")
    spec = run / "inputs" / "spec.yaml"
    spec.write_text(spec.read_text() + "# edited\n")
    kept = kept_of(run)
    assert (kept.nodes, kept.refused) == (frozenset(), "its inputs differ from the source's: inputs/spec.yaml")
    run = copy_of(made, "waived")
    (run / "inputs" / "waivers.yaml").write_text("waivers: []\n")
    kept = kept_of(run)
    assert kept.nodes == frozenset()
    assert str(kept.refused).startswith("the run has waivers")


def test_a_node_whose_stack_inventory_or_evidence_changed_is_decided_by_the_rules(made: Runs) -> None:
    run = copy_of(made, "node-changed")
    stack = json.loads((run / "stack.json").read_text())
    stack["nodes"]["gpu-node-4"]["labels"]["example.com/rack"] = "r9"
    (run / "stack.json").write_text(json.dumps(stack))
    kept = kept_of(run)
    assert kept.nodes == {"gpu-node-5"}
    assert kept.why_not == {"gpu-node-4": "its stack.json entry differs from the source's"}
    assert kept.said().endswith("; 1 decided again (gpu-node-4: its stack.json entry differs from the source's)")
    inventory = json.loads((run / "inventory.json").read_text())
    inventory["nodes"][-1]["allocatable_gpus"] = 1
    (run / "inventory.json").write_text(json.dumps(inventory))
    assert kept_of(run).why_not["gpu-node-5"] == "its inventory.json entry differs from the source's"
    run = copy_of(made, "evidence-changed")
    path = run / "evidence" / "gpu-node-5.json"
    path.write_text(path.read_text() + " ")
    assert kept_of(run).why_not == {"gpu-node-5": "its evidence is not the file its source signed"}
    for key, *_, message in carried_outcomes(run):
        assert ("kept" in message) is (key.node == "gpu-node-4" and REGISTRY.rule_for(key.check).local)  # type: ignore[attr-defined]


def test_records_that_are_not_what_the_source_signed_keep_nothing(made: Runs) -> None:
    run = copy_of(made, "records-edited")
    kept_verdict = run / "retest" / "source" / "verdict.json"
    kept_verdict.write_text(kept_verdict.read_text().replace('"fail"', '"pass"'))
    kept = kept_of(run)
    assert kept.nodes == frozenset()
    assert "retest/source/verdict.json is not the verdict.json its source signed" in str(kept.refused)


def from_source(made: Runs, name: str, record: str, edit: Callable[[dict[str, Any]], object]) -> Path:
    """A copy of the re-test whose source's `record` (run.json, verdict.json) says what `edit` makes it say: the
    source copied, edited and its files signed again with the same key (sign itself would refuse a verdict edited
    on purpose), and put in the re-test's retest/ as the re-test had put the real one."""
    source = made.work / f"{name}-source"
    shutil.copytree(made.source, source)
    (source / "certificate.intoto.json").unlink()
    doc = json.loads((source / record).read_text())
    edit(doc)
    (source / record).write_text(json.dumps(doc, indent=1) + "\n")
    key = made.work / "keys" / "gpucert.key"
    attest.sign_folder(source, key, attest.PREDICATE_TYPE, {"edited": record})  # every file's digest, as sign's
    run = copy_of(made, name)
    shutil.copyfile(source / "certificate.intoto.json", run / "retest" / "source.intoto.json")
    shutil.copyfile(source / record, run / "retest" / "source" / record)
    said = json.loads((run / "retest" / "record.json").read_text())
    said["source"]["certificate"] = attest.certificate_digest(source)
    (run / "retest" / "record.json").write_text(json.dumps(said))
    return run


def test_a_source_before_the_code_digest_keeps_nothing(made: Runs) -> None:
    """A source whose run.json names no gpucert_code (a run before it): the re-test cannot say the same code decided
    it, so every check is decided by the rules."""
    kept = kept_of(from_source(made, "older", "run.json", lambda info: info.pop("gpucert_code")))
    assert (kept.nodes, kept.refused) == (
        frozenset(),
        "the source's run.json records no digest of gpucert's code (a run before it)",
    )


def test_a_node_the_source_passed_by_a_waiver_or_with_fewer_checks_is_decided_by_the_rules(made: Runs) -> None:
    """The source's verdict must say the node passed every check it must pass now, none waived: gpu-node-4 passed
    there with a waived check, gpu-node-5 with one check fewer than it has now."""

    def edit(verdict: dict[str, Any]) -> None:
        verdict["nodes"]["gpu-node-4"] |= {"waived": 1, "waivedChecks": ["health.ecc"]}
        verdict["nodes"]["gpu-node-5"]["passed"] -= 1

    kept = kept_of(from_source(made, "said-otherwise", "verdict.json", edit))
    assert (kept.refused, kept.nodes) == (None, frozenset())
    assert kept.why_not == {
        "gpu-node-4": "the source's verdict says it did not pass every check",
        "gpu-node-5": "the source's verdict does not say it passed every check it must pass now",
    }


def test_a_source_whose_signature_no_key_verified_keeps_nothing(made: Runs) -> None:
    """A re-test without --sign-key checks the source's digests but not who signed them (record.json: no signer): an
    envelope anyone wrote, over a verdict.json saying the failed nodes passed, had them carried and their health
    checks kept as passes, where `gpucert evaluate` of the same evidence fails them. Nothing is kept then."""
    run = copy_of(made, "unverified")
    said = json.loads((run / "retest" / "record.json").read_text())
    assert said["source"]["signer"]
    said["source"]["signer"] = None
    (run / "retest" / "record.json").write_text(json.dumps(said))
    kept = kept_of(run)
    assert (kept.nodes, kept.refused) == (frozenset(), retest_kept.UNVERIFIED)
    assert kept.said() == f"re-test: every carried check decided again by the rules: {retest_kept.UNVERIFIED}"
    assert all("kept" not in message for *_, message in carried_outcomes(run))
