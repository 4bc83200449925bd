"""The certify suite's performance decisions: a measured figure against its pool's SKU baseline, then against its
peers (the node as a whole against the pool's other nodes, the GPU against its node's and its pool's GPUs, its
samples' stability against theirs). Reads through the Evaluation; the rules are analysis/performance.py's and
analysis/stragglers.py's, the peers peers.py's.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gpucert.evaluate.peers import unstable_is_judged
from gpucert.evaluate.rules.performance import against_baseline
from gpucert.evaluate.rules.stragglers import MIN_PEERS
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation

__all__ = ["judge_metric", "node_straggler"]

PASS, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP


def _skip(check: str, node: str, gpu: int | None, message: str, cause: CheckKey) -> Finding:
    return Finding(check, SKIP, node, gpu, message, cause=str(cause))


def _pool(ev: Evaluation, node: str) -> str:
    pool = ev.pools.name_of(node)
    assert pool is not None  # decide() answered for a node outside exactly one pool
    return pool


def judge_metric(ev: Evaluation, metric: str, node: str, gpu: int | None) -> Finding:
    """Against the baseline first; inside it, the node as a whole against the other nodes of its pool (one
    finding: its GPUs' checks skip), then the GPU against its peers, then its samples' stability against theirs."""
    baseline = ev.baseline_of(node)
    if metric not in baseline.metrics:
        return Finding(metric, ERROR, node, gpu, f"the baseline {baseline.sku} has no figure for {metric}")
    sampled = ev._figure(metric, node, gpu)
    if isinstance(sampled, Finding):
        return sampled
    base = against_baseline(metric, (node, gpu), sampled, baseline.metrics[metric])
    index = ev.peers.index(metric, _pool(ev, node))
    whole = index.node_level(node) if gpu is not None and base.status is PASS else None
    if whole is not None and whole.status is FAIL:
        message = f"{node} as a whole is behind the other nodes on {metric} (see straggler.{metric}@{node})"
        return _skip(metric, node, gpu, message, CheckKey(f"straggler.{metric}", node))
    stable = index.stability((node, gpu)) if unstable_is_judged(metric) else None
    for found in (base, index.judge((node, gpu)), stable):
        if found is not None and found.status is not PASS:
            return found
    notes = index.notes((node, gpu), stability=unstable_is_judged(metric))  # comparisons too few peers allow
    return dataclasses.replace(base, message="; ".join([base.message, *notes])) if notes else base


def node_straggler(ev: Evaluation, metric: str, node: str) -> Finding:
    """`straggler.<metric>` of the node as a whole: the median of its GPUs against the other nodes' of its pool."""
    check = f"straggler.{metric}"
    if metric not in ev.baseline_of(node).metrics:
        return Finding(check, ERROR, node, None, f"the baseline {ev.baseline_of(node).sku} has no figure for {metric}")
    node_ev = ev._node_evidence(metric, node)
    if not isinstance(node_ev, NodeEvidence):
        return dataclasses.replace(node_ev, check=check)
    pool = _pool(ev, node)
    index = ev.peers.index(metric, pool)
    found = index.node_level(node)
    if found is not None:
        return found
    if not any(k[0] == node for k in index.values):  # none of its GPUs has a figure to believe: theirs is
        bad = [f for g in node_ev.gpus if (f := judge_metric(ev, metric, node, g.index)).status in (FAIL, ERROR)]
        because = CheckKey(metric, node, bad[0].gpu) if bad else CheckKey("inventory.gpus", node)
        return _skip(check, node, None, f"{node} has no {metric} figure to compare (see {because})", because)
    why = f"{len({k[0] for k in index.values}) - 1} other node(s) have a figure: the rule needs {MIN_PEERS}"
    for other in ev.pools.members(pool):  # the first of the pool's nodes that was not measured, or had no GPU
        other_ev = ev.usable(other)
        if other_ev is None or not other_ev.collected or not other_ev.gpus:
            unmeasured = other_ev is None or not other_ev.collected
            cause = ev.unmeasured_cause(other) if unmeasured else CheckKey("inventory.gpus", other)
            return _skip(check, node, None, f"{why}; not every node of the pool was measured", cause)
    return Finding(check, ERROR, node, None, f"{why}, though every node was measured")
