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

import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence

from allure_commons.model2 import Label, Parameter, Status, StatusDetails, TestResult, TestStepResult

from gpucert.plan.checks import CheckKey, family_of
from gpucert.report.verdict import Outcome
from gpucert.report.verdict_model import Group

__all__ = ["FLEET", "counted", "passed_on", "shown", "spoken"]

FLEET = "@fleet"  # the fleet's own checks in Allure's ids ('@' is in no node name, DNS-1123: a node named `fleet` is
# a result of its own, not a retry of the fleet's; CheckKey's `check@fleet` names it the same way)

# one check's passed outcomes on one node: one per GPU, or the node's (fleet's) one, or one per detail (a component's
# stack.version, a rail's fabric.port)
Passed = Sequence[tuple[CheckKey, Outcome]]


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


def _span(outcomes: Passed, default_ms: int) -> tuple[int, int]:
    """From the first test's start to the last one's end (`default_ms` when the times were not recorded), in ms.
    The earliest start in seconds, then in ms: int(x * 1000) never decreases as x grows, so it is the earliest of
    the starts in ms, with one conversion instead of one a check (and the same for the end)."""
    first = min([o.start for _, o in outcomes if o.start], default=None)
    begin = default_ms if first is None else int(first * 1000)
    last = max([o.stop for _, o in outcomes if o.stop], default=None)
    return begin, begin if last is None else int(last * 1000)


def _check_step(check: str, outcomes: Passed, default_ms: int) -> TestStepResult:
    """One check that passed on a node: on how many GPUs, and which (parameter `gpus`); or for how many details
    (parameter `details`: the components, rails, DCGM tests) where it has several."""
    begin, end = _span(outcomes, default_ms)
    gpus = sorted([k.gpu for k, _ in outcomes if k.gpu is not None])
    details = sorted([k.detail for k, _ in outcomes if k.gpu is None and k.detail])
    name, parameters = check, []
    if gpus:
        name = f"{check} ({counted(len(gpus), 'GPU')})"
        parameters.append(Parameter("gpus", ",".join(map(str, gpus))))
    if details:
        name = f"{check} ({counted(len(outcomes), 'check')})" if len(outcomes) > 1 else check
        parameters.append(Parameter("details", ",".join(details)))
    return TestStepResult(name=name, status=Status.PASSED, start=begin, stop=end, parameters=parameters)


_SAID = {"fail": "; the node FAILED (see its failing checks)", "waived": "; the node passed with a waiver"}
_INCOMPLETE = " (INCOMPLETE: not every check ran)"


def passed_on(node: str | None, checks: Mapping[str, Passed], default_ms: int, said: Group | None) -> TestResult:
    """One result for every check that passed on `node` (None: the fleet's own checks), as `said` (the verdict's
    group of the node) counts them: a step per check family, each check a step of it."""
    by_family: dict[str, list[tuple[int, TestStepResult]]] = defaultdict(list)
    for check, outcomes in sorted(checks.items()):
        by_family[family_of(check).value].append((len(outcomes), _check_step(check, outcomes, default_ms)))
    steps = [
        TestStepResult(
            name=f"{family}: {counted(sum(n for n, _ in inner), 'check')} passed ({counted(len(inner), 'kind')})",
            status=Status.PASSED,
            start=min(s.start for _, s in inner),
            stop=max(s.stop for _, s in inner),
            steps=[s for _, s in inner],
        )
        for family, inner in by_family.items()
    ]
    n = sum(len(o) for o in checks.values())
    where, token = spoken(node), shown(node)
    result = said.result if said is not None else "pass"
    incomplete = result == "incomplete"
    why = f"{where} is INCOMPLETE: not every required check ran on it (see the certification's coverage)"
    return TestResult(
        uuid=str(uuid.uuid4()),
        name=f"{counted(n, 'check')} passed on {where} ({counted(len(checks), 'kind')})"
        + (_INCOMPLETE if incomplete else _SAID.get(result, "")),
        fullName=f"gpucert.passed[{token}]",
        historyId=f"passed[{token}]",
        status=Status.BROKEN if incomplete else Status.PASSED,
        statusDetails=StatusDetails(message=why) if incomplete else None,
        start=min(s.start for s in steps),
        stop=max(s.stop for s in steps),
        steps=steps,
        labels=[
            Label("epic", "passed"),
            Label("feature", "passed checks"),
            Label("story", token),
            Label("suite", "passed checks"),
        ],
        parameters=[Parameter("node", token)],
    )
