"""The fabric stage's pairs, one document a round (plan/pairs_files.py): each round's written once, when it ends (one
document rewritten after every round was some 4.5 TB of writes at 1,024 x 8); a run written before, with one
pairs.json, is still judged as it was and a re-test still carries it; a round document missing or not the round it
names is an error, never a pass."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gpucert.acceptance.retest_pairs import carry_pairs
from gpucert.errors import EvidenceError
from gpucert.evaluate.evaluation import Evaluation
from gpucert.measure import evidence
from gpucert.measure.evidence import NcclChannel
from gpucert.plan import pairs_files as pairs_files_module
from gpucert.plan.carried_pairs import read_pairs
from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.plan.fabric_checks import rail_detail
from gpucert.plan.layout import Mode
from gpucert.plan.pairs import rounds
from gpucert.plan.pairs_files import pairs_files, write_round
from gpucert.plan.run import prepare
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import load_spec

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"gpu-node-{i}" for i in range(1, 5)]
ROUNDS = ["pairs-0001.json", "pairs-0002.json", "pairs-0003.json"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Evaluation, Counter[str]]:
    """A clean 4-node, 2-rail fabric measured by the simulator (6 pairs in 3 rounds), and how often each evidence
    document was written."""
    tmp = tmp_path_factory.mktemp("rounds")
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-16x8-fabric.yaml").read_text())
    fleet.update(faults=[], nodes=dict(fleet["nodes"], count=4))
    fleet["fabric"].update(rails=2, racks={"label": "nvidia.com/gpu.clique", "size": 2})
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    doc = yaml.safe_load((ROOT / "examples" / "fabric.yaml").read_text())
    doc["target"]["fleet"] = str(tmp / "fleet.yaml")
    pool = doc["pools"][0]
    pool["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    pool["expect"]["nodes"] = 4
    pool["fabric"]["rails"]["count"] = 2
    doc["certify"] = {"probes": ["health"], "multinode": {"pairs": True}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp / "spec.yaml")
    writes: Counter[str] = Counter()
    real = evidence.write_atomic

    def counted(path: Path, text: str, *, durable: bool = True) -> Path:
        writes[path.name] += 1
        return real(path, text, durable=durable)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "write_atomic", counted)  # every evidence document
        mp.setattr(pairs_files_module, "write_atomic", counted)  # the pairs' round documents
        folder = prepare(spec, tmp / "reports", Mode.MEASURE)
    return Evaluation(folder, spec, load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")), writes


def _fabric_keys(ev: Evaluation) -> list[CheckKey]:
    return sorted(
        (k for k in ev.plan.required if k.check.startswith("fabric.") or k.check.startswith("straggler.nccl")), key=str
    )


def _copy(ev: Evaluation, tmp_path: Path, change: Callable[[Path], None]) -> Evaluation:
    """A fresh view of a copy of the run whose evidence/multinode/ was changed by `change`."""
    copy = tmp_path / "copy"
    shutil.copytree(ev.folder.path, copy)
    change(copy / "evidence" / "multinode")
    return Evaluation(RunFolder(copy), ev.spec, ev.baselines)


def _old_layout(multinode: Path) -> None:
    """The run's pairs as a run written before kept them: every pair in one pairs.json, no round."""
    pairs = [p for f in pairs_files(multinode) for p in json.loads(f.read_text())["pairs"]]
    for f in pairs_files(multinode):
        f.unlink()
    (multinode / "pairs.json").write_text(json.dumps({"schema": evidence.EVIDENCE_SCHEMA, "pairs": pairs}))


def test_each_round_is_one_document_written_once_when_it_ends(measured: tuple[Evaluation, Counter[str]]) -> None:
    ev, writes = measured
    multinode = ev.folder.pairs_path.parent
    assert [p.name for p in pairs_files(multinode)] == ROUNDS
    assert not (multinode / "pairs.json").exists()
    assert {n: c for n, c in writes.items() if n.startswith("pairs")} == dict.fromkeys(ROUNDS, 1)
    docs = [json.loads(p.read_text()) for p in pairs_files(multinode)]
    assert [(d["round"], d["rounds"]) for d in docs] == [(1, 3), (2, 3), (3, 3)]
    assert [{frozenset(p["nodes"]) for p in d["pairs"]} for d in docs] == [
        {frozenset(p) for p in r} for r in rounds(NODES)
    ]
    found = {k: ev.decide(k).status for k in _fabric_keys(ev)}
    assert len(found) > 8
    assert set(found.values()) == {CheckStatus.PASS}, found


def test_a_run_written_before_with_one_pairs_json_is_judged_as_it_was(
    measured: tuple[Evaluation, Counter[str]], tmp_path: Path
) -> None:
    ev = measured[0]
    old = _copy(ev, tmp_path, _old_layout)
    assert [p.name for p in pairs_files(old.folder.pairs_path.parent)] == ["pairs.json"]
    assert {k: old.decide(k) for k in _fabric_keys(ev)} == {k: ev.decide(k) for k in _fabric_keys(ev)}
    again = prepare(ev.spec, tmp_path / "re", Mode.EVIDENCE, evidence=old.folder.path)  # re-evaluated elsewhere
    assert read_pairs(again) == read_pairs(ev.folder)


