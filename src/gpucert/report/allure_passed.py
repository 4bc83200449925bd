"""The checks that passed, in Allure: one result per node (and one for the fleet's own checks), on a run that passed
and on one that did not, so Allure's overview counts the nodes the verdict lists and each node's result is found
under its name. A result counts checks as the verdict does (each GPU's check is one: `184 checks passed on
gpu-node-2 (40 kinds)`, where a kind is a check id), has a step per check family and a step per check of it, whose
`gpus` parameter names the GPUs it passed on; a GPU that passed a check another GPU of its node failed is counted
here too (the failure is a result of its own, report/allure.py).

A node's result is passed, or broken where the verdict says the node is incomplete (not every required check ran),
so Allure's donut never counts an incomplete node as a pass; its name says when the node failed or passed under a
waiver, as the verdict's node table does.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from itertools import chain
from operator import attrgetter
from typing import Any

from allure_commons.model2 import Status

from gpucert.plan.checks import CheckKey, family_of
from gpucert.report.verdict import Outcome
from gpucert.report.verdict_model import Group

__all__ = ["FLEET", "counted", "passed_on", "shown", "spoken"]

FLEET = "@fleet"  # the fleet's own checks in Allure's ids ('@' is in no node name, DNS-1123: a node named `fleet` is
# a result of its own, not a retry of the fleet's; CheckKey's `check@fleet` names it the same way)


def shown(node: str | None) -> str:
    """Where a result's checks ran, in its ids (fullName, historyId, story, the `node` parameter): the node's name,
    or FLEET for the fleet's own checks (None)."""
    return FLEET if node is None else node


def spoken(node: str | None) -> str:
    """Where a result's checks ran, in its name: the node's name, or "the fleet"."""
    return "the fleet" if node is None else node


def counted(n: int, word: str) -> str:
    """`1 check`, `184 checks`."""
    return f"{n} {word}{'' if n == 1 else 's'}"


# A passed result is written as allure-commons writes a TestResult (allure-python-commons 2.16.2,
# allure_commons/logger.py: AllureFileLogger._report_item, json of `asdict(item, filter=lambda _, v: v or v is False)`):
# the attributes allure_commons/model2.py declares, in their order (ExecutableItem's name, status, statusDetails,
# stage, description, descriptionHtml, steps, attachments, parameters, start, stop; then TestResult's uuid,
# historyId, testCaseId, fullName, labels, links, titlePath), those None, empty or zero left out. A 1,024 x 8
# re-test writes 1,024 of them with ~42,000 steps, most alike but for their times: a check step's text up to its
# times is made once (json.dumps of its dict, with json.dumps' separators), and the steps are joined as text into
# the result's, not built as attrs objects walked back into dicts and encoded one by one.
_PASSED = Status.PASSED
_START, _STOP, _WHERE = attrgetter("start"), attrgetter("stop"), attrgetter("gpu", "detail")
_STEPS = "\ue000steps"  # where a result's steps go in its text (a private-use character: in no id or name of it)


def _open(head: dict[str, Any]) -> str:
    """A JSON object's text as json.dumps writes it, without its closing brace (more fields follow)."""
    return json.dumps(head, ensure_ascii=False)[:-1]


def _times(begin: int, end: int) -> str:
    """A step's start and stop where they are not zero (as allure-commons' filter leaves them out), and its end."""
    return (f', "start": {begin}' if begin else "") + (f', "stop": {end}' if end else "") + "}"


@lru_cache(maxsize=4096)  # a check step's name and parameters: the same on most nodes of a fleet
def _head(check: str, gpus: tuple[int, ...], details: tuple[str, ...], n: int) -> str:
    """A passed check step's name, status and parameters, opened (`_open`): on how many GPUs, and which (parameter
    `gpus`); or for how many details (parameter `details`: the components, rails, DCGM tests) where it has several."""
    name, parameters = check, []
    if gpus:
        name = f"{check} ({counted(len(gpus), 'GPU')})"
        parameters.append({"name": "gpus", "value": ",".join(map(str, sorted(gpus)))})
    if details:
        name = f"{check} ({counted(n, 'check')})" if n > 1 else check
        parameters.append({"name": "details", "value": ",".join(sorted(details))})
    head: dict[str, Any] = {"name": name, "status": _PASSED}
    if parameters:
        head["parameters"] = parameters
    return _open(head)


