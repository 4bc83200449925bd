"""A P2P pair that was not measured never lets its GPUs pass (fail closed).

The probe (measure/probes/between_gpus.py `_peer_copies`) records a pair it could not copy with `error` and no
samples, and adds a GPU error for the pair's SOURCE GPU only. Its DESTINATION GPU was judged on its other pairs and
passed p2p.bandwidth with one of its pairs never measured; evidence with the pair's error but without the GPU error
entry (an older or hostile writer) passed both. A pair with an error, or with no samples, is an error of both its
GPUs, on every path that decides p2p.bandwidth: check by check (`counted`), node by node (`counted_node`, what a
re-test does), the figures believed for a pool at once (`believe_all`), and the verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.evaluate.evaluation import Evaluation, counted, counted_node
from gpucert.evaluate.rules.performance import believable, p2p_problem, p2p_problems
from gpucert.evaluate.rules.performance_batch import believe_all
from gpucert.measure.evidence import GpuEvidence, NodeEvidence, P2pEvidence, P2pPair
from gpucert.plan.checks import CheckKey, CheckStatus
from tests.in_process import gpucert_here

from .conftest import fleet_doc, spec_doc
from .test_handover_acceptance import ok, runs

NODE, SRC, DST = "gpu-node-2", 1, 3
WHY = "cudaMemcpyPeerAsync: peer access is not supported between these two devices"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4 x 4 run that passes certification, its spec beside it."""
    work = tmp_path_factory.mktemp("p2p_unmeasured")
    spec = spec_doc()
    del spec["certify"]["multinode"]
    spec["expect"] |= {"nodes": 4, "gpusPerNode": 4}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=4, gpus=4)))
    ok(gpucert_here("certify", "spec.yaml", "-q", cwd=work), 0)
    (run,) = runs(work / "reports")
    return run


CASES = {
    # what the probe writes (probes/p2p.py: no peer access said, no samples, the error; and the source GPU's error)
    "with the probe's GPU error": ({"error": WHY, "peer_access": False}, True),
    # an older or hostile writer: the pair's error alone
    "without the GPU error": ({"error": WHY, "peer_access": False}, False),
    # no error said, no samples either
    "no samples": ({}, False),
}


def _spoiled(clean: Path, dest: Path, case: str) -> Path:
    pair, gpu_error = CASES[case]
    run = dest / "ev"
    shutil.copytree(clean, run)
    path = run / "evidence" / f"{NODE}.json"
    doc = json.loads(path.read_text())
    (found,) = (p for p in doc["p2p"]["pairs"] if (p["src"], p["dst"]) == (SRC, DST))
    found.update(samples=[], **pair)
    if gpu_error:
        message = f"peer copy GPU {SRC} -> GPU {DST}: {WHY}"
        doc["errors"] = [*doc.get("errors", []), {"probe": "p2p", "gpu": SRC, "message": message}]
    path.write_text(json.dumps(doc))
    return run


def _why(case: str) -> str:
    return WHY if CASES[case][0] else "it recorded no samples"


@pytest.mark.parametrize("case", list(CASES))
def test_both_gpus_of_a_pair_not_measured_are_errors(clean: Path, tmp_path: Path, case: str) -> None:
    ev = Evaluation.from_run(_spoiled(clean, tmp_path, case))
    found = {g: counted(ev, CheckKey("p2p.bandwidth", NODE, g)) for g in range(4)}
    assert found[SRC].status is found[DST].status is CheckStatus.ERROR, found
    assert found[0].status is found[2].status is CheckStatus.PASS  # the rest of the matrix stands
    unmeasured = f"{NODE}/gpu{DST}: the P2P pair {SRC}->{DST} was not measured: {_why(case)}"
    assert found[DST].message == unmeasured
    if CASES[case][1]:  # the source GPU's own error, as the probe recorded it
        assert found[SRC].message == f"{NODE}/gpu{SRC}: the p2p probe failed: peer copy GPU {SRC} -> GPU {DST}: {WHY}"
    else:
        assert found[SRC].message == unmeasured.replace(f"gpu{DST}:", f"gpu{SRC}:")
    evidence = ev.usable(NODE)
    assert evidence is not None
    assert p2p_problems(evidence) == {g.index: p2p_problem(evidence, g.index) for g in evidence.gpus}


