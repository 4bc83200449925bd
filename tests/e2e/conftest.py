"""Run the real suites through pytester on simulated fleets written by each test."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

# imported before pytester snapshots sys.modules: numpy's C core cannot be loaded twice in one process
import gpucert.measure.targets.simulated

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"
BASELINES = ROOT / "baselines" / "gpus"

FindingKey = tuple[str, str | None, int | None]
GPUCERT = [sys.executable, "-m", "gpucert.cli.main"]


def gpucert(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `gpucert` command as a user runs it, in its own process."""
    return subprocess.run([*GPUCERT, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working folder with copies of the examples and baselines, free to edit."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copytree(ROOT / "baselines", tmp_path / "baselines")
    return tmp_path


def spec_doc(**certify: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    doc["target"]["fleet"] = "fleet.yaml"
    doc["certify"]["baseline"] = str(BASELINES / "H100-SXM5-80GB.yaml")
    doc["certify"].update(certify)
    return doc


def fleet_doc(
    faults: list[dict[str, Any]] | None = None,
    *,
    seed: int = 7,
    nodes: int = 4,
    cv: float = 0.01,
    gpus: int = 8,
    noise: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "test-fleet"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "namePrefix": "gpu-node-", "gpusPerNode": gpus},
        "noise": noise or {"cv": cv},
        "seed": seed,
        "faults": faults or [],
        **extra,
    }


def assert_round_trip(run_dir: Path) -> None:
    """Every verdict the e2e runs write (and their run.json, and a re-test's record) parses into its typed model and
    serialises back to the same bytes: the model holds every key gpucert writes, in its order, with its values'
    types (3350 stays 3350, 3350.0 stays 3350.0)."""
    from gpucert.plan.records import RetestRecord, RunInfo, parse_record
    from gpucert.report.verdict_model import Verdict

    for name, model in (("verdict.json", Verdict), ("run.json", RunInfo), ("retest/record.json", RetestRecord)):
        path = run_dir / name
        if path.is_file():
            written = path.read_text()
            typed = parse_record(model, json.loads(written), path, name)
            assert json.dumps(typed.to_json(), indent=1) + "\n" == written, name


@dataclass
class Certification:
    result: pytest.RunResult
    run_dir: Path
    verdict: dict[str, Any]

    @property
    def findings(self) -> set[FindingKey]:
        return {(f["check"], f["node"], f["gpu"]) for f in self.verdict["findings"]}


@pytest.fixture
def certify(pytester: pytest.Pytester):
    def run(
        fleet: dict[str, Any],
        *args: str,
        spec: dict[str, Any] | None = None,
        suites: tuple[str, ...] = ("configure", "certify"),
    ) -> Certification:
        (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
        (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec or spec_doc()))
        reports = pytester.path / "reports"
        result = pytester.runpytest(
            *(str(SUITES / s) for s in suites),
            "--spec",
            str(pytester.path / "spec.yaml"),
            "--reports",
            str(reports),
            "-p",
            "no:cacheprovider",
            *args,
        )
        runs = sorted(reports.iterdir())
        assert len(runs) == 1, f"expected exactly one run folder, got {runs}"
        verdict = json.loads((runs[0] / "verdict.json").read_text())
        assert_round_trip(runs[0])
        return Certification(result, runs[0], verdict)

    return run
