"""A re-test given hostile input (hostile sweep of 93f6c9a, items 6, 7 and 8): its run folder inside the signed
source, a spec whose probes differ from the source's, a node gone from the fleet since the source run. One signed
source run of a 3 x 2 fleet (health and memory only) serves every case."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli.main import main

from .conftest import assert_round_trip, fleet_doc, spec_doc


def _spec(folder: Path, name: str, *, nodes: int = 3, probes: tuple[str, ...] = ("health", "memory")) -> Path:
    doc = spec_doc(probes=list(probes))
    doc["certify"].pop("multinode")
    doc["target"]["fleet"] = f"fleet-{nodes}.yaml"
    doc["expect"].update(nodes=nodes, gpusPerNode=2)
    (folder / f"fleet-{nodes}.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=nodes, gpus=2)))
    (folder / name).write_text(yaml.safe_dump(doc))
    return folder / name


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The project folder and the signed source run in it."""
    work = tmp_path_factory.mktemp("retest-sweep")
    assert main(["keygen", str(work / "keys")]) == 0
    spec = _spec(work, "spec.yaml")
    key = str(work / "keys" / "gpucert.key")
    assert main(["certify", str(spec), "--reports", str(work / "reports"), "--sign-key", key, "-q"]) == 0
    (run,) = [p for p in (work / "reports").iterdir() if not p.name.startswith(".")]
    return work, run


def _retest(work: Path, run: Path, spec: Path, reports: Path, capsys: Any) -> tuple[int, str]:
    capsys.readouterr()
    key = str(work / "keys" / "gpucert.key")
    code = main(["certify", str(spec), "--retest", str(run), "--reports", str(reports), "--sign-key", key, "-q"])
    return code, capsys.readouterr().err


def test_a_retest_into_its_own_source_is_refused(source: tuple[Path, Path], capsys: Any) -> None:
    """`--retest src/a --reports src/a` wrote the new run into the signed source, which then failed `verify`."""
    work, run = source
    code, err = _retest(work, run, work / "spec.yaml", run, capsys)
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("gpucert: error: --reports: "), line
    assert "is inside the re-test's source run" in line
    assert main(["verify", str(run), "--key", str(work / "keys" / "gpucert.pub")]) == 0
    code, err = _retest(work, run, work / "spec.yaml", run / "evidence" / "deeper", capsys)
    assert code == 2, err
    assert not (run / "evidence" / "deeper").exists()


def test_a_retest_under_other_probes_names_them_as_written(source: tuple[Path, Path], capsys: Any) -> None:
    """The probes were said as Python's enum reprs (certify.probes [<Probe.COMPUTE: 'compute'>, ...])."""
    work, run = source
    spec = _spec(work, "spec-health.yaml", probes=("health",))
    code, err = _retest(work, run, spec, work / "other", capsys)
    assert code == 2, err
    assert "the run was measured with certify.probes [health, memory], the spec says [health]" in err
    assert "<Probe" not in err


def test_a_node_gone_from_the_fleet_is_recorded_and_shown(source: tuple[Path, Path], capsys: Any) -> None:
    """A node removed between the source run and the re-test (expect.nodes lowered): the re-test passed and its
    verdict never named the node it no longer speaks for."""
    work, run = source
    spec = _spec(work, "spec-2.yaml", nodes=2)
    code, err = _retest(work, run, spec, work / "two", capsys)
    assert code == 0, err
    (retest,) = [p for p in (work / "two").iterdir() if not p.name.startswith(".")]
    verdict = json.loads((retest / "verdict.json").read_text())
    assert verdict["retest"]["absent"] == ["gpu-node-3"]
    assert json.loads((retest / "retest" / "record.json").read_text())["absent"] == ["gpu-node-3"]
    assert "not in the fleet now, so not re-tested: gpu-node-3" in (retest / "report.html").read_text()
    statement = json.loads(base64.b64decode(json.loads((retest / "certificate.intoto.json").read_text())["payload"]))
    assert statement["predicate"]["retest"]["absent"] == ["gpu-node-3"]  # what the certificate signs says it too
    assert_round_trip(retest)
