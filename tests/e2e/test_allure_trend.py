"""Allure's trend carried between the runs of one spec: a certification puts the spec's kept history (from its
latest earlier report) where Allure reads it, `<results>/history/` (allure-generator's HistoryPlugin and
HistoryTrendPlugin `readResults`), in the run's allure-results and in --alluredir; another spec's never."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucert.report.allure_history import save_history

from .conftest import SUITES, fleet_doc, spec_doc

# as allure-commandline 2.46.1 writes them (tests/unit/test_allure_history.py has the fuller sample)
TREND = [{"reportName": "Certification PASS (demo-h100-pod-a, run 2000-01-01T00-00-00Z-demo-h100-pod-a)",
          "data": {"failed": 0, "broken": 0, "skipped": 0, "passed": 3, "unknown": 0, "total": 3}}]  # fmt: skip
HISTORY = {
    "history-trend.json": json.dumps(TREND).encode(),
    "history.json": b'{"3b73c7633f4bc80b035bf309ea6ad0c8.5bc4d6045b6772c9a4ed38089c83450c": {"statistic": '
    b'{"failed": 0, "broken": 0, "skipped": 0, "passed": 1, "unknown": 0, "total": 1}, "items": []}}',
}


def test_a_certification_carries_its_specs_trend_into_its_allure_results(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(nodes=2, gpus=2)))
    spec = spec_doc(probes=["health"], multinode=None)
    spec["expect"].update(nodes=2, gpusPerNode=2)
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec))
    reports = pytester.path / "reports"
    assert save_history(reports, "demo-h100-pod-a", "2000-01-01T00-00-00Z-demo-h100-pod-a", HISTORY) == []
    save_history(reports, "another-spec", "2000-01-01T00-00-00Z-another-spec", {"retry-trend.json": b"[]"})
    (reports / ".history" / "demo-h100-pod-a" / "allure" / "duration-trend.json").write_text("{damaged")
    extra = tmp_path / "allure"
    result = pytester.runpytest(
        str(SUITES / "configure"),
        str(SUITES / "certify"),
        "--spec",
        str(pytester.path / "spec.yaml"),
        "--reports",
        str(reports),
        "--alluredir",
        str(extra),
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["Allure trend: */duration-trend.json: not JSON; left out*"])
    (run,) = (p for p in reports.iterdir() if not p.name.startswith("."))
    for results in (run / "allure-results", extra):
        carried = {p.name: p.read_bytes() for p in (results / "history").iterdir()}
        assert carried == HISTORY  # the spec's own, without the damaged file; not another spec's retry trend
