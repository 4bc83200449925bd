"""One answer to "can this figure be believed" (issue 24, step 5): the evaluation's. The Prometheus exporter and the
handover recording used to judge evidence themselves, with the protocol's five samples as the only minimum: the
exporter showed a ratio, and `baseline record` kept a handover figure, for a figure whose check errored for fewer
samples than the spec asks of its probe (certify.samples)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpucert.evaluate.evaluation import Evaluation
from gpucert.fleet.metrics import FleetCollector
from gpucert.plan import run as runner
from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.plan.layout import Mode
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.handover import Recorded, node_baseline_of

from ..in_process import gpucert_here
from .conftest import ROOT


@dataclass
class Runs:
    reports: Path
    measured: RunFolder  # judged by the example's spec (the protocol's five samples at least)
    strict: RunFolder  # the same evidence judged by a spec that asks 12 samples of every PCIe figure
    pcie: int  # the samples of a PCIe figure in that evidence


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    project = tmp_path_factory.mktemp("figures")
    shutil.copytree(ROOT / "examples", project / "examples")
    shutil.copytree(ROOT / "baselines", project / "baselines")
    spec, _ = runner.load_inputs(project / "examples" / "clean.yaml")
    measured = runner.prepare(spec, project / "reports", Mode.MEASURE)
    ev = measured.read_evidence("gpu-node-1")
    assert ev is not None
    pcie = len(ev.gpus[0].measurements["pcie.h2d"].samples)
    assert 5 <= pcie < 72  # enough for the protocol's minimum (the default takes 60), fewer than the strict spec asks
    doc = yaml.safe_load((project / "examples" / "clean.yaml").read_text())
    doc["certify"]["samples"] = {"pcie": 72}
    (project / "examples" / "strict.yaml").write_text(yaml.safe_dump(doc))
    r = gpucert_here("evaluate", "examples/strict.yaml", "--evidence", str(measured.path), "-q", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    strict = RunFolder(max((project / "reports").iterdir(), key=lambda p: p.name))
    assert strict.path != measured.path
    return Runs(project / "reports", measured, strict, pcie)


def test_the_evaluation_does_not_believe_a_figure_short_of_the_spec_samples(runs: Runs) -> None:
    found = Evaluation.from_run(runs.strict).decide(CheckKey("pcie.h2d", "gpu-node-1", 0))
    assert found.status is CheckStatus.ERROR
    assert f"{runs.pcie} samples, fewer than the 72 the spec asks of this probe" in found.message
    assert Evaluation.from_run(runs.measured).decide(CheckKey("pcie.h2d", "gpu-node-1", 0)).status is CheckStatus.PASS


def test_the_exporter_shows_no_ratio_for_a_figure_the_evaluation_does_not_believe(runs: Runs) -> None:
    collector = FleetCollector(runs.reports)
    by_default = {(m, g) for m, g, _ in collector.ratios(runs.measured, "gpu-node-1")}
    by_strict = {(m, g) for m, g, _ in collector.ratios(runs.strict, "gpu-node-1")}
    assert ("pcie.h2d", "0") in by_default
    assert ("pcie.h2d", "0") not in by_strict
    assert by_strict == {(m, g) for m, g in by_default if not m.startswith("pcie.")}


def test_a_handover_records_no_figure_the_evaluation_does_not_believe(runs: Runs) -> None:
    recorded = Recorded(run=runs.strict.id, date="2026-12-04", result="fail", forced="test")
    baseline, _ = node_baseline_of(runs.strict, "gpu-node-1", recorded)
    gpu = baseline.gpu(0)
    assert gpu is not None
    assert "memory.bandwidth" in gpu.metrics
    assert "pcie.h2d" not in gpu.metrics
    assert "pcie.d2h" not in gpu.metrics


def test_the_exporter_keeps_the_ratios_it_derived_and_lets_the_evidence_go(
    runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RunView.release (issue 28): the exporter reads each node's evidence once, keeps its ratios and index, and lets
    the evidence go, so a fleet's evidence is never in memory at once: asked again, the view reads the file again."""
    reads: list[str] = []
    read = RunFolder.read_evidence
    monkeypatch.setattr(RunFolder, "read_evidence", lambda self, node: reads.append(node) or read(self, node))
    collector = FleetCollector(runs.reports)
    assert collector.ratios(runs.measured, "gpu-node-1")
    assert collector.indices(runs.measured, "gpu-node-1")
    assert reads == ["gpu-node-1"]  # the ratios and the index from one read
    view = collector._view(runs.measured)  # the view the collector keeps for the run
    assert view is not None
    assert view.evidence("gpu-node-1") is not None
    assert reads == ["gpu-node-1", "gpu-node-1"]  # released: not kept in the view