def test_a_retest_carries_an_older_runs_one_pairs_json_by_its_signed_digest(
    measured: tuple[Evaluation, Counter[str]], tmp_path: Path
) -> None:
    ev = measured[0]
    old = _copy(ev, tmp_path, _old_layout)
    path = old.folder.pairs_path
    signed = {"evidence/multinode/pairs.json": hashlib.sha256(path.read_bytes()).hexdigest()}
    target = RunFolder(tmp_path / "retest")
    index = carry_pairs(old.folder, "r", signed, ev.spec, target, NODES[:3])
    assert index is not None
    assert [(f.file, f.source, f.sha256) for f in index.files] == [("carried-0.json", *next(iter(signed.items())))]
    assert (target.pairs_path.parent / "carried-0.json").read_bytes() == path.read_bytes()


def _edit(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(multinode: Path) -> None:
        doc = json.loads((multinode / name).read_text())
        change(doc)
        (multinode / name).write_text(json.dumps(doc))

    return edit


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda m: (m / ROUNDS[1]).unlink(), "pairs-0002.json is missing: the rounds of the fabric stage have a gap"),
        (_edit(ROUNDS[1], lambda d: d.update(round=3)), "it says round 3 of 3; its name says round 2"),
        (
            _edit(ROUNDS[2], lambda d: d.update(rounds=4)),
            "it says the stage ran 4 rounds, the first round's document 3",
        ),
        (lambda m: shutil.copyfile(m / ROUNDS[0], m / "pairs.json"), "a run writes its pairs in one layout, not both"),
        (_edit(ROUNDS[0], lambda d: d.pop("round")), "it says round None of 3; its name says round 1"),
    ],
    ids=["gap", "renumbered", "rounds", "both-layouts", "no-round"],
)
def test_a_round_document_that_is_not_the_stages_is_an_error_never_a_pass(
    measured: tuple[Evaluation, Counter[str]], tmp_path: Path, change: Callable[[Path], None], said: str
) -> None:
    """Every check that reads the pairs raises (an error in the evaluation: pytest/outcomes.py), and the evidence
    re-evaluated elsewhere (`--evidence`) is refused with the file named."""
    altered = _copy(measured[0], tmp_path, change)
    for key in (
        CheckKey("fabric.rdma_bw", NODES[0], None, rail_detail(0)),
        CheckKey("straggler.nccl.all_reduce.multinode", NODES[0]),
    ):
        with pytest.raises(EvidenceError, match=said):
            altered.decide(key)
    with pytest.raises(EvidenceError, match=said):
        prepare(altered.spec, tmp_path / "re", Mode.EVIDENCE, evidence=altered.folder.path)


def test_the_last_rounds_missing_leave_their_pairs_missing(
    measured: tuple[Evaluation, Counter[str]], tmp_path: Path
) -> None:
    """A stage stopped after two of its three rounds (or its last document removed): every node misses a pair on
    every rail, an error naming it."""
    stopped = _copy(measured[0], tmp_path, lambda m: (m / ROUNDS[2]).unlink())
    assert len(read_pairs(stopped.folder).pairs) == 4  # type: ignore[union-attr]
    for node in NODES:
        for rail in (0, 1):
            found = stopped.decide(CheckKey("fabric.rdma_bw", node, None, rail_detail(rail)))
            assert found.status is CheckStatus.ERROR
            assert "no pair with" in found.message, found


def test_a_round_document_keeps_the_network_channels_and_leaves_out_defaults(
    measured: tuple[Evaluation, Counter[str]], tmp_path: Path
) -> None:
    """A pair's NCCL lines inside a node (P2P, SHM) are no evidence of its fabric (the pool's all-reduce keeps
    them); fields at their default are left out and read back as they were."""
    pairs = read_pairs(measured[0].folder)
    assert pairs is not None
    pair = pairs.pairs[0]
    assert pair.transport is not None
    inside = NcclChannel(channel=0, src_rank=0, src_dev=0, dst_rank=1, dst_dev=1, transport="P2P/IPC")
    with_p2p = pair.model_copy(
        update={"transport": pair.transport.model_copy(update={"channels": [inside, *pair.transport.channels]})}
    )
    path = write_round(tmp_path, 1, 1, [with_p2p])
    text = path.read_text()
    assert text.startswith('{"schema":"gpucert.io/evidence/v1",')
    assert "P2P/IPC" not in text
    assert '"errors":[]' not in text
    assert '"proxy_rank":null' not in text
    back = evidence.read_fabric_pairs(path)
    assert back is not None
    assert back.pairs == [pair]
    assert (back.round, back.rounds) == (1, 1)


def test_the_rules_read_an_index_of_numbers_not_the_pairs_models(measured: tuple[Evaluation, Counter[str]]) -> None:
    index = measured[0].pairs_index
    assert index is not None
    assert (len(index.pairs), len(index.rdma)) == (6, 12)
    rows: list[Any] = [*index.pairs, *index.rdma]
    for row in rows:
        for name in row.__slots__:
            assert not isinstance(getattr(row, name), BaseModel), (name, row)
    assert {r.median is not None and r.problem is None for r in index.rdma} == {True}