@pytest.mark.parametrize("case", list(CASES))
def test_a_node_decided_together_decides_the_pair_as_each_check_does(clean: Path, tmp_path: Path, case: str) -> None:
    run = _spoiled(clean, tmp_path, case)
    each_ev, together_ev = Evaluation.from_run(run), Evaluation.from_run(run)  # together: the node's questions first
    keys = sorted((k for k in each_ev.plan.required if k.node == NODE), key=CheckKey.sort_key)
    each = [counted(each_ev, k) for k in keys]
    together = counted_node(together_ev, NODE, keys)
    assert together == each
    p2p = {k.gpu: f.status for k, f in zip(keys, together, strict=True) if k.check == "p2p.bandwidth"}
    assert p2p == {0: CheckStatus.PASS, SRC: CheckStatus.ERROR, 2: CheckStatus.PASS, DST: CheckStatus.ERROR}


@pytest.mark.parametrize("case", ["without the GPU error", "no samples"])
def test_the_verdict_of_a_pair_not_measured_is_not_a_pass(clean: Path, tmp_path: Path, case: str) -> None:
    run = _spoiled(clean, tmp_path, case)
    work = clean.parent.parent
    before = runs(work / "reports")
    ok(gpucert_here("evaluate", "spec.yaml", "--evidence", str(run), "-q", cwd=work), 1)
    (evaluated,) = runs(work / "reports") - before
    verdict = json.loads((evaluated / "verdict.json").read_text())
    assert verdict["result"] == "fail"
    p2p = {f["gpu"]: f["status"] for f in verdict["findings"] if (f["check"], f["node"]) == ("p2p.bandwidth", NODE)}
    assert p2p[SRC] == p2p[DST] == "error", verdict["findings"]


def _node(pairs: list[P2pPair]) -> NodeEvidence:
    gpus = [GpuEvidence(index=i) for i in range(4)]
    return NodeEvidence(
        node="n", target="t", probe_version="1", started="s", finished="f", gpus=gpus, p2p=P2pEvidence(pairs=pairs)
    )


@pytest.mark.parametrize("pair", [{"error": WHY}, {"error": WHY, "samples": [50.0] * 5}, {"samples": []}])
def test_no_figure_is_believed_for_a_gpu_of_a_pair_not_measured(pair: dict[str, Any]) -> None:
    """Neither `believable` nor the pool's figures at once (`believe_all`, `believe_p2p`'s arrays) believe a figure
    of the pair's GPUs from their other pairs; a pair with an error is not measured even where it has samples."""
    pairs = [
        P2pPair(src=a, dst=b, peer_access=True, samples=[50.0 + a + b] * 5)
        for a in range(4)
        for b in range(4)
        if a != b
    ]
    at = next(i for i, p in enumerate(pairs) if (p.src, p.dst) == (SRC, DST))
    pairs[at] = pairs[at].model_copy(update={"samples": [], **pair})
    ev = _node(pairs)
    told = {idx: figure for _ev, idx, figure, _slow in believe_all([ev], "p2p.bandwidth", 50.0, 5)}
    for g in range(4):
        assert repr(told[g]) == repr(believable(ev, "p2p.bandwidth", g, 50.0, 5))
    why = WHY if "error" in pair else "it recorded no samples"
    assert told[SRC] == told[DST] == f"the P2P pair {SRC}->{DST} was not measured: {why}"
    assert not isinstance(told[0], str)
    assert not isinstance(told[2], str)
