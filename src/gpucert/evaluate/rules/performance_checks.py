"""The measured families (`memory`, `compute.gemm`, `pcie`, `p2p`, `nccl`) and `straggler` as a run decides them:
a measured figure against its pool's SKU baseline, then against its peers (the node as a whole against the pool's
other nodes, the GPU against its node's and its pool's GPUs, its samples' stability against theirs). A GPU's
straggler and stability findings are its metric's check's (one test per figure); `straggler.<metric>` of a node is
the node as a whole. The rules are rules/performance.py's and rules/stragglers.py's, the peers peers.py's. A GPU
behind on several metrics at once is one `straggler.combined` finding (combined_checks.py): its per-metric
straggler findings skip naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpucert.evaluate.locate import figure, node_evidence, told_figures
from gpucert.evaluate.peers import unstable_is_judged
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.combined import COMBINED
from gpucert.evaluate.rules.combined_checks import combined_fails
from gpucert.evaluate.rules.performance import Sampled, against_baseline, baseline_passes
from gpucert.evaluate.rules.stragglers import MIN_PEERS
from gpucert.evaluate.view import RunView
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import FABRIC_METRICS, GPU_METRICS, METRICS, CheckKey, CheckStatus, Finding

__all__ = ["decide_metric", "decide_node_straggler", "decided_as", "judge_metric", "node_straggler", "quiet_passes"]

PASS, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP


def _skip(check: str, node: str, gpu: int | None, message: str, cause: CheckKey) -> Finding:
    return Finding(check, SKIP, node, gpu, message, cause=str(cause))


def judge_metric(view: RunView, metric: str, node: str, gpu: int | None) -> Finding:
    """Against the baseline first; inside it, the node as a whole against the other nodes of its pool (one
    finding: its GPUs' checks skip), then the GPU against its peers, then its samples' stability against theirs."""
    baseline = view.baseline_of(node)
    if metric not in baseline.metrics:
        return Finding(metric, ERROR, node, gpu, f"the baseline {baseline.sku} has no figure for {metric}")
    bar = baseline.metrics[metric]
    sampled = figure(view, metric, node, gpu)  # told from its pool's index where nothing stands in its way
    if isinstance(sampled, Finding):
        return sampled
    base = against_baseline(metric, (node, gpu), sampled, bar)
    index = view.peers.index(metric, view.pool_name(node))
    if base.status is not PASS:  # outside the baseline: its peers are not asked
        return base
    whole = index.node_level(node) if gpu is not None else None
    if whole is not None and whole.status is FAIL:
        message = f"{node} as a whole is behind the other nodes on {metric} (see straggler.{metric}@{node})"
        return _skip(metric, node, gpu, message, CheckKey(f"straggler.{metric}", node))
    stability = unstable_is_judged(metric)
    if index.quiet((node, gpu), stability=stability):  # in line with its peers, stable, nothing to note: most GPUs
        return base
    # the one finding the check gives is worded; the others are only weighed
    behind = index.behind((node, gpu))
    if gpu is not None and behind and combined_fails(view, node, gpu):
        message = f"{node}/gpu{gpu} is behind on several metrics at once (see {COMBINED}@{node}/gpu{gpu})"
        on = index.judge((node, gpu)).message
        return _skip(metric, node, gpu, f"{message}; on {metric}: {on}", CheckKey(COMBINED, node, gpu))
    if behind:
        return index.judge((node, gpu))
    if stability and index.unstable((node, gpu)):
        return index.stability((node, gpu)) or base
    notes = index.notes((node, gpu), stability=stability)  # comparisons too few peers allow
    return dataclasses.replace(base, message="; ".join([base.message, *notes])) if notes else base


def quiet_passes(view: RunView, metric: str, node: str, gpus: Sequence[int]) -> list[Finding | None]:
    """`judge_metric` of each of the node's `gpus` where it is the baseline's pass of a GPU its peers pass quietly
    (most of a fleet's), else None (ask `judge_metric`: the one path that words the rest). The node's questions
    (its baseline, pool, peers' index and node-level finding, which `judge_metric` asks of each GPU) asked once:
    a re-test decides a carried node's GPUs of a metric at once (pytest/carried.py)."""
    bar = view.baseline_of(node).metrics.get(metric)
    if bar is None:
        return [None] * len(gpus)
    index = view.peers.index(metric, view.pool_name(node))
    whole = index.node_level(node)
    if whole is not None and whole.status is FAIL:  # its GPUs' checks skip, naming it
        return [None] * len(gpus)
    stability, quiet = unstable_is_judged(metric), index.quiet
    told = told_figures(view, metric, node, gpus)
    # each GPU's figure (its pool's index's, else `figure`'s), kept where its peers pass it quietly, in one
    # comprehension: (its place in `gpus`, the GPU, its figure)
    at = [
        (i, gpu, sampled)
        for i, (gpu, found) in enumerate(zip(gpus, told, strict=True))
        if isinstance(sampled := found if found is not None else figure(view, metric, node, gpu), Sampled)
        and quiet((node, gpu), stability=stability)
    ]
    passes = baseline_passes(metric, node, [(gpu, sampled) for _, gpu, sampled in at], bar)
    if len(at) == len(gpus):  # every GPU quiet (most nodes): the passes in `gpus`' order
        return passes
    out: list[Finding | None] = [None] * len(gpus)
    for (i, _, _), passed in zip(at, passes, strict=True):
        out[i] = passed
    return out


def decided_as(check: str) -> tuple[str, ...]:
    """The check ids a key of `check` may be decided as: a measured figure's (`memory.bandwidth`) is its own, or the
    GPU's (or node's) `straggler.<metric>` behind its peers, or `stability.<metric>` where samples over time are
    judged (`judge_metric`); any other check is decided as itself."""
    if check not in METRICS or check in FABRIC_METRICS:  # the figure across nodes: multinode.py's, its own id
        return (check,)
    return (check, f"straggler.{check}", *((f"stability.{check}",) if unstable_is_judged(check) else ()))


def decide_metric(view: RunView, key: CheckKey) -> Finding:
    if key.node is None:
        raise no_rule(key)
    return judge_metric(view, key.check, key.node, key.gpu)


def node_straggler(view: RunView, metric: str, node: str) -> Finding:
    """`straggler.<metric>` of the node as a whole: the median of its GPUs against the other nodes' of its pool."""
    check = f"straggler.{metric}"
    if metric not in view.baseline_of(node).metrics:
        return Finding(
            check, ERROR, node, None, f"the baseline {view.baseline_of(node).sku} has no figure for {metric}"
        )
    node_ev = node_evidence(view, metric, node)
    if not isinstance(node_ev, NodeEvidence):
        return dataclasses.replace(node_ev, check=check)
    pool = view.pool_name(node)
    index = view.peers.index(metric, pool)
    found = index.node_level(node)
    if found is not None:
        return found
    if not any(k[0] == node for k in index.values):  # none of its GPUs has a figure to believe: theirs is
        bad = [f for g in node_ev.gpus if (f := judge_metric(view, metric, node, g.index)).status in (FAIL, ERROR)]
        because = CheckKey(metric, node, bad[0].gpu) if bad else CheckKey("inventory.gpus", node)
        return _skip(check, node, None, f"{node} has no {metric} figure to compare (see {because})", because)
    why = f"{len({k[0] for k in index.values}) - 1} other node(s) have a figure: the rule needs {MIN_PEERS}"
    for other in view.pools.members(pool):  # the first of the pool's nodes that was not measured, or had no GPU
        other_ev = view.usable(other)
        if other_ev is None or not other_ev.collected or not other_ev.gpus:
            unmeasured = other_ev is None or not other_ev.collected
            cause = view.unmeasured_cause(other) if unmeasured else CheckKey("inventory.gpus", other)
            return _skip(check, node, None, f"{why}; not every node of the pool was measured", cause)
    return Finding(check, ERROR, node, None, f"{why}, though every node was measured")


def decide_node_straggler(view: RunView, key: CheckKey) -> Finding:
    """`straggler.<metric>@node` of a per-GPU metric (a GPU's straggler finding is its metric's check's)."""
    metric = key.check.removeprefix("straggler.")
    if key.node is None or key.gpu is not None or metric not in GPU_METRICS:
        raise no_rule(key)
    return node_straggler(view, metric, key.node)
