"""A per-GPU check is one item per check and node (issue 28): each GPU's finding is decided as an item of its own
would have decided it, and the item's outcome says the GPU status that says most, naming every GPU that did not
pass. Pure: a stand-in for the run's Evaluation, no pytest session."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.pytest.gpus import GpuChecks, decide_gpus
from gpucert.pytest.outcomes import CheckFailed, CheckSkipped, expect

PASS, FAIL, ERROR, SKIP, WAIVED = (
    CheckStatus.PASS,
    CheckStatus.FAIL,
    CheckStatus.ERROR,
    CheckStatus.SKIP,
    CheckStatus.WAIVED,
)
CHECK = "memory.bandwidth"
NODE = "gpu-node-3"


class Evaluation:
    """Decides each GPU as `found` says (an exception is raised), waives GPU 5's failure."""

    def __init__(self, found: dict[int, Finding | Exception]) -> None:
        self.found = found

    def decide(self, key: CheckKey) -> Finding:
        said = self.found.get(key.gpu or 0, Finding(key.check, PASS, key.node, key.gpu, "2900 GB/s"))
        if isinstance(said, Exception):
            raise said
        return said

    def waive(self, finding: Finding, key: CheckKey | None = None) -> Finding:
        return dataclasses.replace(finding, status=WAIVED, waiver="waivers[0]") if finding.gpu == 5 else finding


class Ctx:
    def __init__(self, found: dict[int, Finding | Exception]) -> None:
        self.evaluation = Evaluation(found)


def keys(n: int = 8) -> tuple[CheckKey, ...]:
    return tuple(CheckKey(CHECK, NODE, i) for i in range(n))


def finding(gpu: int, status: CheckStatus, message: str = "", cause: str | None = None) -> Finding:
    return Finding(CHECK, status, NODE, gpu, message, cause=cause)


def decide(found: dict[int, Finding | Exception]) -> GpuChecks:
    ctx: Any = Ctx(found)
    return decide_gpus(ctx, keys())


def test_each_gpu_is_decided_as_an_item_of_its_own_would_be() -> None:
    checks = decide(
        {
            1: finding(1, FAIL, "2487 GB/s below the limit"),
            2: ZeroDivisionError("no samples"),
            3: finding(3, SKIP, "behind as a node", cause=f"straggler.memory.bandwidth@{NODE}"),
            4: finding(4, SKIP, "no evidence of it"),
            5: finding(5, FAIL, "slow, but accepted"),
        }
    )
    by_gpu = {f.gpu: f for f in checks.findings}
    assert [f.gpu for f in checks.findings] == list(range(8))
    assert by_gpu[0] == Finding(CHECK, PASS, NODE, 0)  # the bare pass a passed item reports, not the rule's words
    assert by_gpu[1].status is FAIL
    # an exception in one GPU's rule is that GPU's error, worded as an item's error; the other GPUs are decided
    assert (by_gpu[2].status, by_gpu[2].message) == (ERROR, "the check could not run: ZeroDivisionError: no samples")
    assert by_gpu[3].status is SKIP  # a skip with its failing cause stands
    assert by_gpu[4].status is ERROR  # fail closed: a skip without a failing cause has not passed
    assert (by_gpu[5].status, by_gpu[5].waiver) == (WAIVED, "waivers[0]")
    assert checks.status is ERROR


@pytest.mark.parametrize(
    ("found", "raised", "status"),
    [
        ({}, None, PASS),
        ({5: finding(5, FAIL, "accepted")}, CheckFailed, WAIVED),  # the item's report makes it an xfail
        ({3: finding(3, SKIP, "behind", cause="x@n")}, CheckSkipped, SKIP),
        ({3: finding(3, SKIP, "behind", cause="x@n"), 5: finding(5, FAIL, "accepted")}, CheckSkipped, SKIP),
        ({3: finding(3, SKIP, "behind", cause="x@n"), 1: finding(1, FAIL, "slow")}, CheckFailed, FAIL),
    ],
)
def test_the_item_says_the_status_that_says_most(
    found: dict[int, Finding | Exception], raised: type[Exception] | None, status: CheckStatus
) -> None:
    checks = decide(found)
    assert checks.status is status
    if raised is None:
        expect(checks)
        return
    with pytest.raises(raised) as exc:
        expect(checks)
    assert exc.value.findings == checks.findings  # type: ignore[attr-defined]  # every GPU's, for the controller


def test_the_message_names_every_gpu_that_did_not_pass_one_line_each() -> None:
    checks = decide(
        {
            1: finding(1, FAIL, "gpu-node-3/gpu1 2487 GB/s below the limit 2668"),
            5: finding(5, FAIL, "gpu-node-3/gpu5 2600 GB/s, accepted"),
            6: finding(6, SKIP, "behind as a node", cause=f"straggler.memory.bandwidth@{NODE}"),
        }
    )
    with pytest.raises(CheckFailed) as exc:
        expect(checks)
    assert str(exc.value).splitlines() == [
        f"[{CHECK}] {NODE}: 3 of 8 GPUs did not pass (1 fail, 1 waived, 1 skip)",
        f"  [{CHECK}] gpu1 fail: gpu-node-3/gpu1 2487 GB/s below the limit 2668",
        f"  [{CHECK}] gpu5 waived: gpu-node-3/gpu5 2600 GB/s, accepted",
        f"  [{CHECK}] gpu6 skip: behind as a node (follows from straggler.memory.bandwidth@{NODE})",
    ]


def test_each_gpu_line_and_the_label_name_the_check_that_gpu_was_decided_as() -> None:
    """A GPU behind its peers fails `straggler.<metric>`, one unstable `stability.<metric>`, in the item of the
    metric's check: the message's label names the checks that failed, each GPU's line its own (a waiver written
    from the message names the check the verdict lists)."""
    straggler, stability = f"straggler.{CHECK}", f"stability.{CHECK}"
    checks = decide(
        {
            2: Finding(stability, FAIL, NODE, 2, "gpu-node-3/gpu2 unstable"),
            6: Finding(straggler, FAIL, NODE, 6, "gpu-node-3/gpu6 behind its peers"),
            7: finding(7, SKIP, "behind as a node", cause=f"straggler.{CHECK}@{NODE}"),
        }
    )
    with pytest.raises(CheckFailed) as exc:
        expect(checks)
    assert str(exc.value).splitlines() == [
        f"[{stability}, {straggler}] {NODE}: 3 of 8 GPUs did not pass (2 fail, 1 skip)",
        f"  [{stability}] gpu2 fail: gpu-node-3/gpu2 unstable",
        f"  [{straggler}] gpu6 fail: gpu-node-3/gpu6 behind its peers",
        f"  [{CHECK}] gpu7 skip: behind as a node (follows from straggler.{CHECK}@{NODE})",
    ]
    one = decide({6: Finding(straggler, FAIL, NODE, 6, "gpu-node-3/gpu6 behind its peers")})
    with pytest.raises(CheckFailed) as exc:
        expect(one)
    assert str(exc.value).startswith(f"[{straggler}] {NODE}: 1 of 8 GPUs did not pass (1 fail)\n  [{straggler}] gpu6")
