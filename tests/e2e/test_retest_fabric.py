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
from gpucert.plan.carried_pairs import carried_nodes, read_pairs
from gpucert.plan.pairs_files import pairs_files
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest

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


def test_the_retest_says_what_re_evaluating_its_folder_says(runs: Runs) -> None:
    tmp, _, run2, _ = runs
    again = _run(tmp / "reports", "evaluate", str(tmp / "second.yaml"), "--evidence", str(run2), code=1)
    assert _verdict(again)["retest"] == _verdict(run2)["retest"]
    assert judged(_verdict(run2)) == judged(_verdict(again))


def test_carried_pairs_without_their_retest_record_are_refused(runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    """carried.json says which nodes' pairs stand; only the re-test's record can bear it out (below), so evidence
    holding carried pairs without it is refused, naming the file, not judged to a schedule it may have made up."""
    tmp, _, run2, _ = runs
    plain = tmp / "plain"
    shutil.copytree(run2 / "evidence", plain / "evidence")
    for name in ("inventory.json", "stack.json"):
        shutil.copyfile(run2 / name, plain / name)
    capsys.readouterr()
    args = ["evaluate", str(tmp / "second.yaml"), "--evidence", str(plain / "evidence"), "-q"]
    assert cli.main([*args, "--reports", str(tmp / "refused")]) == 2
    said = capsys.readouterr().err
    assert f"{plain}/evidence/multinode/carried.json: carried pairs belong to a re-test" in said
    assert "no re-test record" in said
    assert not _folders(tmp / "refused")


def _with_carried(runs: Runs, run: Path, node: str, *, drop_fresh: bool = False) -> Path:
    """A copy of a re-test whose carried.json names `node` too (and, with `drop_fresh`, without the pairs the
    re-test measured for it)."""
    copy = runs[0] / f"carried-{len(list(runs[0].glob('carried-*')))}"
    shutil.copytree(run, copy)
    index = copy / "evidence/multinode/carried.json"
    index.write_text(_index_with(node)(index.read_text()))
    for path in pairs_files(copy / "evidence/multinode") if drop_fresh else []:
        doc = json.loads(path.read_text())
        doc["pairs"] = [p for p in doc["pairs"] if node not in p["nodes"]]
        path.write_text(json.dumps(doc))
    return copy


@pytest.mark.parametrize("which", [2, 3], ids=["measured-again", "measured-since"])
def test_carried_pairs_stand_only_for_nodes_the_retest_record_carried(runs: Runs, which: int) -> None:
    """gpu-node-3, its port down in the first run, was measured again (and repaired) in the first re-test; the
    second carried its evidence from there, after the first run measured the pairs it carries. Named in carried.json
    either way, its first-run pairs are not its pairs: only the 8 its re-test measured are."""
    folder = RunFolder(_with_carried(runs, runs[which], "gpu-node-3"))
    held = carried_nodes(folder)
    assert held == {f"gpu-node-{i}" for i in range(1, NODES + 1)} - {"gpu-node-3", "gpu-node-6"}
    pairs = read_pairs(folder)
    assert pairs is not None
    assert len([p for p in pairs.pairs if "gpu-node-3" in p.nodes]) == 8


def test_a_node_carried_json_names_alone_is_held_to_the_pairs_its_retest_measured(runs: Runs) -> None:
    """The second re-test with gpu-node-3 in carried.json and its 8 fresh pairs gone: its first-run pairs do not
    stand in for them (they would fill the schedule of a carried node); each rail of gpu-node-3 is an error."""
    tmp, _, _, run3 = runs
    altered = _with_carried(runs, run3, "gpu-node-3", drop_fresh=True)
    again = _run(tmp / "reports", "evaluate", str(tmp / "third.yaml"), "--evidence", str(altered), code=1)
    rails = [f for f in _verdict(again)["findings"] if f["node"] == "gpu-node-3" and f["check"] == "fabric.rdma_bw"]
    assert [(f["status"], "pairs with 0 carried nodes" in f["message"]) for f in rails] == [("error", True)] * 2


def _edit(runs: Runs, name: str, path: str, change: Callable[[str], str]) -> Path:
    """A copy of the chained re-test with one file changed and signed again by the re-test's own key."""
    tmp, _, _, run3 = runs
    altered = tmp / name
    shutil.copytree(run3, altered)
    (altered / path).write_text(change((altered / path).read_text()))
    (altered / "certificate.intoto.json").unlink()
    # `gpucert sign` refuses it: its carried files are not what the source signed (or what the record names)
    assert cli.main(["sign", str(altered), "--key", str(tmp / "keys" / "gpucert.key")]) == 2
    assert not (altered / "certificate.intoto.json").exists()
    # signed as a gpucert that did not check them signed it: verify must still catch the carried pairs
    attest.sign_run(altered, tmp / "keys" / "gpucert.key", rederive=False)
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


def test_verify_refuses_carried_pairs_without_a_retest_record(runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    """The re-test made a plain certification (its record gone, run.json's mode changed) and signed again by the
    re-test's own key: nothing bears the carried pairs out, and `verify` says so (it checked carried evidence only
    against a re-test record before)."""
    tmp = runs[0]
    altered = tmp / "unrecorded"
    shutil.copytree(runs[3], altered)
    (altered / "run.json").write_text((altered / "run.json").read_text().replace('"retest"', '"measure"'))
    shutil.rmtree(altered / "retest")
    (altered / "certificate.intoto.json").unlink()
    # `gpucert sign` refuses it (carried pairs of no re-test: exit 2, before deciding anything); signed as a gpucert
    # that checked neither signed it, verify's own carried check must catch it
    assert cli.main(["sign", str(altered), "--key", str(tmp / "keys" / "gpucert.key")]) == 2
    assert "carried pairs belong to a re-test" in " ".join(capsys.readouterr().out.split())
    attest.sign_run(altered, tmp / "keys" / "gpucert.key", rederive=False)
    capsys.readouterr()
    assert cli.main(["verify", str(altered), "--key", str(tmp / "keys" / "gpucert.pub")]) == 1
    out = capsys.readouterr()
    assert "carried.json: carried pairs belong to a re-test, and this run has no re-test record" in out.out + out.err


def test_a_run_written_before_with_one_pairs_json_verifies_and_is_carried(runs: Runs) -> None:
    """The first run as a run written before a document per round kept its pairs (one pairs.json), signed as such:
    it verifies, and a re-test of it carries that one document by its signed digest and says what it said."""
    tmp, run1, _, _ = runs
    old = tmp / "old-layout"
    shutil.copytree(run1, old)
    multinode = old / "evidence/multinode"
    pairs = [p for f in pairs_files(multinode) for p in json.loads(f.read_text())["pairs"]]
    for f in pairs_files(multinode):
        f.unlink()
    (multinode / "pairs.json").write_text(json.dumps({"schema": "gpucert.io/evidence/v1", "pairs": pairs}))
    (old / "certificate.intoto.json").unlink()
    key = str(tmp / "keys" / "gpucert.key")
    assert cli.main(["sign", str(old), "--key", key]) == 0
    assert cli.main(["verify", str(old), "--key", str(tmp / "keys" / "gpucert.pub")]) == 0
    retest = _run(tmp / "reports", "certify", str(tmp / "second.yaml"), "--sign-key", key, "--retest", str(old), code=1)
    index = json.loads((retest / "evidence/multinode/carried.json").read_text())
    assert [f["source"] for f in index["files"]] == ["evidence/multinode/pairs.json"]
    assert (retest / "evidence/multinode/carried-0.json").read_bytes() == (multinode / "pairs.json").read_bytes()
    assert _failed(retest) == {("fabric.port", "gpu-node-6", "fail")}


def test_a_failed_uplink_between_racks_is_measured_again_in_full(tmp_path: Path) -> None:
    """The source failed the fabric between two racks (an uplink at 60%): that finding rests on pairs of nodes a
    re-test carries, so the re-test carries no pairs and measures every pair again; once the uplink is repaired it
    passes (a carried pre-repair pair would have failed it for good: sweep)."""
    link = {"kind": "rack-link", "node": "gpu-node-1", "peer": "gpu-node-6", "factor": 0.6}
    first = _write(tmp_path, "uplink", [link])
    repaired = _write(tmp_path, "repaired", [])
    assert cli.main(["keygen", str(tmp_path / "keys")]) == 0
    key = str(tmp_path / "keys" / "gpucert.key")
    run1 = _run(tmp_path / "reports", "certify", str(first), "--sign-key", key, code=1)
    assert any(f["check"].startswith("fabric.") and f["node"] is None for f in _verdict(run1)["findings"])
    run2 = _run(tmp_path / "reports", "certify", str(repaired), "--sign-key", key, "--retest", str(run1), code=0)
    assert len(_pairs(run2 / "evidence/multinode")) == NODES * (NODES - 1) // 2
    assert not (run2 / "evidence/multinode/carried.json").exists()
