"""gpucert's Allure results are written as allure-commons writes them, with the C JSON encoder (issue 28: a re-test
of 3 nodes of a 1,024 x 8 fleet writes a result per node with a step per check).

allure-python-commons 2.16.2, allure_commons/logger.py: AllureFileLogger._report_item writes
`json.dump(asdict(item, filter=...), file, indent=..., ensure_ascii=False)` to `<name>.tmp`, then renames it. CPython's
json.dump never takes the C encoder (json/encoder.py, JSONEncoder.iterencode takes c_make_encoder only for a
one-shot encode, which json.dumps is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    """report/allure_writer.py `_plain` is allure-commons' `asdict(item, filter=lambda _, v: v or v is False)`
    (allure_commons/logger.py, 2.16.2) without attrs' generic walk: None, empty and zero attributes left out, False
    kept, nested results, steps, attachments and links as dicts, in attribute order."""
    from allure_commons.model2 import Attachment, Link

    from gpucert.report.allure_writer import _plain

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


def _passed(check: str, node: str, gpu: int | None, detail: str | None, start: float, stop: float) -> Any:
    from gpucert.plan.checks import CheckKey, CheckStatus, Finding
    from gpucert.report.verdict import Outcome

    return CheckKey(check, node, gpu, detail), Outcome(Finding(check, CheckStatus.PASS, node, gpu), start, stop)


@pytest.mark.parametrize("indent", [None, "1"])
@pytest.mark.parametrize("result", ["pass", "incomplete", "fail"])
def test_a_nodes_passed_result_is_written_as_allure_commons_writes_its_test_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, result: str, indent: str | None
) -> None:
    """allure_passed.py writes a node's passed result as the text allure-commons writes of a TestResult (allure-
    python-commons 2.16.2: logger.py json of `asdict(item, filter=lambda _, v: v or v is False)`, model2.py's
    attribute order), its steps joined as text: the same text as the TestResult written by allure-commons' own
    logger, indented or not. A node's check with details and none recorded times (0) takes the default span."""
    import uuid

    if indent is not None:
        monkeypatch.setenv("ALLURE_INDENT_OUTPUT", indent)
    from gpucert.report.allure_passed import passed_on
    from gpucert.report.verdict_model import Group

    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=7, version=4))
    checks = {
        "memory.bandwidth": [_passed("memory.bandwidth", "n1", g, None, 10.0 + g, 10.5 + g) for g in (1, 0)],
        "stack.version": [_passed("stack.version", "n1", None, d, 0.0, 0.0) for d in ("driver", "cuda")],
        "node.reachable": [_passed("node.reachable", "n1", None, None, 3.25, 3.5)],
    }
    said = Group(result=result, passed=5, failed=0, errors=0, skipped=0)
    memory = Step(
        name="memory.bandwidth (2 GPUs)",
        status="passed",
        start=10000,
        stop=11500,
        parameters=[Parameter("gpus", "0,1")],
    )
    stack = Step(name="stack.version (2 checks)", status="passed", start=7, stop=7)
    stack.parameters = [Parameter("details", "cuda,driver")]
    node = Step(name="node.reachable", status="passed", start=3250, stop=3500)
    steps = [
        Step(name="performance: 2 checks passed (1 kind)", status="passed", start=10000, stop=11500),
        Step(name="node: 1 check passed (1 kind)", status="passed", start=3250, stop=3500),
        Step(name="stack: 2 checks passed (1 kind)", status="passed", start=7, stop=7),
    ]
    steps[0].steps, steps[1].steps, steps[2].steps = [memory], [node], [stack]
    why = "n1 is INCOMPLETE: not every required check ran on it (see the certification's coverage)"
    expected = Result(
        uuid=str(uuid.uuid4()),
        name="5 checks passed on n1 (3 kinds)"
        + {"pass": "", "incomplete": " (INCOMPLETE: not every check ran)"}.get(
            result, "; the node FAILED (see its failing checks)"
        ),
        fullName="gpucert.passed[n1]",
        historyId="passed[n1]",
        status="broken" if result == "incomplete" else "passed",
        statusDetails=StatusDetails(message=why) if result == "incomplete" else None,
        start=7,
        stop=11500,
        steps=steps,
        labels=[
            Label("epic", "passed"),
            Label("feature", "passed checks"),
            Label("story", "n1"),
            Label("suite", "passed checks"),
        ],
        parameters=[Parameter("node", "n1")],
    )
    AllureFileLogger(str(tmp_path / "theirs")).report_result(expected)
    outcomes = dict(pair for pairs in checks.values() for pair in pairs)
    keys = {check: [k for k, _ in pairs] for check, pairs in checks.items()}
    ResultsLogger(str(tmp_path / "ours")).report_text(passed_on("n1", keys, outcomes, 7, said))
    assert _written(tmp_path / "ours") == _written(tmp_path / "theirs")


@pytest.mark.parametrize(
    ("start", "stop", "begin", "end"), [(3.25, 4.5, 3250, 4500), (0.0, 0.0, 7, 7), (3.25, 0.0, 3250, 3250)]
)
def test_a_node_whose_tests_share_one_time_is_written_as_allure_commons_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: float, stop: float, begin: int, end: int
) -> None:
    """A carried node's tests all have the node's one start and stop (allure_passed.py `_one_span`): each step takes
    that span as a step of its own would (0: not recorded, the default span), the text allure-commons writes."""
    import uuid

    from gpucert.report.allure_passed import passed_on
    from gpucert.report.verdict_model import Group

    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=7, version=4))
    checks = {
        "memory.bandwidth": [_passed("memory.bandwidth", "n1", g, None, start, stop) for g in (1, 0)],
        "stack.version": [_passed("stack.version", "n1", None, d, start, stop) for d in ("driver", "cuda")],
        "node.reachable": [_passed("node.reachable", "n1", None, None, start, stop)],
    }
    memory = Step(name="memory.bandwidth (2 GPUs)", status="passed", start=begin, stop=end)
    memory.parameters = [Parameter("gpus", "0,1")]
    stack = Step(name="stack.version (2 checks)", status="passed", start=begin, stop=end)
    stack.parameters = [Parameter("details", "cuda,driver")]
    node = Step(name="node.reachable", status="passed", start=begin, stop=end)
    steps = [
        Step(name="performance: 2 checks passed (1 kind)", status="passed", start=begin, stop=end, steps=[memory]),
        Step(name="node: 1 check passed (1 kind)", status="passed", start=begin, stop=end, steps=[node]),
        Step(name="stack: 2 checks passed (1 kind)", status="passed", start=begin, stop=end, steps=[stack]),
    ]
    expected = Result(
        uuid=str(uuid.uuid4()),
        name="5 checks passed on n1 (3 kinds)",
        fullName="gpucert.passed[n1]",
        historyId="passed[n1]",
        status="passed",
        start=begin,
        stop=end,
        steps=steps,
        labels=[
            Label("epic", "passed"),
            Label("feature", "passed checks"),
            Label("story", "n1"),
            Label("suite", "passed checks"),
        ],
        parameters=[Parameter("node", "n1")],
    )
    AllureFileLogger(str(tmp_path / "theirs")).report_result(expected)
    outcomes = dict(pair for pairs in checks.values() for pair in pairs)
    keys = {check: [k for k, _ in pairs] for check, pairs in checks.items()}
    said = Group(result="pass", passed=5, failed=0, errors=0, skipped=0)
    ResultsLogger(str(tmp_path / "ours")).report_text(passed_on("n1", keys, outcomes, 7, said))
    assert _written(tmp_path / "ours") == _written(tmp_path / "theirs")
