"""The `drift` family as a run decides it: each GPU against its own history (inputs/history.json, the entries
verified against their signed runs when the run was prepared), in certification and recertification alike. The
judging is rules/drift.py's."""

from __future__ import annotations

import dataclasses

from gpucert.evaluate.locate import figure, gpu_evidence
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.drift import (
    board_history,
    drift_bar,
    judge_drift,
    own_repeatability,
    pooled_repeatability,
)
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

__all__ = ["decide_drift", "pooled_of"]


def _pooled(view: RunView, pool: str, metric: str) -> float | None:
    """The run-to-run repeatability pooled over the pool's boards in this run that have history of `metric`."""
    snapshot = view.history
    ratios: list[float] = []
    runs: list[int] = []
    for node in view.pools.members(pool):
        ev = view.measured_node(node)
        history = snapshot.nodes.get(node) if snapshot is not None else None
        if ev is None or history is None:
            continue
        for g in ev.gpus:
            spec = snapshot.spec if snapshot else ""
            digest = view.baseline_digest(node)
            bh = board_history(history.entries, spec=spec, baseline=digest, gpu=g.index, serial=g.serial, metric=metric)
            now = view.sampled(metric, node, g.index)
            if bh.earlier and now is not None:
                ratios.append(now.value / (sum(e.median for e in bh.earlier) / len(bh.earlier)))
                runs.append(len(bh.earlier))
    return pooled_repeatability(ratios, runs)


def pooled_of(view: RunView, node: str, metric: str) -> float | None:
    """The run-to-run repeatability of `metric` pooled over the boards of `node`'s pool (computed once per run and
    pool); None for a node in no pool or too few boards with history. `handover.<metric>` reads it too."""
    pool = view.pools.name_of(node)
    return view.once(f"drift.pooled/{pool}/{metric}", lambda: _pooled(view, pool, metric) if pool else None)


def _bar(view: RunView) -> float:
    tests = sum(1 for k in view.plan.required if k.check.startswith("drift."))
    return drift_bar(tests, view.spec.certify.drift.confidence)


def decide_drift(view: RunView, key: CheckKey) -> Finding:
    """`drift.<metric>` of one GPU: its figure now against its own earlier medians."""
    node, gpu, check = key.node, key.gpu, key.check
    if node is None or gpu is None:
        raise no_rule(key)
    metric = check.removeprefix("drift.")
    now = figure(view, metric, node, gpu)
    if isinstance(now, Finding):
        return dataclasses.replace(now, check=check)
    g = gpu_evidence(view, metric, GpuSlot(node, gpu))  # the evidence of the metric's probe
    if isinstance(g, Finding):
        return dataclasses.replace(g, check=check)
    snapshot = view.history
    history = snapshot.nodes.get(node) if snapshot is not None else None
    if snapshot is None or history is None:
        return Finding(check, CheckStatus.ERROR, node, gpu, f"{node} has no history in this run to compare with")
    bh = board_history(history.entries, spec=snapshot.spec, baseline=view.baseline_digest(node), gpu=gpu,
                       serial=g.serial, metric=metric, refused=history.refused)  # fmt: skip
    said = "; ".join([*(bh.refused), *([bh.replaced] if bh.replaced else [])])
    if not bh.earlier:
        why = f"{node}/gpu{gpu} {metric}: no earlier run of board {g.serial} can be used ({said or 'none recorded'})"
        return Finding(check, CheckStatus.ERROR, node, gpu, why)
    pool = view.pools.name_of(node)
    own = own_repeatability(bh.earlier)
    pooled = pooled_of(view, node, metric)
    repeatability = own if own is not None else pooled
    ev = view.measured_node(node)
    found = judge_drift(
        metric,
        node,
        gpu,
        now,
        bh.earlier,
        repeatability=repeatability,
        bar=view.once("drift.bar", lambda: _bar(view)),
        limit=view.baseline_of(node).drift.limit,
        higher_is_better=view.baseline_of(node).metrics[metric].comparison.value == "min",
        driver=ev.system.driver_version if ev is not None and ev.system is not None else None,
        firmware=g.vbios,
    )
    source = "its own runs" if own is not None else f"pooled over pool {pool}'s boards"
    message = found.message.replace("run-to-run repeatability", f"run-to-run repeatability ({source})", 1)
    return dataclasses.replace(found, message=message + (f"; {said}" if said else ""))
