"""The `drift` family as a run decides it: each GPU against its own history (inputs/history.json, the entries
verified against their signed runs when the run was prepared), in certification and recertification alike. The
judging is rules/drift.py's; `drift.combined` (the board on every metric at once) rules/combined.py's. When the
combined check fails, the board's per-metric drift findings that also fail skip naming it: one board, one finding."""

from __future__ import annotations

import dataclasses
import math

from gpucert.evaluate.locate import because, figure, gpu_evidence, skip
from gpucert.evaluate.registry import gpu_of, no_rule
from gpucert.evaluate.rules.combined import DRIFT_COMBINED, Combined, Key, judge_drift_combined
from gpucert.evaluate.rules.drift import (
    board_history,
    drift_bar,
    drift_fall,
    judge_drift,
    own_repeatability,
    pooled_repeatability,
    sampling_error,
)
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

__all__ = ["decide_drift", "decide_drift_combined", "pooled_of"]


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
    """`drift.<metric>` of one GPU: its figure now against its own earlier medians; skipped, naming it, when it
    fails and so does the board's `drift.combined`."""
    found = _judge_one(view, key)  # raises for a key that is not one GPU's
    combined = CheckKey(DRIFT_COMBINED, key.node, key.gpu)
    if (
        found.status is CheckStatus.FAIL
        and combined in view.plan
        and decide_drift_combined(view, combined).status is CheckStatus.FAIL
    ):
        why = f"{key.node}/gpu{key.gpu} fell on several metrics at once (see {combined}); {found.message}"
        return skip(key.check, key.node, key.gpu, why, str(combined))
    return found


def _judge_one(view: RunView, key: CheckKey) -> Finding:
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


def _falls(view: RunView, pool: str) -> tuple[dict[str, dict[Key, float]], dict[str, dict[Key, float]]]:
    """Every board of the pool with history, per drift metric: its fall against its own history (worse is
    positive) and that fall over its standard error, negated (worse is negative: what Combined sums), with the
    repeatability `decide_drift` uses (its own runs', else pooled over the pool's boards)."""
    snapshot = view.history
    falls: dict[str, dict[Key, float]] = {}
    zs: dict[str, dict[Key, float]] = {}
    metrics = sorted({k.check.removeprefix("drift.") for k in view.plan.required if k.check.startswith("drift.")})
    for metric in (m for m in metrics if m != "combined"):
        pooled = view.once(f"drift.pooled/{pool}/{metric}", lambda m=metric: _pooled(view, pool, m))  # type: ignore[misc]
        falls[metric], zs[metric] = {}, {}
        for node in view.pools.members(pool):
            ev = view.measured_node(node)
            history = snapshot.nodes.get(node) if snapshot is not None else None
            if ev is None or history is None or snapshot is None:
                continue
            higher = view.baseline_of(node).metrics[metric].comparison.value == "min"
            for g in ev.gpus:
                bh = board_history(history.entries, spec=snapshot.spec, baseline=view.baseline_digest(node),
                                   gpu=g.index, serial=g.serial, metric=metric, refused=history.refused)  # fmt: skip
                now = view.sampled(metric, node, g.index)
                if not bh.earlier or now is None:
                    continue
                own = own_repeatability(bh.earlier)
                rr = max(own if own is not None else pooled or 0.0, sampling_error(bh.earlier))
                fall, se = drift_fall(now.value, bh.earlier, rr, higher_is_better=higher)
                falls[metric][(node, g.index)] = fall
                zs[metric][(node, g.index)] = -fall / se if se > 0 else -math.copysign(math.inf, fall)
    return falls, zs


def decide_drift_combined(view: RunView, key: CheckKey) -> Finding:
    """`drift.combined` of one board: its fall on every drift metric at once, against its own history."""
    node, gpu = gpu_of(key, DRIFT_COMBINED)
    pool = view.pool_name(node)
    falls, zs = view.once(f"drift.combined/{pool}", lambda: _falls(view, pool))
    bar = view.once("drift.bar", lambda: _bar(view))
    combined = view.once(f"drift.combined.index/{pool}", lambda: Combined.of(zs, bar))  # a metric counts up to it
    mine = {m: per[(node, gpu)] for m, per in falls.items() if (node, gpu) in per}
    source = "its own runs where it has four, else pooled over the pool's boards"
    found = judge_drift_combined((node, gpu), combined, mine, bar=bar, limit=view.baseline_of(node).drift.limit,
                                 source=source)  # fmt: skip
    if found is not None:
        return found
    for metric in zs:  # fewer than two metrics told: the first metric whose check says why
        f = _judge_one(view, CheckKey(f"drift.{metric}", node, gpu))
        if f.status is not CheckStatus.PASS:
            cause = f.cause or because(f"drift.{metric}", node, gpu)
            return skip(DRIFT_COMBINED, node, gpu, f"{node}/gpu{gpu}: no drift.{metric} to combine ({f.message})",
                        cause)  # fmt: skip
    why = f"{node}/gpu{gpu}: fewer than two metrics with history to combine"
    return Finding(DRIFT_COMBINED, CheckStatus.ERROR, node, gpu, why)
