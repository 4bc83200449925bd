"""A per-GPU check decided on each of a node's GPUs inside one test item (issue 28): the item's GPUs' findings,
each as the controller counts it, and the words the item's outcome says them in.

Each GPU's finding is what a test item of its own would have decided (evaluate/evaluation.py `counted`, asked node
by node: `counted_node`): the rule's finding, a skip without a failing cause turned into an error (fail closed), a
failure offered to the waivers, an exception in the rule the check's error. The item then fails when any GPU's
check failed or could not run, else skips when any skipped for a cause, else is an expected failure (xfail) when any
was waived, else passes; its message names every GPU that did not pass, one line each. The verdict counts every
GPU's finding as its own check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucert.evaluate.evaluation import counted_node, settled
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

if TYPE_CHECKING:
    from gpucert.pytest.context import RunContext

__all__ = ["RANK", "GpuChecks", "decide_gpus", "final"]

# how much a status says: an item (and the controller, between an item's reports) keeps the one that says most
RANK = {CheckStatus.PASS: 0, CheckStatus.WAIVED: 1, CheckStatus.SKIP: 2, CheckStatus.FAIL: 3, CheckStatus.ERROR: 4}


def final(ctx: RunContext, finding: Finding, key: CheckKey) -> Finding:
    """A finding (the decision of `key`) as the controller counts it (evaluate/evaluation.py `settled`)."""
    return settled(ctx.evaluation, finding, key)


@dataclass(frozen=True, slots=True)
class GpuChecks:
    """What one check decided on each of a node's GPUs: the `decision` of a `gpus` test item."""

    check: str
    node: str
    findings: tuple[Finding, ...]

    @property
    def status(self) -> CheckStatus:
        """The item's word: the GPU status that says most (pass only when every GPU passed)."""
        return max((f.status for f in self.findings), key=RANK.__getitem__, default=CheckStatus.PASS)

    def summary(self) -> Finding:
        """One finding for the item, its message naming each GPU that did not pass (what pytest's reports show),
        labelled by the check ids its GPUs of the item's status were decided as: a GPU behind its peers fails
        `straggler.<metric>`, not the item's `<metric>`, and a waiver written from the label must name that."""
        status = self.status
        said = sorted({f.check for f in self.findings if f.status is status}) or [self.check]
        return Finding(", ".join(said), status, self.node, None, gpu_lines(self.node, self.findings))


def gpu_lines(node: str, findings: tuple[Finding, ...]) -> str:
    """`gpu-node-1: 2 of 8 GPUs did not pass (1 fail, 1 waived)` and one line for each of those GPUs with its check
    id and why (`[straggler.compute.gemm.bf16] gpu6 fail: ...`): the GPUs of one item may fail different checks."""
    bad = [f for f in findings if f.status is not CheckStatus.PASS]
    counts: dict[str, int] = {}
    for f in bad:
        counts[f.status.value] = counts.get(f.status.value, 0) + 1
    said = ", ".join(f"{n} {status}" for status, n in counts.items())
    lines = [f"{node}: {len(bad)} of {len(findings)} GPUs did not pass ({said})"]
    for f in bad:
        why = f.message or f.status.value
        if f.cause is not None:
            why += f" (follows from {f.cause})"
        lines.append(f"  [{f.check}] gpu{f.gpu} {f.status.value}: {why}")
    return "\n".join(lines)


def decide_gpus(ctx: RunContext, keys: tuple[CheckKey, ...]) -> GpuChecks:
    """Decide the check on each GPU `keys` names (one node's, each as `counted` would: evaluation.counted_node, which
    asks the node's questions once): a GPU that passed has the bare pass finding a passed test item reports
    (outcomes.py), every other GPU its decided finding."""
    first = keys[0]
    findings = [
        Finding(key.check, CheckStatus.PASS, key.node, key.gpu) if finding.status is CheckStatus.PASS else finding
        for key, finding in zip(keys, counted_node(ctx.evaluation, first.node or "", keys), strict=True)
    ]
    return GpuChecks(first.check, first.node or "", tuple(findings))
