"""The `gpucert` command as a user runs it: exit codes, one-line errors, the demo's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import gpucert

ROOT = Path(__file__).resolve().parents[2]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    ("target", "old", "new", "expect"),
    [
        ("examples/demo.yaml", "gpusPerNode: 8", "gpusPerNode: 8, gpuCount: 8", "expect.gpuCount: unknown key"),
        ("examples/demo.yaml", "level: 2", "level: two", "certify.dcgm.level:"),
        ("examples/demo.yaml", "fleets/h100-4x8-faulty.yaml", "fleets/nope.yaml", "nope.yaml: file not found"),
        ("examples/demo.yaml", "kind: ClusterSpec", "kind: ClusterSpec\n  bad: [", "YAML syntax error"),
        ("examples/fleets/h100-4x8-faulty.yaml", "seed: 7", "seed: 7\nsede: 8", "sede: unknown key"),
        ("examples/fleets/h100-4x8-faulty.yaml", "gpu: 3,", "gpu: three,", "faults[0].gpu:"),
    ],
)
def test_malformed_input_exits_2_with_one_line(project: Path, target: str, old: str, new: str, expect: str) -> None:
    edit(project / target, old, new)
    r = gpucert("certify", "examples/demo.yaml", cwd=project)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert expect in lines[0]
    assert Path(target).name in lines[0] or "nope.yaml" in lines[0]
    assert "Traceback" not in r.stdout + r.stderr


def test_certify_exit_codes_and_reports(project: Path) -> None:
    r = gpucert("certify", "examples/clean.yaml", "-q", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
    r = gpucert("certify", "examples/demo.yaml", "-q", "--reports", "out", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    runs = list((project / "out").iterdir())
    assert len(runs) == 1
    run = runs[0]
    for name in ("report.html", "junit.xml", "verdict.json", "inventory.json", "stack.json"):
        assert (run / name).is_file(), name
    for name in ("report.html", "junit.xml", "verdict.json", "allure-results"):
        assert f"out/{run.name}/{name}" in r.stdout, name
    assert sorted(p.name for p in (run / "evidence").iterdir()) == [
        *(f"gpu-node-{i}.json" for i in range(1, 5)),
        "multinode",
    ]
    fabric = json.loads((run / "evidence" / "multinode" / "default" / "nccl.json").read_text())
    assert fabric["nodes"] == [f"gpu-node-{i}" for i in range(1, 5)]
    assert fabric["nccl"]["ranks"] == 32
    allure = run / "allure-results"
    assert {"environment.properties", "categories.json", "executor.json"} <= {p.name for p in allure.iterdir()}
    results = [json.loads(p.read_text()) for p in allure.glob("*-result.json")]
    failed = [x for x in results if x["status"] == "failed"]
    assert {(x["labels"][1]["value"], x["labels"][2]["value"]) for x in failed} >= {("health.ecc", "gpu-node-1")}
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["schema"] == "gpucert.io/verdict/v3"
    assert verdict["result"] == "fail"
    assert len(verdict["findings"]) == 10
    found = {(f["check"], f["node"], f["gpu"]) for f in verdict["findings"]}
    # an intermittent GPU (its median hides it) and a node behind the others as a whole (one finding, not eight)
    assert {("stability.compute.gemm.fp16", "gpu-node-3", 5), ("straggler.pcie.h2d", "gpu-node-4", None)} <= found
    html = (run / "report.html").read_text()
    assert "gpucert-nodes" in html
    assert "Certification FAIL" in html


def test_evaluate_recorded_evidence_gives_the_same_verdict(project: Path) -> None:
    gpucert("certify", "examples/demo.yaml", "-q", "--reports", "first", cwd=project)
    (first,) = (project / "first").iterdir()
    r = gpucert(
        "evaluate", "examples/demo.yaml", "--evidence", str(first / "evidence"), "-q", "--reports", "again", cwd=project
    )
    assert r.returncode == 1, r.stdout + r.stderr
    (again,) = (project / "again").iterdir()
    a, b = (json.loads((d / "verdict.json").read_text()) for d in (first, again))
    assert a["findings"] == b["findings"]
    assert a["summary"] == b["summary"]
    assert a["fleetAgainstSku"] == b["fleetAgainstSku"]
    assert a["undecided"] == b["undecided"]
    assert a["coverage"]["skips"] == b["coverage"]["skips"]  # the slow node's eight GPUs skip with its finding


def test_evaluate_rejects_a_file(project: Path) -> None:
    r = gpucert("evaluate", "examples/demo.yaml", "--evidence", "examples/demo.yaml", cwd=project)
    assert r.returncode == 2
    assert "argument --evidence: 'examples/demo.yaml' is a file, not a folder" in r.stderr


def test_configure_only_needs_no_measurement(project: Path) -> None:
    r = gpucert("configure", "examples/demo.yaml", "-q", "--reports", "cfg", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    (run,) = (project / "cfg").iterdir()
    assert not (run / "evidence").exists()
    checks = {f["check"] for f in json.loads((run / "verdict.json").read_text())["findings"]}
    assert checks == {"stack.version", "stack.ordering"}


def test_schema_writes_json_schemas(tmp_path: Path) -> None:
    r = gpucert("schema", "--out", "schemas", cwd=tmp_path)
    assert r.returncode == 0
    names = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert names == [
        "clusterspec.schema.json",
        "evidence.schema.json",
        "fabricevidence.schema.json",
        "gpubaseline.schema.json",
        "nodebaseline.schema.json",
        "simulatedfleet.schema.json",
        "waivers.schema.json",
    ]
