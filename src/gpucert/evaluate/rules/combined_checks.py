"""`straggler.combined` as a run decides it: each GPU against its node's peers on every per-GPU metric at once,
one statistic (rules/combined.py) over the z the per-metric straggler rule computes (peers.py). When it fails, the
GPU's per-metric straggler findings follow from it (performance_checks.judge_metric skips them naming it)."""

from __future__ import annotations

from gpucert.evaluate.locate import because, figure, skip
from gpucert.evaluate.registry import gpu_of
from gpucert.evaluate.rules.combined import COMBINED, judge_peer_combined
from gpucert.evaluate.view import RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

__all__ = ["combined_fails", "decide_combined"]


def decide_combined(view: RunView, key: CheckKey) -> Finding:
    node, gpu = gpu_of(key, COMBINED)
    combined, bar = view.peers.combined(view.pool_name(node))
    found = judge_peer_combined((node, gpu), combined, bar, "its node's peers")
    if found is not None:
        return found
    for metric in combined.zs:  # the dependency that is missing: a figure the GPU does not have, or its node's GPUs
        f = figure(view, metric, node, gpu)
        if isinstance(f, Finding):
            cause = f.cause or because(metric, node, gpu)
            return skip(COMBINED, node, gpu, f"{node}/gpu{gpu}: no {metric} figure to combine ({f.message})", cause)
    ev = view.usable(node)
    if ev is not None and len(ev.gpus) < view.pools.gpus_per_node(node):
        why = f"{node} shows {len(ev.gpus)} GPUs: too few peers on the node to combine (see inventory.gpus)"
        return skip(COMBINED, node, gpu, why, because("inventory.gpus", node))
    why = f"{node}/gpu{gpu}: fewer than two metrics could be compared with its node's peers"
    return Finding(COMBINED, CheckStatus.ERROR, node, gpu, why)


def combined_fails(view: RunView, node: str, gpu: int) -> bool:
    """Whether the run requires `straggler.combined` of the GPU and it fails (its per-metric stragglers follow)."""
    key = CheckKey(COMBINED, node, gpu)
    return key in view.plan and decide_combined(view, key).status is CheckStatus.FAIL
