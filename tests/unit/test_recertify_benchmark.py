"""benchmarks/recertify.py's code path on a tiny study: the simulator's runs through the real handover rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "recertify.py"


def test_the_recertify_study_runs_and_writes_its_table_between_its_markers(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n<!-- recertify:begin -->\nold\n<!-- recertify:end -->\n\nafter\n")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    # 2 recertifications of a node with a 4% fall, the board's own 4 runs given: caught, no healthy figure flagged
    row = "| 0.5% | handover + 3 runs | after | 4% fall | 2/2 | 0/126 | 0/2 |"
    assert row in r.stdout
    text = results.read_text()
    assert row in text
    assert "old" not in text
    assert text.endswith("<!-- recertify:end -->\n\nafter\n")
