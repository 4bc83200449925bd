"""benchmarks/detection.py's code path on a tiny study: simulated fleets through the real evaluator, one table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "detection.py"


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
