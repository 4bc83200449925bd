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
from attr import asdict

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


def test_a_result_is_the_dict_attrs_asdict_makes_of_it() -> None:
    """report/allure.py `_plain` is allure-commons' `asdict(item, filter=lambda _, v: v or v is False)` (allure_commons/
    logger.py, 2.16.2) without attrs' generic walk: None, empty and zero attributes left out, False kept, nested
    results, steps, attachments and links as dicts, in attribute order."""
    from allure_commons.model2 import Attachment, Link

    from gpucert.report.allure import _plain

    inner = Step(
        name="gpu3",
        status=Status.FAILED,
        statusDetails=StatusDetails(message="slow", known=False, flaky=True),
        parameters=[Parameter("gpu", "3", excluded=False)],
        start=0,
        stop=5,
        attachments=[Attachment(name="evidence", source="a.json", type="application/json")],
    )
    result = Result(
        uuid="u",
        name="memory.bandwidth on gpu-node-2",
        status=Status.FAILED,
        steps=[Step(name="outer", steps=[inner, Step(name="", status=Status.PASSED)]), inner],
        labels=[Label("epic", "performance"), Label("tag", "")],
        links=[Link(type="issue", url="https://example.invalid/1", name=None)],
        parameters=(Parameter("node", "gpu-node-2"),),  # type: ignore[arg-type]  # a tuple is written as a list
        descriptionHtml="<p>x</p>",
        start=1.5,
        stop=0.0,
    )
    expected = asdict(result, filter=lambda _, v: v or v is False)
    assert _plain(result) == expected
    assert json.dumps(_plain(result)) == json.dumps(expected)
