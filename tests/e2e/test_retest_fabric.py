"""A re-test's fabric stage measures only the pairs with a node measured again (issue 28: a re-test pays for what it
re-measures), carries the others' pairs with their signed digests, and says what a full re-evaluation says.

A 10-node pool with two rails, in two racks. The first run fails gpu-node-3 and gpu-node-6 (a rail's port trained
down on each). Only gpu-node-3 is repaired: the re-test measures both again, each against 8 carried peers (16 pairs
in 8 rounds, not 45 in 9), carries the 28 pairs of the eight others from the first run, and still fails gpu-node-6
on its port. The first run's pairs of the two (slow on their rail) are in the carried copy too: had they been
carried, they would be judged twice. gpu-node-6 repaired, a re-test of that re-test carries gpu-node-3's evidence
but measures its pairs again (it met 8 peers, not the pool), with gpu-node-6's. A pair left out of a re-test's
schedule is an error: tests/unit/test_fabric_schedule.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import main as cli
from gpucert.plan.pairs_files import pairs_files

from .conftest import BASELINES, ROOT, fleet_doc
from .test_retest_decided import judged

NODES = 10


def _write(tmp_path: Path, name: str, faults: list[dict[str, Any]]) -> Path:
    fleet = fleet_doc(faults, nodes=NODES)
    fleet["fabric"] = {"rails": 2, "racks": {"label": "example.com/rack", "size": 5}}
    (tmp_path / f"{name}.fleet.yaml").write_text(yaml.safe_dump(fleet))
    spec: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "fabric.yaml").read_text())
    spec["target"]["fleet"] = f"{name}.fleet.yaml"
    pool = spec["pools"][0]
    pool["expect"]["nodes"] = NODES
    pool["baseline"] = str(BASELINES / "H100-SXM5-80GB.yaml")
    pool["fabric"]["rails"]["count"] = 2
    pool["fabric"]["rackLabel"] = "example.com/rack"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _folders(reports: Path) -> set[Path]:
    return {p for p in reports.iterdir() if not p.name.startswith(".")} if reports.exists() else set()


def _run(reports: Path, *args: str, code: int) -> Path:
    before = _folders(reports)
    assert cli.main([*args, "-q", "--reports", str(reports)]) == code
    [run] = _folders(reports) - before
    return run


def _verdict(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "verdict.json").read_text())
    return data


def _pairs(multinode: Path) -> list[tuple[str, ...]]:
    """The pairs a run measured: those of its round documents."""
    return [tuple(p["nodes"]) for f in pairs_files(multinode) for p in json.loads(f.read_text())["pairs"]]


Runs = tuple[Path, Path, Path, Path]
PORT = {"kind": "port-rate", "rail": 1, "gbps": 200}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("fabric-retest")
    first = _write(tmp, "first", [dict(PORT, node="gpu-node-3"), dict(PORT, node="gpu-node-6")])
    second = _write(tmp, "second", [dict(PORT, node="gpu-node-6")])
    third = _write(tmp, "third", [])
    assert cli.main(["keygen", str(tmp / "keys")]) == 0
    key = str(tmp / "keys" / "gpucert.key")
    reports = tmp / "reports"
    run1 = _run(reports, "certify", str(first), "--sign-key", key, code=1)
    run2 = _run(reports, "certify", str(second), "--sign-key", key, "--retest", str(run1), code=1)
    run3 = _run(reports, "certify", str(third), "--sign-key", key, "--retest", str(run2), code=0)
    return tmp, run1, run2, run3


def _measured_pairs(run: Path, again: set[str]) -> None:
    measured = _pairs(run / "evidence/multinode")
    assert len(measured) == 8 * len(again)
    for node in again:
        peers = {n for p in measured if node in p for n in p} - {node}
        assert len(peers) == 8
        assert not peers & again  # against carried peers only
    index = json.loads((run / "evidence/multinode/carried.json").read_text())
    assert set(index["nodes"]) == {f"gpu-node-{i}" for i in range(1, NODES + 1)} - again


def _failed(run: Path) -> set[tuple[str, str, str]]:
    return {(f["check"], f["node"], f["status"]) for f in _verdict(run)["findings"]}


def test_a_retest_measures_only_the_pairs_of_the_nodes_measured_again(runs: Runs) -> None:
    _, run1, run2, _ = runs
    assert _failed(run1) == {("fabric.port", "gpu-node-3", "fail"), ("fabric.port", "gpu-node-6", "fail")}
    assert len(_pairs(run1 / "evidence/multinode")) == NODES * (NODES - 1) // 2
    _measured_pairs(run2, {"gpu-node-3", "gpu-node-6"})
    assert set(_verdict(run2)["retest"]["measured"]) == {"gpu-node-3", "gpu-node-6"}
    assert _failed(run2) == {("fabric.port", "gpu-node-6", "fail")}  # the fault not repaired, found again


def test_a_retest_of_a_retest_measures_again_the_pairs_its_source_measured_against_eight_peers(runs: Runs) -> None:
    _, run1, _, run3 = runs
    retest = _verdict(run3)
    assert retest["result"] == "pass"
    assert set(retest["retest"]["measured"]) == {"gpu-node-6"}
    assert "gpu-node-3" in retest["retest"]["carried"]  # its evidence carried, its pairs measured again
    _measured_pairs(run3, {"gpu-node-3", "gpu-node-6"})
    rounds = pairs_files(run1 / "evidence/multinode")  # the first run's pairs, carried twice, byte for byte
    carried = [run3 / f"evidence/multinode/carried-{i}.json" for i in range(len(rounds))]  # document by document
    assert [c.read_bytes() for c in carried] == [r.read_bytes() for r in rounds]
    assert not (run3 / f"evidence/multinode/carried-{len(rounds)}.json").exists()


def test_the_retest_says_what_re_evaluating_its_evidence_says(runs: Runs) -> None:
    tmp, _, run2, _ = runs
    plain = tmp / "plain"  # every check an item: the same evidence without the re-test's record
    shutil.copytree(run2 / "evidence", plain / "evidence")
    for name in ("inventory.json", "stack.json"):
        shutil.copyfile(run2 / name, plain / name)
    full = _run(tmp / "reports", "evaluate", str(tmp / "second.yaml"), "--evidence", str(plain / "evidence"), code=1)
    assert "retest" not in _verdict(full)
    assert judged(_verdict(run2)) == judged(_verdict(full))


def _edit(runs: Runs, name: str, path: str, change: Callable[[str], str]) -> Path:
    """A copy of the chained re-test with one file changed and signed again by the re-test's own key."""
    tmp, _, _, run3 = runs
    altered = tmp / name
    shutil.copytree(run3, altered)
    (altered / path).write_text(change((altered / path).read_text()))
    (altered / "certificate.intoto.json").unlink()
    assert cli.main(["sign", str(altered), "--key", str(tmp / "keys" / "gpucert.key")]) == 0
    return altered