def _check_step(
    check: str, keys: Sequence[CheckKey], outcomes: Mapping[CheckKey, Outcome], default_ms: int
) -> tuple[str, int, int]:
    """One check that passed on a node, as its step's text and its span in ms: from the first test's start to the
    last one's end (`default_ms` when the times were not recorded). The earliest start in seconds, then in ms:
    int(x * 1000) never decreases as x grows, so it is the earliest of the starts in ms, with one conversion."""
    results = list(map(outcomes.__getitem__, keys))
    first = min(filter(None, map(_START, results)), default=None)
    begin = default_ms if first is None else int(first * 1000)
    last = max(filter(None, map(_STOP, results)), default=None)
    end = begin if last is None else int(last * 1000)
    return _shaped(check, keys) + _times(begin, end), begin, end


def _shaped(check: str, keys: Sequence[CheckKey]) -> str:
    """A passed check step's opened text (`_head`) of its keys: the GPUs it passed on, or its details."""
    return _head_of(check, tuple(map(_WHERE, keys)))


@lru_cache(maxsize=4096)  # a check's GPUs and details: the same on most nodes of a fleet
def _head_of(check: str, where: tuple[tuple[int | None, str | None], ...]) -> str:
    """_head of a check's keys' GPUs and details (`where`, one pair per key)."""
    gpus = tuple([g for g, _ in where if g is not None])
    details: tuple[str, ...] = ()
    if len(gpus) < len(where):  # the node's own check, or one per detail: the keys with no GPU say their details
        details = tuple([d for g, d in where if g is None and d])
    return _head(check, gpus, details, len(where))


def _one_span(tested: Iterable[Outcome], default_ms: int) -> tuple[int, int] | None:
    """The span in ms every check of a node takes when all its tests (`tested`, its checks' outcomes or more) have
    one start and one stop (a carried node's: its kept decisions carry the node's time), as _check_step would find
    it for each; else None."""
    results = tested if isinstance(tested, list) else list(tested)
    starts, stops = set(map(_START, results)), set(map(_STOP, results))
    if len(starts) != 1 or len(stops) != 1:
        return None
    (first,), (last,) = starts, stops
    begin = int(first * 1000) if first else default_ms
    return begin, int(last * 1000) if last else begin


@lru_cache(maxsize=1024)
def _opened(name: str) -> str:
    """A family step's name and status, opened: the same on most nodes of a fleet."""
    return _open({"name": name, "status": _PASSED})


@lru_cache(maxsize=1024)
def _family(check: str) -> str:
    return family_of(check).value


_SAID = {"fail": "; the node FAILED (see its failing checks)", "waived": "; the node passed with a waiver"}
_INCOMPLETE = " (INCOMPLETE: not every check ran)"


