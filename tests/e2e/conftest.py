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


OUTCOME = {"pass": "passed", "waived": "xfailed", "skip": "skipped", "fail": "failed", "error": "failed"}
RANK = ("pass", "waived", "skip", "fail", "error")


class ItemChecks:
    """Each test item's pytest outcome and the statuses of the checks it decided (one, or a per-GPU check's on each
    GPU of its node), as the session's reports carry them to the controller."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[str, list[str]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "gpucert", None)
        if data is not None:
            outcome = "xfailed" if report.skipped and hasattr(report, "wasxfail") else report.outcome
            self.items[report.nodeid] = (outcome, [c["finding"]["status"] for c in data["checks"]])

    def assert_agree(self, result: pytest.RunResult, verdict: dict[str, Any]) -> dict[str, int]:
        """Every item's outcome is the status that says most of its checks', the checks' statuses are the verdict's
        counts, and pytest's outcome line counts the items: returns those item counts."""
        checks: dict[str, int] = {}
        items: dict[str, int] = {}
        for nodeid, (outcome, statuses) in self.items.items():
            worst = max(statuses, key=RANK.index)
            assert outcome == OUTCOME[worst], (nodeid, outcome, statuses)
            items[outcome] = items.get(outcome, 0) + 1
            for status in statuses:
                checks[status] = checks.get(status, 0) + 1
        s = verdict["summary"]
        said = {"pass": s["passed"], "fail": s["failed"], "error": s["errors"], "skip": s["skipped"]}
        said["waived"] = s["waived"]
        assert checks == {k: v for k, v in said.items() if v}
        result.assert_outcomes(**items)
        return items


@dataclass
class Certification:
    result: pytest.RunResult
    run_dir: Path
    verdict: dict[str, Any]
    items: ItemChecks

    @property
    def findings(self) -> set[FindingKey]:
        return {(f["check"], f["node"], f["gpu"]) for f in self.verdict["findings"]}

    def items_agree(self) -> dict[str, int]:
        """pytest's outcomes agree with the verdict, item by item (ItemChecks.assert_agree): the item counts."""
        return self.items.assert_agree(self.result, self.verdict)


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
        items = ItemChecks()
        result = pytester.runpytest(
            *(str(SUITES / s) for s in suites),
            "--spec",
            str(pytester.path / "spec.yaml"),
            "--reports",
            str(reports),
            "-p",
            "no:cacheprovider",
            *args,
            plugins=[items],
        )
        runs = sorted(reports.iterdir())
        assert len(runs) == 1, f"expected exactly one run folder, got {runs}"
        verdict = json.loads((runs[0] / "verdict.json").read_text())
        assert_round_trip(runs[0])
        return Certification(result, runs[0], verdict, items)

    return run
