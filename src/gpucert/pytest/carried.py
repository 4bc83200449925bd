"""A re-test's carried nodes, decided in the controller without a test item each (issue 28: a re-test pays for what
it re-measures).

A carried node's evidence is the source run's, byte for byte and verified (acceptance/retest.py). A check whose rule
reads nothing but the node's own evidence, entries and the run's spec and baselines keeps the pass its source run
signed where the same code decided it on the same inputs and the same node (acceptance/retest_kept.py says when);
every other check is decided by the same rules as every other check (`Evaluation.decide`, skips without a failing
cause turned into errors, failures offered to the waivers), over the whole run's evidence: checks that compare with
peers or pools still see every node. Collection parametrizes over the nodes measured now, and the verdict counts
the carried nodes' checks as ran, with these findings. So the verdict is the one a full re-evaluation gives
(tests/e2e/test_retest_decided.py and test_retest_kept.py compare both).

Node by node: a node's checks are decided together (evaluation.counted_node: what all of them ask, asked once), and
each has the node's start and stop as its outcome's times."""

from __future__ import annotations

import time
from itertools import repeat
from typing import TYPE_CHECKING

from gpucert.acceptance.retest_kept import Kept, kept_decisions
from gpucert.errors import GpucertError
from gpucert.evaluate.evaluation import counted_node
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.report import details
from gpucert.report.verdict import Outcome

if TYPE_CHECKING:
    from gpucert.pytest.context import RunContext

__all__ = ["decide_carried", "node_order"]

PASS = CheckStatus.PASS
NOT_PASSED = (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED)  # the findings whose evidence is kept


def decide_carried(ctx: RunContext) -> int:
    """Decide every required check of the carried nodes into the controller's outcomes, and count them as selected
    (they were not left out by -k or --deselect: they have no item). Returns how many were decided."""
    carried, record = ctx.carried, ctx.retest
    if not carried or record is None:  # carried nodes come from the re-test record (context.py)
        return 0
    grouped: dict[str | None, list[CheckKey]] = {node: [] for node in carried}
    of_node = grouped.get  # one lookup a key tells both whether its node is carried and its list (189,000 keys)
    for k in ctx.evaluation.plan.required:
        if (keys := of_node(k.node)) is not None:
            keys.append(k)
    by_node = {node: keys for node, keys in grouped.items() if node is not None and keys}
    kept = kept_decisions(ctx.evaluation, record, {node: len(keys) for node, keys in by_node.items()})
    ctx.kept = kept
    # node by node, in a fixed order (CheckKey.sort_key's): the plan's set has none, and a node's outcomes scattered
    # over the run's ~10^5 made the rules' and the reports' later passes over them slower (write_allure ~30%)
    outcomes: dict[CheckKey, Outcome] = {}
    for node in sorted(by_node):
        keys = node_order(by_node[node])
        start = time.time()
        findings = _decide_node(ctx, kept, node, keys)
        stop = time.time()
        outcomes.update(zip(keys, map(Outcome, findings, repeat(start), repeat(stop)), strict=True))
        for key, finding in [(k, f) for k, f in zip(keys, findings, strict=True) if f.status is not PASS]:
            if finding.status in NOT_PASSED:
                try:
                    ctx.evidence_of[key] = details.evidence_for(ctx.evaluation, finding)
                except GpucertError as exc:
                    ctx.evidence_of[key] = {"unreadable": str(exc)}
    ctx.outcomes.update(outcomes)  # from a dict: each key's hash as it keeps it, not computed again
    if ctx.selected is not None:  # None: the session never said what it collected, and nothing counts as selected
        ctx.selected.update(outcomes)
    return len(outcomes)


def node_order(keys: list[CheckKey]) -> list[CheckKey]:
    """One node's keys in `CheckKey.sort_key`'s order. Its keys share their node, so the tuples' own order (check,
    node, GPU, detail) is that order wherever it can compare them: sorted in C, without a Python call per key (a
    re-test's 188,000 carried keys). A check with keys of no GPU and of a GPU, or of no detail and of one, cannot
    be compared so (None against a number or a string): sorted by `sort_key`'s terms, then."""
    try:
        return sorted(keys)
    except TypeError:
        return sorted(keys, key=_in_node)


def _in_node(key: CheckKey) -> tuple[str, int, str]:
    """`CheckKey.sort_key` less the node, for keys of one node."""
    return key.check, -1 if key.gpu is None else key.gpu, key.detail or ""


def _decide_node(ctx: RunContext, kept: Kept, node: str, keys: list[CheckKey]) -> list[Finding]:
    """Each key's finding (the node's): its kept decision where `kept` keeps its check, else as a test item of its
    own would decide it (`counted_node`, which is `counted` key by key)."""
    local = kept.kept_checks(node, keys)
    if not local:
        return counted_node(ctx.evaluation, node, keys)
    decided = iter(counted_node(ctx.evaluation, node, [k for k in keys if k.check not in local]))
    said = iter(kept.findings([k for k in keys if k.check in local]))
    return [next(said) if k.check in local else next(decided) for k in keys]
