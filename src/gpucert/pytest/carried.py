"""A re-test's carried nodes, decided in the controller without a test item each (issue 28: a re-test pays for what
it re-measures).

A carried node's evidence is the source run's, byte for byte and verified (acceptance/retest.py). A check whose rule
reads nothing but the node's own evidence, entries and the run's spec and baselines keeps the pass its source run
signed where the same code decided it on the same inputs and the same node (acceptance/retest_kept.py says when);
every other check is decided by the same rules as every other check (`Evaluation.decide`, skips without a failing
cause turned into errors, failures offered to the waivers), over the whole run's evidence: checks that compare with
peers or pools still see every node. Collection parametrizes over the nodes measured now, and the verdict counts
the carried nodes' checks as ran, with these findings. So the verdict is the one a full re-evaluation gives
(tests/e2e/test_retest_decided.py and test_retest_kept.py compare both)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gpucert.acceptance.retest_kept import kept_decisions
from gpucert.errors import GpucertError
from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.pytest.gpus import decided
from gpucert.report import details
from gpucert.report.verdict import Outcome

if TYPE_CHECKING:
    from gpucert.pytest.context import RunContext

__all__ = ["decide_carried"]


def decide_carried(ctx: RunContext) -> int:
    """Decide every required check of the carried nodes into the controller's outcomes, and count them as selected
    (they were not left out by -k or --deselect: they have no item). Returns how many were decided."""
    carried, record = ctx.carried, ctx.retest
    if not carried or record is None:  # carried nodes come from the re-test record (context.py)
        return 0
    # node by node, in a fixed order: the plan's set has none, and a node's outcomes scattered over the run's
    # ~10^5 made the rules' and the reports' later passes over them slower (write_allure ~30%)
    keys = sorted((k for k in ctx.evaluation.plan.required if k.node in carried), key=CheckKey.sort_key)
    kept = kept_decisions(ctx.evaluation, record)
    ctx.kept = kept
    for key in keys:
        start = time.time()
        finding = kept.finding(key) if kept.keeps(key) else decided(ctx, key)
        ctx.outcomes[key] = Outcome(finding, start, time.time())
        if finding.status in (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED):
            try:
                ctx.evidence_of[key] = details.evidence_for(ctx.evaluation, finding)
            except GpucertError as exc:
                ctx.evidence_of[key] = {"unreadable": str(exc)}
    if ctx.selected is not None:  # None: the session never said what it collected, and nothing counts as selected
        ctx.selected |= set(keys)
    return len(keys)
