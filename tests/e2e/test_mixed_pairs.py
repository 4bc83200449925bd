"""A spec mixing a pool with a fabric section and one without (examples/pools.yaml, `fabric` on `train` alone):
the fabric pool's pairs are its tournament (plan/pairs.py), the other pool's the neighbours on its ring
(certify.multinode.pairs), both measured in one run, each held to its own schedule. Before, any fabric section
scheduled the tournament alone: the other pool's nodes were in no pair and could never certify.

`infer` has 4 nodes (ring h200-1..4: pairs 1 + 2, 2 + 3, 3 + 4, 4 + 1). The first run fails h200-2 (an uncorrected
ECC error); repaired, the re-test measures it again with its neighbours' pairs (1 + 2, 2 + 3), carries 3 + 4 and
4 + 1 and the train tournament (every train node carried), and passes."""

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

from .test_fabric_pools import TRAIN_HCAS, two_fabrics_fleet, two_fabrics_spec
from .test_retest_fabric import _pairs, _run, _verdict

PAIRS = "straggler.nccl.all_reduce.multinode"
ECC = {"kind": "ecc", "node": "h200-2", "gpu": 1, "uncorrected": 1}


def _write(tmp: Path, name: str, faults: list[dict[str, Any]]) -> Path:
    fleet = two_fabrics_fleet(faults)
    fleet["pools"][1]["nodes"]["count"] = 4
    (tmp / f"{name}.fleet.yaml").write_text(yaml.safe_dump(fleet))
    spec = two_fabrics_spec()
    spec["target"]["fleet"] = f"{name}.fleet.yaml"
    spec["certify"]["multinode"] = {"pairs": True}
    del spec["pools"][1]["fabric"]  # infer: no fabric section, its pairs are its ring's neighbours
    spec["pools"][1]["expect"]["nodes"] = 4
    assert spec["pools"][0]["fabric"]["rails"]["hcas"] == TRAIN_HCAS
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("mixed-pairs")
    first, second = _write(tmp, "first", [ECC]), _write(tmp, "second", [])
    assert cli.main(["keygen", str(tmp / "keys")]) == 0
    key = str(tmp / "keys" / "gpucert.key")
    run1 = _run(tmp / "reports", "certify", str(first), "--sign-key", key, code=1)
    run2 = _run(tmp / "reports", "certify", str(second), "--sign-key", key, "--retest", str(run1), code=0)
    return tmp, run1, run2


def _set(pairs: list[tuple[str, ...]]) -> set[frozenset[str]]:
    return {frozenset(p) for p in pairs}


RING = {frozenset((f"h200-{a}", f"h200-{b}")) for a, b in ((1, 2), (2, 3), (3, 4), (4, 1))}
TOURNAMENT = {frozenset((f"h100-{a}", f"h100-{b}")) for a in range(1, 5) for b in range(a + 1, 5)}


def test_a_full_run_measures_both_pools_pairs_and_passes_the_ring_pool(runs: tuple[Path, Path, Path]) -> None:
    _, run1, _ = runs
    assert _set(_pairs(run1 / "evidence/multinode")) == RING | TOURNAMENT
    verdict = _verdict(run1)
    assert {(f["check"], f["node"]) for f in verdict["findings"] if f["status"] != "pass"} >= {
        ("gpu.ecc", "h200-2")
    } or verdict["nodes"]["h200-2"]["result"] == "fail"
    assert not [f for f in verdict["findings"] if f["check"] == PAIRS], verdict["findings"]
    for node in ("h200-1", "h200-3", "h200-4", "h100-1", "h100-4"):
        assert verdict["nodes"][node]["result"] == "pass", (node, verdict["findings"])


def test_a_retest_carries_the_ring_pools_carried_pairs_and_measures_the_rest(runs: tuple[Path, Path, Path]) -> None:
    _, _, run2 = runs
    assert set(_verdict(run2)["retest"]["measured"]) == {"h200-2"}
    measured = _set(_pairs(run2 / "evidence/multinode"))
    assert measured == {frozenset(("h200-1", "h200-2")), frozenset(("h200-2", "h200-3"))}
    index = json.loads((run2 / "evidence/multinode/carried.json").read_text())
    assert set(index["nodes"]) == {"h100-1", "h100-2", "h100-3", "h100-4", "h200-1", "h200-3", "h200-4"}
    every = read_pairs(RunFolder(run2))
    assert every is not None
    assert _set([tuple(p.nodes) for p in every.pairs]) == RING | TOURNAMENT
    assert len(every.pairs) == len(RING | TOURNAMENT)  # each pair once
    assert _verdict(run2)["nodes"]["h200-2"]["result"] == "pass"


def test_verify_passes_the_retest(runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    tmp, _, run2 = runs
    assert cli.main(["verify", str(run2), "--key", str(tmp / "keys" / "gpucert.pub")]) == 0, capsys.readouterr()


@pytest.mark.parametrize("which", ["full run", "re-test"])
def test_a_ring_pools_missing_neighbour_pair_is_an_error(
    runs: tuple[Path, Path, Path], tmp_path: Path, which: str
) -> None:
    """The ring pool's pairs are held to its ring though another pool has a fabric section (fail closed): a
    neighbour pair deleted from its round document makes both its nodes err, and the tournament's schedule check
    never counts the ring pool's pairs as stray (the train nodes keep passing)."""
    tmp, run1, run2 = runs
    copy = tmp_path / "copy"
    shutil.copytree(run1 if which == "full run" else run2, copy)
    gone = frozenset(("h200-1", "h200-2"))
    for path in pairs_files(copy / "evidence/multinode"):
        doc = json.loads(path.read_text())
        kept = [p for p in doc["pairs"] if frozenset(p["nodes"]) != gone]
        if len(kept) < len(doc["pairs"]):
            path.write_text(json.dumps({**doc, "pairs": kept}))
            break
    else:
        pytest.fail("no round document holds h200-1 + h200-2")
    spec = tmp / ("first.yaml" if which == "full run" else "second.yaml")
    again = _run(tmp_path / "reports", "evaluate", str(spec), "--evidence", str(copy), code=1)
    verdict = _verdict(again)
    found = {f["node"]: f for f in verdict["findings"] if f["check"] == PAIRS and f["status"] != "pass"}
    assert gone <= set(found), found  # h200-3, h200-4: 3 pairs are too few to tell a slow node (an error too)
    for node in gone:
        assert found[node]["status"] == "error", found[node]
        assert "on its ring was not measured" in found[node]["message"], found[node]
    for node in ("h100-1", "h100-2", "h100-3", "h100-4"):
        assert verdict["nodes"][node]["result"] == "pass", (node, verdict["findings"])


def test_a_retest_drawing_its_rings_otherwise_measures_every_pair_again(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The ring pool's carried pairs answer only rings drawn as the source drew them (acceptance/retest_pairs.py
    `carry_pairs`): another certify.multinode, though the fabric pool's declaration is unchanged, carries no pair."""
    tmp, run1, _ = runs
    other = _write(tmp_path, "other", [])
    doc = yaml.safe_load(other.read_text())
    doc["certify"]["multinode"] = {"pairs": True, "maxNodes": 4}
    other.write_text(yaml.safe_dump(doc))
    key = str(tmp / "keys" / "gpucert.key")
    run3 = _run(tmp_path / "reports", "certify", str(other), "--sign-key", key, "--retest", str(run1), code=0)
    assert not (run3 / "evidence/multinode/carried.json").exists()
    assert _set(_pairs(run3 / "evidence/multinode")) == RING | TOURNAMENT
