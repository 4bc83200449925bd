"""A re-test of a fleet whose pools have no fabric section (its pairs are the neighbours on the pool's ring:
certify.multinode.pairs) carries the pairs of two carried neighbours from its source and measures only the others
(issue 28: a re-test pays for what it re-measures), and says what re-evaluating its folder says.

Eight nodes on one ring. The first run fails gpu-node-3 (an uncorrected ECC error) and gpu-node-6 (unreachable: off
the ring, whose pairs there are 1 + 2, 2 + 3, 3 + 4, 4 + 5, 5 + 7, 7 + 8 and 8 + 1). Both repaired, they are
measured again; gpu-node-2 has gone unreachable since, so it is measured again too and leaves the ring. The re-test's
ring is 1, 3, 4, 5, 6, 7, 8: it measures gpu-node-3's and gpu-node-6's pairs, the pair of gpu-node-2's old
neighbours (1 + 3), and, since gpu-node-6 joined between them, 5's and 7's pairs (their carried 5 + 7 is no pair of
this ring); it carries 8 + 1, the one pair of two carried nodes whose neighbours did not change. A pair with a node
measured again is never carried."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import main as cli
from gpucert.plan.carried_pairs import read_pairs
from gpucert.plan.pairs_files import pairs_files
from gpucert.plan.runfolder import RunFolder

from .conftest import fleet_doc, spec_doc
from .test_retest_decided import judged
from .test_retest_fabric import _folders, _pairs, _run, _verdict

ECC = {"kind": "ecc", "node": "gpu-node-3", "gpu": 0, "uncorrected": 1}


def _write(tmp: Path, name: str, faults: list[dict[str, Any]]) -> Path:
    (tmp / f"{name}.fleet.yaml").write_text(yaml.safe_dump(fleet_doc(faults, nodes=8, gpus=2)))
    spec = spec_doc()
    spec["target"]["fleet"] = f"{name}.fleet.yaml"
    spec["expect"].update(nodes=8, gpusPerNode=2)
    assert "fabric" not in spec
    assert spec["certify"]["multinode"] == {"pairs": True}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("neighbours-retest")
    first = _write(tmp, "first", [ECC, {"kind": "unreachable", "node": "gpu-node-6"}])
    second = _write(tmp, "second", [{"kind": "unreachable", "node": "gpu-node-2"}])
    assert cli.main(["keygen", str(tmp / "keys")]) == 0
    key = str(tmp / "keys" / "gpucert.key")
    run1 = _run(tmp / "reports", "certify", str(first), "--sign-key", key, code=1)
    run2 = _run(tmp / "reports", "certify", str(second), "--sign-key", key, "--retest", str(run1), code=1)
    return tmp, run1, run2


def _names(pairs: list[tuple[str, ...]]) -> set[frozenset[int]]:
    return {frozenset(int(n.rsplit("-", 1)[1]) for n in p) for p in pairs}


def test_a_retest_carries_the_carried_neighbours_pairs_and_measures_the_rest(runs: tuple[Path, Path, Path]) -> None:
    _, run1, run2 = runs
    ring1 = [1, 2, 3, 4, 5, 7, 8]
    neighbours = zip(ring1, ring1[1:] + ring1[:1], strict=True)
    assert _names(_pairs(run1 / "evidence/multinode")) == {frozenset(p) for p in neighbours}
    assert set(_verdict(run2)["retest"]["measured"]) == {"gpu-node-2", "gpu-node-3", "gpu-node-6"}
    measured = _names(_pairs(run2 / "evidence/multinode"))
    assert measured == {frozenset(p) for p in ((1, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8))}
    index = json.loads((run2 / "evidence/multinode/carried.json").read_text())
    assert set(index["nodes"]) == {"gpu-node-1", "gpu-node-4", "gpu-node-8"}  # 5 and 7: gpu-node-6 came between
    every = read_pairs(RunFolder(run2))
    assert every is not None
    assert len(every.pairs) == 7  # the ring of the seven nodes that answered, each pair once
    carried = _names([tuple(p.nodes) for p in every.pairs]) - measured
    assert carried == {frozenset({8, 1})}


def test_the_retest_says_what_re_evaluating_its_folder_says(runs: tuple[Path, Path, Path]) -> None:
    tmp, _, run2 = runs
    retest = _verdict(run2)
    for node in (3, 6):  # repaired; judged on their fresh pairs and the carried one
        assert retest["nodes"][f"gpu-node-{node}"]["result"] == "pass"
    assert not [f for f in retest["findings"] if f["check"] == "straggler.nccl.all_reduce.multinode"]
    again = _run(tmp / "reports", "evaluate", str(tmp / "second.yaml"), "--evidence", str(run2), code=1)
    assert judged(_verdict(again)) == judged(retest)


def test_verify_passes_the_retest(runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    tmp, _, run2 = runs
    assert run2 in _folders(tmp / "reports")
    assert cli.main(["verify", str(run2), "--key", str(tmp / "keys" / "gpucert.pub")]) == 0, capsys.readouterr()


def _without_last_round(run: Path, dest: Path) -> tuple[Path, set[str]]:
    """A copy of `run` whose last round of pairs is gone (a stage stopped early, or the file deleted), and the
    nodes of that round's pairs."""
    copy = dest / run.name
    shutil.copytree(run, copy)
    last = pairs_files(copy / "evidence/multinode")[-1]
    lost = {n for p in json.loads(last.read_text())["pairs"] for n in p["nodes"]}
    last.unlink()
    return copy, lost


@pytest.mark.parametrize("which", ["full run", "re-test"])
def test_a_node_whose_ring_pair_is_missing_is_no_pass(
    runs: tuple[Path, Path, Path], tmp_path: Path, which: str
) -> None:
    """The neighbours' pairs are held to the ring: a node whose pair with a neighbour on its ring is neither measured
    nor carried (the stage's last round missing) errs, never passes on its other pair (fail closed). Without a
    fabric section nothing else holds the pairs to their schedule (evaluate/rules/fabric_schedule.py is the
    tournament's), and a re-test's pairs are carried and measured piecewise (plan/carried_pairs.py)."""
    tmp, run1, run2 = runs
    copy, lost = _without_last_round(run1 if which == "full run" else run2, tmp_path)
    spec = tmp / ("first.yaml" if which == "full run" else "second.yaml")
    again = _run(tmp_path / "reports", "evaluate", str(spec), "--evidence", str(copy), code=1)
    found = {f["node"]: f for f in _verdict(again)["findings"] if f["check"] == "straggler.nccl.all_reduce.multinode"}
    assert lost
    assert lost <= set(found), found
    for node in lost:
        assert found[node]["status"] == "error", found[node]
        assert "on its ring was not measured" in found[node]["message"], found[node]