def _index_with(node: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        doc = json.loads(text)
        doc["nodes"].append(node)
        return json.dumps(doc)

    return change


@pytest.mark.parametrize(
    ("path", "change", "said"),
    [
        (
            "evidence/multinode/carried-0.json",
            lambda t: t.replace('"gpu-node-1"', '"gpu-node-1" ', 1),
            "evidence/multinode/carried-0.json is not the pairs document run",
        ),
        (  # the first run's pairs of gpu-node-6, whose port failed there, brought back
            "evidence/multinode/carried.json",
            _index_with("gpu-node-6"),
            "the pairs of gpu-node-6 are carried, yet the re-test did not carry the node",
        ),
        (  # gpu-node-3 is carried, but was measured again (and repaired) after the first run measured its pairs
            "evidence/multinode/carried.json",
            _index_with("gpu-node-3"),
            "are carried for nodes measured again after them: gpu-node-3 (measured in",
        ),
    ],
    ids=["document-altered", "node-not-carried", "node-measured-since"],
)
def test_verify_refuses_carried_pairs_that_are_not_what_the_source_signed(
    runs: Runs, capsys: pytest.CaptureFixture[str], path: str, change: Callable[[str], str], said: str
) -> None:
    """Even signed again by the re-test's own key: the carried copy must be what the source run signed (in a
    re-test of a re-test: the source's own carried copy), for nodes the re-test carried."""
    keys = str(runs[0] / "keys" / "gpucert.pub")
    assert cli.main(["verify", str(runs[3]), "--key", keys]) == 0
    assert "carried evidence: 9 nodes and 9 of their fabric pairs documents" in capsys.readouterr().out
    altered = _edit(runs, f"altered-{len(list(runs[0].glob('altered-*')))}", path, change)
    capsys.readouterr()
    assert cli.main(["verify", str(altered), "--key", keys]) == 1
    out = capsys.readouterr()
    assert said in out.out + out.err
