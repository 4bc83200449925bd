"""The run folder owns its run id and its modes: one spelling of each, read back by every room that needs them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.plan import run as runner
from gpucert.plan.layout import Mode, run_id, run_id_time, run_stamp
from gpucert.plan.runfolder import RunFolder

AT = datetime(2026, 12, 2, 18, 0, 5, tzinfo=UTC)


def test_a_run_id_is_its_time_then_its_spec_and_reads_back() -> None:
    assert run_id("acme", AT) == "2026-12-02T18-00-05Z-acme"
    assert run_id("acme", AT, "recertify-gpu-node-2") == "2026-12-02T18-00-05Z-acme-recertify-gpu-node-2"
    assert run_id_time(run_id("acme", AT, "x")) == AT
    # a time in another zone is spelled in UTC, as every run id is
    assert run_stamp(AT.astimezone(timezone(timedelta(hours=5)))) == "2026-12-02T18-00-05Z"


@pytest.mark.parametrize("name", ["acme", "2026-12-02", "2026-13-02T18-00-05Z-acme", ""])
def test_an_id_without_a_time_at_its_head_has_none(name: str) -> None:
    assert run_id_time(name) is None


def test_a_new_folder_is_named_by_its_run_id(tmp_path: Path) -> None:
    first = RunFolder.create(tmp_path, "acme", "retest")
    second = RunFolder.create(tmp_path, "acme", "retest")
    started = run_id_time(first.id)
    assert started is not None
    assert first.id.endswith("-acme-retest")
    # the same id taken gets `-2`; a second later, the id of its own time
    assert second.id == f"{first.id}-2" or (run_id_time(second.id) or started) > started


def test_one_vocabulary_of_modes_the_pipeline_and_run_json_share() -> None:
    assert runner.Mode is Mode
    assert [str(m) for m in Mode.recorded()] == ["static", "plan", "measure", "recertify", "retest"]
    assert [m for m in Mode if m.measures] == [Mode.MEASURE, Mode.RECERTIFY, Mode.RETEST]
    assert Mode.RECERTIFY.suites == ("configure", "certify", "recertify")


def test_run_json_records_what_a_run_is_never_how_it_was_prepared(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "acme")
    with pytest.raises(ValueError, match="not how it was prepared"):
        folder.write_intent(spec="acme", mode=Mode.EVIDENCE)
    folder.write_intent(spec="acme", mode=Mode.RETEST)
    assert folder.mode is Mode.RETEST
    assert folder.read_run_info()["mode"] == "retest"  # the on-disk string is the one older runs have
    (folder.run_info_path).write_text('{"mode": "evidence"}', encoding="utf-8")
    with pytest.raises(EvidenceError, match=r"run\.json names no mode of gpucert"):
        _ = folder.mode
