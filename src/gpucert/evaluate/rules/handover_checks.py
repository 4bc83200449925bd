"""The `handover` family as a run decides it: one node against its own handover baseline
(`baselines/nodes/<node>.yaml`), in the recertify suite. The judging is rules/handover.py's (pure, and read by the
handover recording, so it stays apart from the view)."""

from __future__ import annotations

import dataclasses

from gpucert.evaluate.locate import figure, gpu_evidence
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.drift import Earlier, board_history, drift_bar
from gpucert.evaluate.rules.drift_checks import pooled_of
from gpucert.evaluate.rules.handover import HandoverNoise, judge_against_handover, judge_identity, node_repeatability
from gpucert.evaluate.rules.performance import samples_of
from gpucert.evaluate.stats import summarize
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

__all__ = ["decide_against_handover", "decide_identity", "identity"]

SKIP, ERROR, FAIL = CheckStatus.SKIP, CheckStatus.ERROR, CheckStatus.FAIL
IDENTITY = "handover.identity"


def _no_handover(view: RunView, check: str, node: str, gpu: int | None) -> Finding | None:
    if view.recertification is None:
        return Finding(check, SKIP, node, gpu, "not a recertification: handover checks run in `gpucert recertify`")
    if view.handover is None:
        return Finding(check, SKIP, node, gpu, f"{node} has no handover baseline")
    return None


def identity(view: RunView, gpu: GpuSlot) -> Finding:
    """The GPU in this slot is the one recorded at handover (by serial, else by UUID)."""
    missing = _no_handover(view, IDENTITY, gpu.node, gpu.index)
    if missing is not None:
        return missing
    assert view.handover is not None
    g = gpu_evidence(view, IDENTITY, gpu)
    if isinstance(g, Finding):
        return g
    was = view.handover.gpu(gpu.index)
    if was is None:
        return Finding(IDENTITY, FAIL, gpu.node, gpu.index, f"{gpu!r} was not present at handover")
    return judge_identity(
        gpu.node,
        gpu.index,
        then_serial=was.serial,
        then_uuid=was.uuid,
        serial=g.serial,
        uuid=g.uuid,
        run=view.handover.recorded.run,
    )


def decide_identity(view: RunView, key: CheckKey) -> Finding:
    if key.node is None or key.gpu is None:
        raise no_rule(key)
    return identity(view, GpuSlot(key.node, key.gpu))


def _bar(view: RunView) -> float:
    """The multiplicity bar of every handover figure the run judges (identity is no figure)."""
    tests = sum(1 for k in view.plan.required if k.check.startswith("handover.") and k.check != IDENTITY)
    return drift_bar(tests, view.spec.certify.drift.confidence)


def _node_boards(view: RunView, node: str, metric: str) -> list[list[Earlier]]:
    """The earlier runs of each board now in `node`, of `metric`, from the run's history (by serial, same spec and
    SKU baseline; refused entries set aside)."""
    snapshot = view.history
    history = snapshot.nodes.get(node) if snapshot is not None else None
    ev = view.measured_node(node)
    if snapshot is None or history is None or ev is None:
        return []
    return [
        board_history(
            history.entries,
            spec=snapshot.spec,
            baseline=view.baseline_digest(node),
            gpu=g.index,
            serial=g.serial,
            metric=metric,
            refused=history.refused,
        ).earlier
        for g in ev.gpus
    ]


def _repeatability(view: RunView, node: str, gpu: int | None, metric: str) -> tuple[float | None, str]:
    """The board's run-to-run repeatability of `metric` and where it came from: pooled over the node's boards'
    own earlier runs where they are enough (rules/handover.node_repeatability), else over the boards' figures now
    against their history (the `drift` family's pooled estimate: one run of each, the handover's)."""
    if gpu is None:
        return None, "history holds GPUs' figures, not the node's"
    if view.history is None or view.history.nodes.get(node) is None:
        return None, f"no history of {node} in this run"
    pooled = view.once(f"handover.node/{node}/{metric}", lambda: node_repeatability(_node_boards(view, node, metric)))
    if pooled is not None:
        return pooled[0], f"pooled over the node's boards' earlier runs, {pooled[1]} degrees of freedom"
    across = pooled_of(view, node, metric)
    if across is not None:
        return across, f"pooled over pool {view.pools.name_of(node)}'s boards now against their history"
    return None, "too few runs and boards with history"


def _noise(view: RunView, node: str, gpu: int | None, metric: str) -> HandoverNoise:
    repeatability, source = _repeatability(view, node, gpu, metric)
    bar = view.once("handover.bar", lambda: _bar(view))
    return HandoverNoise(repeatability, source, bar, view.baseline_of(node).drift.limit)


def decide_against_handover(view: RunView, key: CheckKey) -> Finding:
    """`handover.<metric>`: the figure against the node's own handover median, beyond the baseline's drift limit
    and the multiplicity bar's standard errors of the difference (rules/handover.py)."""
    node, gpu, check = key.node, key.gpu, key.check
    if node is None:
        raise no_rule(key)
    metric = check.removeprefix("handover.")
    missing = _no_handover(view, check, node, gpu)
    if missing is not None:
        return missing
    assert view.handover is not None
    baseline = view.baseline_of(node)
    if metric not in baseline.metrics:
        return Finding(check, ERROR, node, gpu, f"the baseline {baseline.sku} has no figure for {metric}")
    swapped = gpu is not None and identity(view, GpuSlot(node, gpu)).status is FAIL
    if gpu is not None and swapped and view.handover.gpu(gpu) is not None:
        message = f"{node}/gpu{gpu} is not the GPU of handover (see handover.identity)"
        return Finding(check, SKIP, node, gpu, message, cause=str(CheckKey(IDENTITY, node, gpu)))
    now = figure(view, metric, node, gpu)
    if isinstance(now, Finding):
        return dataclasses.replace(now, check=check)
    was = view.handover.gpu(gpu) if gpu is not None else None
    rec = view.handover.node_metrics.get(metric) if gpu is None else (was.metrics.get(metric) if was else None)
    if rec is None:
        return Finding(
            check,
            ERROR,
            node,
            gpu,
            f"{metric} was not recorded at handover for this {'node' if gpu is None else 'GPU'}, so it cannot be "
            "compared; record a new handover baseline that covers the spec's probes",
        )
    ev = view.measured_node(node)
    return judge_against_handover(
        metric,
        node,
        gpu,
        now,
        now_spread=summarize(samples_of(ev, metric, gpu)).spread if ev is not None else 0.0,
        median=rec.median,
        spread=rec.spread,
        n=rec.n,
        unit=rec.unit,
        run=view.handover.recorded.run,
        higher_is_better=baseline.metrics[metric].comparison.value == "min",
        noise=_noise(view, node, gpu, metric),
    )
