"""`probe.preflight`: the probe pod could run the probes at all. Pure: judges a node's evidence, no I/O.

A failed preflight is the node's one finding, naming each failed step, its cause and the fix; the node's measured
checks skip with it as their cause (view.RunView.unmeasured_cause), never one error per metric.
"""

from __future__ import annotations

from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.view import PREFLIGHT, RunView
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

__all__ = ["PREFLIGHT", "decide_preflight", "judge_preflight"]


def judge_preflight(node: str, ev: NodeEvidence | None, problem: str | None) -> Finding:
    """The node's preflight from its evidence; `problem` says why the evidence cannot be used (node.reachable's)."""
    if problem is not None or ev is None or (not ev.collected and not ev.preflight_failed):
        why = problem or ("no evidence was written" if ev is None else "the probe did not run")
        return Finding(
            PREFLIGHT,
            CheckStatus.SKIP,
            node,
            None,
            f"{node}: {why}, so no preflight can be judged (see node.reachable)",
            cause=str(CheckKey("node.reachable", node)),
        )
    failed = ev.preflight_failed
    if failed:
        steps = "; ".join(f"{s.step}: {s.detail} (fix: {s.fix})" for s in failed)
        return Finding(
            PREFLIGHT,
            CheckStatus.FAIL,
            node,
            None,
            f"{node}: the probe pod cannot run the probes, so none ran: {steps}",
            observed=", ".join(s.step for s in failed),
        )
    if not ev.preflight:  # evidence of a probe older than the preflight: that the probes ran answers the question
        return Finding(PREFLIGHT, CheckStatus.PASS, node, None, f"{node}: no preflight recorded; the probes ran")
    found = ", ".join(f"{s.step} ({s.detail})" for s in ev.preflight)
    return Finding(PREFLIGHT, CheckStatus.PASS, node, None, f"{node}: preflight passed: {found}")


def decide_preflight(view: RunView, key: CheckKey) -> Finding:
    if key.node is None or key.check != PREFLIGHT:
        raise no_rule(key)
    return judge_preflight(key.node, view.usable(key.node), view.evidence_problem(key.node))
