"""A re-test's fabric stage measures only the pairs with a node measured again (issue 28: a re-test pays for what it
re-measures), carries the others' pairs with their signed digests, and says what a full re-evaluation says.

A 10-node pool with two rails, in two racks: gpu-node-3's rail 1 port trained down fails the first run; repaired,
the re-test measures gpu-node-3 again against 8 carried peers (8 pairs in 8 rounds, not 45 in 9) and carries the
36 pairs of the nine others from the first run. The first run's pairs of gpu-node-3 (slow on rail 1) are in the
carried copy too: had they been carried, they would be judged twice. A pair left out of a re-test's schedule is an
error: tests/unit/test_fabric_schedule.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import main as cli

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


def _pairs(path: Path) -> list[tuple[str, ...]]:
    return [tuple(p["nodes"]) for p in json.loads(path.read_text())["pairs"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("fabric-retest")
    first = _write(tmp, "first", [{"kind": "port-rate", "node": "gpu-node-3", "rail": 1, "gbps": 200}])
    repaired = _write(tmp, "repaired", [])
    assert cli.main(["keygen", str(tmp / "keys")]) == 0
    key = str(tmp / "keys" / "gpucert.key")
    reports = tmp / "reports"
    run1 = _run(reports, "certify", str(first), "--sign-key", key, code=1)
    run2 = _run(reports, "certify", str(repaired), "--sign-key", key, "--retest", str(run1), code=0)
    return tmp, run1, run2


def test_a_retest_measures_only_the_pairs_of_the_node_measured_again(runs: tuple[Path, Path, Path]) -> None:
    _, run1, run2 = runs
    assert ("fabric.port", "gpu-node-3", "fail") in {
        (f["check"], f["node"], f["status"]) for f in _verdict(run1)["findings"]
    }
    assert len(_pairs(run1 / "evidence/multinode/pairs.json")) == NODES * (NODES - 1) // 2
    measured = _pairs(run2 / "evidence/multinode/pairs.json")
    assert len(measured) == 8
    assert all("gpu-node-3" in p for p in measured)
    assert len({n for p in measured for n in p}) == 9
    index = json.loads((run2 / "evidence/multinode/carried.json").read_text())
    assert "gpu-node-3" not in index["nodes"]
    assert len(index["nodes"]) == NODES - 1
    retest = _verdict(run2)
    assert retest["result"] == "pass"
    assert set(retest["retest"]["measured"]) == {"gpu-node-3"}


def test_the_retest_says_what_re_evaluating_its_evidence_says(runs: tuple[Path, Path, Path]) -> None:
    tmp, _, run2 = runs
    plain = tmp / "plain"  # every check an item: the same evidence without the re-test's record
    shutil.copytree(run2 / "evidence", plain / "evidence")
    for name in ("inventory.json", "stack.json"):
        shutil.copyfile(run2 / name, plain / name)
    run3 = _run(tmp / "reports", "evaluate", str(tmp / "repaired.yaml"), "--evidence", str(plain / "evidence"), code=0)
    assert "retest" not in _verdict(run3)
    assert judged(_verdict(run2)) == judged(_verdict(run3))


def test_verify_refuses_a_carried_pairs_document_that_is_not_the_one_signed(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Even signed again by the re-test's own key: the carried copy must be what the source run signed."""
    tmp, _, run2 = runs
    keys = str(tmp / "keys" / "gpucert.pub")
    assert cli.main(["verify", str(run2), "--key", keys]) == 0
    assert "carried evidence: 9 nodes and 1 of their fabric pairs documents" in capsys.readouterr().out
    altered = tmp / "altered"
    shutil.copytree(run2, altered)
    copy = altered / "evidence/multinode/carried-0.json"
    copy.write_text(copy.read_text().replace('"gpu-node-1"', '"gpu-node-1" ', 1))
    (altered / "certificate.intoto.json").unlink()
    assert cli.main(["sign", str(altered), "--key", str(tmp / "keys" / "gpucert.key")]) == 0
    capsys.readouterr()
    assert cli.main(["verify", str(altered), "--key", keys]) == 1
    said = capsys.readouterr()
    assert "carried-0.json is not the pairs document run" in said.out + said.err
