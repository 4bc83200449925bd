"""benchmarks/detection.py's code path on a tiny study: simulated fleets through the real evaluator, one table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucert.spec.cluster import load_spec

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "detection.py"


def test_each_setting_reaches_the_evaluator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's settings are the ones the rules read (each pool's), or its trade-off table compares nothing."""
    spec_ = importlib.util.spec_from_file_location("detection", SCRIPT)
    assert spec_ is not None
    assert spec_.loader is not None
    detection = importlib.util.module_from_spec(spec_)
    monkeypatch.setitem(sys.modules, "detection", detection)  # its dataclasses look their module up
    spec_.loader.exec_module(detection)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(detection.spec_doc(4, None)))
    spec = load_spec(path)
    setting = detection.Setting(0.02, 3.0)
    judged = detection.with_setting(spec, setting)
    for pool in judged.pools:
        knobs = judged.stragglers_for(pool.name)
        assert (knobs.max_deviation, knobs.min_z) == (0.02, 3.0)
    default = spec.stragglers_for(spec.pools[0].name)
    assert (default.max_deviation, default.min_z) != (0.02, 3.0)


def test_the_detection_study_runs_end_to_end_on_a_tiny_study(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n<!-- detection:begin -->\nold\n<!-- detection:end -->\n\nafter\n")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    # 2 clean fleets and 2 with an 8% straggler, 4 x 8: every straggler caught, no healthy GPU flagged
    row = (
        "| maxDeviation 5.0%, minZ 3.5 **(default)** | 4 x 8 | 100.0% (2/2) | 0.00% (0/126) | 0.00% (0/64) "
        "| 0.0% (0/2) |"
    )
    assert row in r.stdout
    text = results.read_text()
    assert row in text
    assert "old" not in text
    assert text.endswith("<!-- detection:end -->\n\nafter\n")


def test_the_drift_study_runs_end_to_end_on_a_tiny_study(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--drift", "--smoke", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    # 2 clean fleets and 2 with one GPU 4% below its own history, 4 x 8: both caught, no healthy GPU flagged
    assert "| 4 x 8 | 0.5% | clean | - | 0/64 (0.00%) | 0/2 |" in r.stdout
    assert "| 4 x 8 | 0.5% | 4.0% fall | 100% (2/2) | 0/62 (0.00%) | 0/2 |" in r.stdout
    assert "<!-- drift:begin -->" in results.read_text()


def test_the_combined_study_runs_end_to_end_on_a_tiny_study(tmp_path: Path) -> None:
    """The combined statistic's study (peers and drift, one writer of RESULTS.md's sections with the others)."""
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n<!-- combined:begin -->\nold\n<!-- combined:end -->\n\nafter\n")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--combined", "--smoke", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    # 2 clean 16 x 8 fleets and 2 with one GPU 4% (peers) or 2.5% (drift) slow on every metric: caught by the
    # combined statistic, no healthy GPU flagged
    assert "| peers | 16 x 8 | 0 | 4.0% on every metric | 2/2 | 2/2 | 2/2 | 0/254 (either) | 0/2 |" in r.stdout
    assert "| drift | 16 x 8 | 0 | clean | - | - | - | per metric 0/256, combined 0/256 | 0/2 |" in r.stdout
    assert "| drift | 16 x 8 | 0 | 2.5% on every metric |" in r.stdout
    text = results.read_text()
    assert "old" not in text
    assert text.endswith("<!-- combined:end -->\n\nafter\n")
