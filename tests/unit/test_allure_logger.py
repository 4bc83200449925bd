"""gpucert's Allure results are written as allure-commons writes them, with the C JSON encoder (issue 28: a re-test
of 3 nodes of a 1,024 x 8 fleet writes a result per node with a step per check).

allure-python-commons 2.16.2, allure_commons/logger.py: AllureFileLogger._report_item writes
`json.dump(asdict(item, filter=...), file, indent=..., ensure_ascii=False)` to `<name>.tmp`, then renames it. CPython's
json.dump never takes the C encoder (json/encoder.py, JSONEncoder.iterencode takes c_make_encoder only for a
one-shot encode, which json.dumps is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import Label, Parameter, Status, StatusDetails
from allure_commons.model2 import TestResult as Result
from allure_commons.model2 import TestStepResult as Step

from gpucert.report.allure import ResultsLogger


def _result() -> Result:
    steps = [
        Step(name=f"memory.bandwidth ({g} GPUs) \u2013 é", status=Status.PASSED, start=1, stop=2) for g in range(3)
    ]
    return Result(
        uuid="u",
        name="184 checks passed on gpu-node-2 (40 kinds)",
        fullName="gpucert.passed[gpu-node-2]",
        status=Status.PASSED,
        statusDetails=StatusDetails(message="", known=False),
        start=1,
        stop=2,
        steps=[Step(name="performance", status=Status.PASSED, start=1, stop=2, steps=steps)],
        labels=[Label("story", "gpu-node-2")],
        parameters=[Parameter("node", "gpu-node-2")],
    )


def _written(folder: Path) -> str:
    (path,) = folder.iterdir()
    assert path.name.endswith("-result.json")
    return path.read_text(encoding="utf8")


@pytest.mark.parametrize("indent", [None, "1"])
def test_a_result_is_the_text_allure_commons_writes_without_its_slow_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: str | None
) -> None:
    if indent is not None:
        monkeypatch.setenv("ALLURE_INDENT_OUTPUT", indent)
    AllureFileLogger(str(tmp_path / "theirs")).report_result(_result())

    def no_dump(*args: object, **kwargs: object) -> None:
        raise AssertionError("json.dump: the pure-Python encoder")

    monkeypatch.setattr(json, "dump", no_dump)
    ResultsLogger(str(tmp_path / "ours")).report_result(_result())
    assert _written(tmp_path / "ours") == _written(tmp_path / "theirs")
    assert not list((tmp_path / "ours").glob("*.tmp"))