def passed_on(
    node: str | None,
    checks: Mapping[str, Sequence[CheckKey]],
    outcomes: Mapping[CheckKey, Outcome],
    default_ms: int,
    said: Group | None,
    *,
    tested: Sequence[Outcome] | None = None,
) -> str:
    """One result for every check that passed on `node` (None: the fleet's own checks), each check's keys that passed
    (one per GPU, or the node's one, or one per detail: a component's stack.version, a rail's fabric.port; their
    `outcomes` said), as `said` (the verdict's group of the node) counts them: a step per check family, each
    check a step of it; the text allure-commons writes of the TestResult (above). `tested`: the node's outcomes
    where the caller has them at hand (every one of its checks', or more), else they are looked up."""
    span = _one_span(
        map(outcomes.__getitem__, chain.from_iterable(checks.values())) if tested is None else tested, default_ms
    )
    if span is None:
        steps, begin, end = _steps(checks, outcomes, default_ms)
    else:  # each step ends with the same times: the text of the node's shape, joined by them
        shape = tuple(
            [(_family(c), _head_of(c, tuple(map(_WHERE, keys))), len(keys)) for c, keys in sorted(checks.items())]
        )
        steps, (begin, end) = _times(*span).join(_one_span_steps(shape)), span
    n = sum(map(len, checks.values()))
    where, token = spoken(node), shown(node)
    result = said.result if said is not None else "pass"
    incomplete = result == "incomplete"
    why = f"{where} is INCOMPLETE: not every required check ran on it (see the certification's coverage)"
    out: dict[str, Any] = {
        "name": f"{counted(n, 'check')} passed on {where} ({counted(len(checks), 'kind')})"
        + (_INCOMPLETE if incomplete else _SAID.get(result, "")),
        "status": Status.BROKEN if incomplete else _PASSED,
    }
    if incomplete:
        out["statusDetails"] = {"message": why}
    out["steps"] = _STEPS
    out["parameters"] = [{"name": "node", "value": token}]
    if begin:
        out["start"] = begin
    if end:
        out["stop"] = end
    out["uuid"] = str(uuid.uuid4())
    out["historyId"] = f"passed[{token}]"
    out["fullName"] = f"gpucert.passed[{token}]"
    out["labels"] = [
        {"name": "epic", "value": "passed"},
        {"name": "feature", "value": "passed checks"},
        {"name": "story", "value": token},
        {"name": "suite", "value": "passed checks"},
    ]
    # the first "steps" value: name and status come before it, and a string's own quotes are escaped in JSON
    return json.dumps(out, ensure_ascii=False).replace(json.dumps(_STEPS, ensure_ascii=False), steps, 1)


def _steps(
    checks: Mapping[str, Sequence[CheckKey]], outcomes: Mapping[CheckKey, Outcome], default_ms: int
) -> tuple[str, int, int]:
    """The steps of a node's passed checks (a step per family, each check a step of it) as their JSON list's text,
    and the span they take in ms."""
    by_family: dict[str, list[tuple[int, str, int, int]]] = defaultdict(list)
    for check, keys in sorted(checks.items()):
        by_family[_family(check)].append((len(keys), *_check_step(check, keys, outcomes, default_ms)))
    steps, begins, ends = [], [], []
    for family, inner in by_family.items():
        begin, end = min([b for _, _, b, _ in inner]), max([e for _, _, _, e in inner])
        name = f"{family}: {counted(sum([n for n, _, _, _ in inner]), 'check')} passed ({counted(len(inner), 'kind')})"
        inside = ", ".join([s for _, s, _, _ in inner])
        steps.append(f'{_opened(name)}, "steps": [{inside}]{_times(begin, end)}')
        begins.append(begin)
        ends.append(end)
    return f"[{', '.join(steps)}]", min(begins), max(ends)


_TIMES = object()  # where a step's times go in _one_span_steps' text


@lru_cache(maxsize=256)  # a fleet's nodes are of a few shapes
def _one_span_steps(shape: tuple[tuple[str, str, int], ...]) -> tuple[str, ...]:
    """_steps' text of a node whose every step takes one span, for its shape (each check's family, opened step and
    number of keys, in check order), as the pieces that the span's `_times` joins."""
    by_family: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for family, head, n in shape:
        by_family[family].append((head, n))
    tokens: list[object] = ["["]
    for i, (family, inner) in enumerate(by_family.items()):
        name = f"{family}: {counted(sum([n for _, n in inner]), 'check')} passed ({counted(len(inner), 'kind')})"
        tokens += [", " if i else "", _opened(name), ', "steps": [']
        for k, (head, _) in enumerate(inner):
            tokens += [", " if k else "", head, _TIMES]
        tokens += ["]", _TIMES]
    tokens.append("]")
    pieces: list[str] = []
    piece: list[str] = []
    for token in tokens:
        if token is _TIMES:
            pieces.append("".join(piece))
            piece = []
        else:
            piece.append(str(token))
    return (*pieces, "".join(piece))
