"""A node's checks decided together (evaluation.counted_node, what a re-test does for each carried node, issue 28)
decide exactly what each check decided on its own decides (`counted`): status, message, figures, cause, on a fleet
with faults of every kind the quick path must not hide (a GPU outside its baseline, a straggler, a node behind as a
whole, unstable samples, a missing GPU, an unreachable node, a probe error, another unit, a P2P matrix with a pair
staged through the host and one missing). Fail closed: a key the quick path cannot tell is decided by `counted`, and
one whose quick path raises is too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.evaluate import evaluation
from gpucert.evaluate.evaluation import Evaluation, counted, counted_node
from gpucert.evaluate.rules.performance import p2p_problem, p2p_problems
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from tests.in_process import gpucert_here

from .conftest import fleet_doc, spec_doc
from .test_handover_acceptance import ok, runs

FAULTS = [
    {"kind": "slow", "node": "gpu-node-2", "gpu": 1, "metric": "memory.bandwidth", "factor": 0.85},
    {"kind": "slow", "node": "gpu-node-3", "gpu": 2, "metric": "compute.gemm.bf16", "factor": 0.95},
    {"kind": "slow", "node": "gpu-node-4", "metric": "pcie.h2d", "factor": 0.96},
    {"kind": "intermittent", "node": "gpu-node-5", "gpu": 0, "metric": "compute.gemm.fp16", "factor": 0.7,
     "fraction": 0.3},
    {"kind": "missing-gpu", "node": "gpu-node-6", "gpu": 3},
    {"kind": "unreachable", "node": "gpu-node-7"},
]  # fmt: skip


def _staged(doc: dict[str, Any]) -> None:
    doc["p2p"]["pairs"][0]["peer_access"] = False  # copied through the host


def _missing_and_other_unit(doc: dict[str, Any]) -> None:
    del doc["p2p"]["pairs"][3]
    doc["gpus"][2]["measurements"]["memory.bandwidth"]["unit"] = "MB/s"


def _probe_error(doc: dict[str, Any]) -> None:
    doc["errors"] = [{"probe": "compute", "gpu": 0, "message": "injected"}]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 9 x 4 run with FAULTS, whose evidence is then edited (EDITS)."""
    work = tmp_path_factory.mktemp("counted_node")
    spec = spec_doc()
    del spec["certify"]["multinode"]
    spec["expect"] |= {"nodes": 9, "gpusPerNode": 4}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(FAULTS, nodes=9, gpus=4)))
    ok(gpucert_here("certify", "spec.yaml", "-q", cwd=work), 1)
    (run,) = runs(work / "reports")
    for node, edit in (("gpu-node-1", _staged), ("gpu-node-8", _missing_and_other_unit), ("gpu-node-9", _probe_error)):
        path = run / "evidence" / f"{node}.json"
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return run


def _by_node(ev: Evaluation) -> dict[str, list[CheckKey]]:
    nodes: dict[str, list[CheckKey]] = {}
    for key in sorted((k for k in ev.plan.required if k.node is not None), key=CheckKey.sort_key):
        nodes.setdefault(key.node or "", []).append(key)
    return nodes


def _each(run: Path) -> dict[CheckKey, Finding]:
    ev = Evaluation.from_run(run)
    return {k: counted(ev, k) for keys in _by_node(ev).values() for k in keys}


def _together(run: Path) -> dict[CheckKey, Finding]:
    ev = Evaluation.from_run(run)  # a fresh one: the node's questions asked first by counted_node
    return {k: f for n, keys in _by_node(ev).items() for k, f in zip(keys, counted_node(ev, n, keys), strict=True)}


def test_a_node_decided_together_decides_what_each_check_does(faulty: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    each = _each(faulty)
    bad = {str(k): f.status.value for k, f in each.items() if f.status is not CheckStatus.PASS}
    assert bad["memory.bandwidth@gpu-node-2/gpu1"] == "fail"  # the faults are there to be found
    assert bad["straggler.pcie.h2d@gpu-node-4"] == "fail"
    assert bad["p2p.bandwidth@gpu-node-1/gpu0"] == bad["p2p.bandwidth@gpu-node-8/gpu0"] == "error"
    assert bad["memory.bandwidth@gpu-node-8/gpu2"] == bad["compute.gemm.bf16@gpu-node-9/gpu0"] == "error"
    asked: list[CheckKey] = []

    def counted_each(ev: Evaluation, key: CheckKey) -> Finding:
        asked.append(key)
        return counted(ev, key)

    monkeypatch.setattr(evaluation, "counted", counted_each)
    assert _together(faulty) == each
    again = {str(k) for k in asked}
    assert set(bad) <= again  # every check that did not pass was worded by counted
    assert len(asked) < len(each) // 4  # the rest, passed quietly, told node by node


def test_a_quick_path_that_raises_leaves_each_check_to_counted(faulty: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object) -> list[Finding | None]:
        raise RuntimeError("injected")

    monkeypatch.setattr(evaluation, "quiet_passes", broken)
    assert _together(faulty) == _each(faulty)


def test_each_gpus_p2p_problem_is_the_one_told_for_the_whole_node(faulty: Path) -> None:
    ev = Evaluation.from_run(faulty)
    for node in ("gpu-node-1", "gpu-node-2", "gpu-node-8"):
        evidence = ev.usable(node)
        assert evidence is not None
        told = p2p_problems(evidence)
        assert told == {g.index: p2p_problem(evidence, g.index) for g in evidence.gpus}
    staged = p2p_problems(ev.usable("gpu-node-1"))  # type: ignore[arg-type]
    through = "no peer access between GPUs 0->1: the copies went through the host, not GPU to GPU"
    assert staged[0] == staged[1] == through
    assert staged[2] is None


def test_an_evaluation_that_decides_otherwise_is_asked_key_by_key(faulty: Path) -> None:
    class Contradicted(Evaluation):
        def _decide(self, key: CheckKey) -> Finding:
            return Finding(key.check, CheckStatus.FAIL, key.node, key.gpu, "contradicted")

    ev = Contradicted.from_run(faulty)
    keys = _by_node(ev)["gpu-node-2"]
    assert {f.message for f in counted_node(ev, "gpu-node-2", keys)} == {"contradicted"}


def test_a_check_no_rule_decides_is_counted_s_error(faulty: Path) -> None:
    ev = Evaluation.from_run(faulty)
    keys = [CheckKey("memory.bandwidth", "gpu-node-2", 0), CheckKey("no.such.check", "gpu-node-2", 0)]
    found = counted_node(ev, "gpu-node-2", keys)
    assert found == [counted(ev, k) for k in keys]
    assert found[1].status is CheckStatus.ERROR
