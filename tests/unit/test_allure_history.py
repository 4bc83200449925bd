"""Which earlier Allure report a new one carries the trend of, and how the trend is read from a single file."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from gpucert.report.allure import history_of, previous_allure_report
from gpucert.report.allure_history import carry_in, kept_history, save_history, store_of, usable


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


# What Allure 2.x writes into a report's history/ and reads back from <results>/history/ (allure-generator,
# io/qameta/allure/history/HistoryPlugin.java: history.json is a Map<String, HistoryData> of history key to
# {statistic, items}; HistoryTrendPlugin.java: history-trend.json a list of HistoryTrendItem {buildOrder, reportUrl,
# reportName, data}; the duration, categories and retry trends lists alike). Trimmed from what allure-commandline
# 2.46.1 (`allure generate`) wrote for a gpucert demo run on 5 Dec 2026: the keys are Allure's own hashes.
NAME = "Certification FAIL (demo-h100-pod-a, run 2026-12-04T20-52-47Z-demo-h100-pod-a)"
HISTORY = {
    "history.json": json.dumps(
        {
            "3b73c7633f4bc80b035bf309ea6ad0c8.5bc4d6045b6772c9a4ed38089c83450c": {
                "statistic": {"failed": 0, "broken": 0, "skipped": 0, "passed": 1, "unknown": 0, "total": 1},
                "items": [
                    {
                        "uid": "a5eba38b6b4e41e",
                        "status": "passed",
                        "time": {"start": 1796417575377, "stop": 1796417575681, "duration": 304},
                    }
                ],
            }
        },
        separators=(",", ":"),
    ).encode(),
    "history-trend.json": json.dumps(
        [
            {
                "reportName": NAME,
                "data": {"failed": 11, "broken": 0, "skipped": 2, "passed": 5, "unknown": 0, "total": 18},
            }
        ],
        separators=(",", ":"),
    ).encode(),
    "duration-trend.json": json.dumps([{"reportName": NAME, "data": {"duration": 8136}}]).encode(),
    "categories-trend.json": json.dumps([{"reportName": NAME, "data": {"Product defects": 1, "Health": 3}}]).encode(),
    "retry-trend.json": json.dumps([{"reportName": NAME, "data": {"run": 18, "retry": 0}}]).encode(),
}


def test_only_the_files_allure_reads_in_the_shape_it_reads_are_kept() -> None:
    kept, notes = usable(
        {**HISTORY, "history-trend.json": b"{not json", "retry-trend.json": b"{}", "notes.txt": b"hello"}
    )
    assert sorted(kept) == ["categories-trend.json", "duration-trend.json", "history.json"]
    assert notes == [
        "history-trend.json: not JSON; left out (the trend starts again from this run)",
        "notes.txt: not a history file Allure reads; left out",
        "retry-trend.json: not a JSON list; left out",
    ]


def test_a_specs_trend_is_kept_for_its_later_runs_only(tmp_path: Path) -> None:
    assert kept_history(tmp_path, "a", "2026-01-02T00-00-00Z-a") == ({}, [])  # nothing kept yet: nothing said
    assert save_history(tmp_path, "a", "2026-01-02T00-00-00Z-a", HISTORY) == []
    store = tmp_path / ".history" / "a" / "allure"
    assert store == store_of(tmp_path, "a")
    assert json.loads((store / "source.json").read_text()) == {"spec": "a", "run": "2026-01-02T00-00-00Z-a"}
    files, notes = kept_history(tmp_path, "a", "2026-01-03T00-00-00Z-a")
    assert files == HISTORY
    assert notes == []
    assert kept_history(tmp_path, "b", "2026-01-03T00-00-00Z-b") == ({}, [])  # never across specs
    assert kept_history(tmp_path, "a", "2026-01-01T00-00-00Z-a") == ({}, [])  # an earlier run: not its past
    # an earlier run's report rendered later does not replace the later run's trend
    notes = save_history(tmp_path, "a", "2026-01-01T00-00-00Z-a", {"history-trend.json": b"[]"})
    assert notes == [f"{store} keeps a later run's trend (2026-01-02T00-00-00Z-a); left as it is"]
    assert (store / "history-trend.json").read_bytes() == HISTORY["history-trend.json"]
    # a later one does, and files its report no longer has go
    assert save_history(tmp_path, "a", "2026-01-04T00-00-00Z-a", {"history-trend.json": b"[]"}) == []
    assert sorted(p.name for p in store.iterdir()) == ["history-trend.json", "source.json"]


def test_a_damaged_kept_trend_is_skipped_with_a_note_never_a_crash(tmp_path: Path) -> None:
    save_history(tmp_path, "a", "2026-01-02T00-00-00Z-a", HISTORY)
    store = tmp_path / ".history" / "a" / "allure"
    (store / "history.json").write_text("[1, 2")
    files, notes = kept_history(tmp_path, "a", "2026-01-03T00-00-00Z-a")
    assert "history.json" not in files
    assert "history-trend.json" in files
    assert notes == [f"{store}/history.json: not JSON; left out (the trend starts again from this run)"]
    (store / "source.json").write_text('{"spec": "b", "run": "2026-01-02T00-00-00Z-b"}')  # copied from another
    assert kept_history(tmp_path, "a", "2026-01-03T00-00-00Z-a") == (
        {},
        [f"{store}: kept for another spec (source.json); no trend carried"],
    )
    (store / "source.json").write_text("garbage")
    files, notes = kept_history(tmp_path, "a", "2026-01-03T00-00-00Z-a")
    assert files == {}
    assert notes[0].startswith(f"{store}: cannot be read")
    assert store_of(tmp_path, "../elsewhere") is None
    assert save_history(tmp_path, "../elsewhere", "r", HISTORY) == [
        "the spec name '../elsewhere' cannot name a folder; the trend is not kept"
    ]


def test_a_damaged_single_file_report_gives_what_it_still_holds(tmp_path: Path) -> None:
    good = base64.b64encode(b"[]").decode()
    report = tmp_path / "index.html"
    report.write_text(f"d('history/history-trend.json','{good}'),d('history/history.json','abc'),")
    assert history_of(report) == {"history-trend.json": b"[]"}


def test_carried_in_where_allure_reads_it(tmp_path: Path) -> None:
    carry_in(tmp_path / "allure-results", HISTORY)
    assert {p.name: p.read_bytes() for p in (tmp_path / "allure-results" / "history").iterdir()} == HISTORY
    # a history someone put there already (a CI job's own previous report) is kept unless told to replace it
    carry_in(tmp_path / "allure-results", {"history-trend.json": b"[]", "retry-trend.json": b"[]"}, replace=False)
    assert (tmp_path / "allure-results" / "history" / "history-trend.json").read_bytes() == HISTORY[
        "history-trend.json"
    ]
    carry_in(tmp_path / "allure-results", {"history-trend.json": b"[]"})
    assert (tmp_path / "allure-results" / "history" / "history-trend.json").read_bytes() == b"[]"


def test_the_kept_trend_lives_beside_the_nodes_history() -> None:
    from gpucert.fleet.history import HISTORY_DIR
    from gpucert.report import allure_history

    assert allure_history.HISTORY_DIR == HISTORY_DIR


def test_something_in_the_way_of_the_kept_trend_is_a_note_not_an_error(tmp_path: Path) -> None:
    """A hostile-input sweep: a folder where history.json goes, or a file where the allure/ store goes, failed
    `gpucert report allure` (exit 2) with a message naming a temporary file, after the report was written."""
    save_history(tmp_path, "a", "2026-01-02T00-00-00Z-a", HISTORY)
    store = tmp_path / ".history" / "a" / "allure"
    (store / "history.json").unlink()
    (store / "history.json").mkdir()
    (notes,) = save_history(tmp_path, "a", "2026-01-03T00-00-00Z-a", HISTORY)
    assert notes.startswith(f"the trend is not kept in {store} (")
    assert ".tmp" not in notes
    (store / "history.json").rmdir()
    for p in store.iterdir():
        p.unlink()
    store.rmdir()
    store.write_text("not a folder")
    (notes,) = save_history(tmp_path, "a", "2026-01-04T00-00-00Z-a", HISTORY)
    assert notes.startswith(f"the trend is not kept in {store} (")
