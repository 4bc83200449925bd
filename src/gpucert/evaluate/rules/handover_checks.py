"""The `handover` family as a run decides it: one node against its own handover baseline
(`baselines/nodes/<node>.yaml`), in the recertify suite. The judging is rules/handover.py's (pure, and read by the
handover recording, so it stays apart from the view)."""

from __future__ import annotations

import dataclasses

from gpucert.evaluate.locate import figure, gpu_evidence
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.handover import judge_against_handover, judge_identity
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


def decide_against_handover(view: RunView, key: CheckKey) -> Finding:
    """`handover.<metric>`: the figure against the node's own handover median, within max(3 x recorded spread,
    3 %)."""
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
    return judge_against_handover(
        metric,
        node,
        gpu,
        now,
        median=rec.median,
        spread=rec.spread,
        n=rec.n,
        unit=rec.unit,
        run=view.handover.recorded.run,
        higher_is_better=baseline.metrics[metric].comparison.value == "min",
    )
