"""A resumed soak is judged by the inputs it started with (sweep defect 4): a baseline edited since, or a
soak/plan.json whose criteria, duration or rounds were edited, is refused in one line, never judged by; a run
started with --duration resumes as it started."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpucert.errors import ConfigError
from gpucert.fleet.soak import resume_soak, start_soak

from .soak_spec import soak_spec


@pytest.fixture(scope="module")
def soaked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished 4 h soak of a spec that says 24 h, started with --duration 4h: (spec, run)."""
    tmp = tmp_path_factory.mktemp("soak")
    spec = soak_spec(tmp, {"duration": "24h", "round": "1h"}, local_baseline=True)
    result = start_soak(spec, tmp / "reports", duration="4h")
    assert result.result == "pass"
    return spec, result.run


def test_a_soak_started_with_duration_resumes_as_it_started(soaked: tuple[Path, Path]) -> None:
    _, run = soaked
    plan = json.loads((run / "soak" / "plan.json").read_text(encoding="utf-8"))
    assert plan["overrides"] == {"duration": "4h", "round": None}
    assert resume_soak(run).result == "pass"


def test_a_baseline_edited_since_the_start_is_refused(soaked: tuple[Path, Path], tmp_path: Path) -> None:
    spec, run = soaked
    baseline = spec.parent / "H100-SXM5-80GB.yaml"
    before = baseline.read_text(encoding="utf-8")
    try:
        baseline.write_text(before.replace("maxVolatileCorrectedEcc: 1000\n", "maxVolatileCorrectedEcc: 1000000\n"))
        assert baseline.read_text(encoding="utf-8") != before
        with pytest.raises(ConfigError, match=r"80GB\.yaml: pool default.s baseline is not the one") as e:
            resume_soak(run)
        assert "inputs/baseline.yaml" in str(e.value)
        assert "\n" not in str(e.value)
    finally:
        baseline.write_text(before, encoding="utf-8")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda p: p["soak"]["criteria"].update(maxDrift=0.49), "soak.criteria.maxDrift"),
        (lambda p: (p["soak"].update(duration="2h"), p.update(rounds=2)), "soak.duration"),
        (lambda p: p["overrides"].update(duration="2h"), "soak.duration"),
        (lambda p: p.update(rounds=3), "soak.rounds"),
    ],
)
def test_a_plan_edited_since_the_start_is_refused(soaked: tuple[Path, Path], edit: Any, key: str) -> None:
    _, run = soaked
    path = run / "soak" / "plan.json"
    before = path.read_text(encoding="utf-8")
    plan = json.loads(before)
    edit(plan)
    try:
        path.write_text(json.dumps(plan), encoding="utf-8")
        with pytest.raises(ConfigError, match="plan.json: " + key.replace(".", r"\.") + ": soak/plan.json is not"):
            resume_soak(run)
    finally:
        path.write_text(before, encoding="utf-8")


def test_the_resume_command_says_it_in_one_line(soaked: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from gpucert.cli.main import main

    _, run = soaked
    path = run / "soak" / "plan.json"
    before = path.read_text(encoding="utf-8")
    plan = json.loads(before)
    plan["soak"]["criteria"]["referenceRounds"] = 1
    try:
        path.write_text(json.dumps(plan), encoding="utf-8")
        assert main(["soak", "--resume", str(run), "-q"]) == 2
    finally:
        path.write_text(before, encoding="utf-8")
    err = capsys.readouterr().err.strip()
    assert "soak.criteria.referenceRounds" in err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
