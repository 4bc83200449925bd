"""Which earlier Allure report a new one carries the trend of, and how the trend is read from a single file."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from gpucert.report.allure import history_of, previous_allure_report


def _run(reports: Path, name: str, spec: str, report: bool) -> Path:
    run = reports / name
    run.mkdir(parents=True)
    (run / "verdict.json").write_text(json.dumps({"spec": spec}))
    if report:
        trend = base64.b64encode(json.dumps([{"reportName": name}]).encode()).decode()
        (reports / f"{name}-allure").mkdir()
        # as allure-generator 2.46.1 embeds a file in --single-file mode
        (reports / f"{name}-allure" / "index.html").write_text(f"d('history/history-trend.json','{trend}'),")
    return run


def test_the_latest_earlier_report_of_the_same_spec(tmp_path: Path) -> None:
    _run(tmp_path, "2026-01-01T00-00-00Z-a", "a", report=True)
    _run(tmp_path, "2026-01-02T00-00-00Z-a", "a", report=True)
    _run(tmp_path, "2026-01-03T00-00-00Z-b", "b", report=True)  # another spec
    _run(tmp_path, "2026-01-04T00-00-00Z-a", "a", report=False)  # never rendered
    (tmp_path / "notes.txt").write_text("not a run")
    (tmp_path / "2026-01-01T12-00-00Z-x").mkdir()  # no verdict
    now = _run(tmp_path, "2026-01-05T00-00-00Z-a", "a", report=False)
    found = previous_allure_report(now, "a")
    assert found == tmp_path / "2026-01-02T00-00-00Z-a-allure" / "index.html"
    assert json.loads(history_of(found)["history-trend.json"]) == [{"reportName": "2026-01-02T00-00-00Z-a"}]
    later = _run(tmp_path, "2025-12-31T00-00-00Z-a", "a", report=False)
    assert previous_allure_report(later, "a") is None  # only earlier runs
    assert history_of(tmp_path / "missing.html") == {}
