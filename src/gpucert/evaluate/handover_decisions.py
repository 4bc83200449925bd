"""The recertify suite's decisions: one node against its own handover baseline (`baselines/nodes/<node>.yaml`).
Reads through the Evaluation; the judging rules are analysis/handover.py's."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gpucert.evaluate.rules.handover import judge_against_handover, judge_identity
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation, GpuSlot

__all__ = ["against_handover", "identity"]

SKIP, ERROR, FAIL = CheckStatus.SKIP, CheckStatus.ERROR, CheckStatus.FAIL


def _no_handover(ev: Evaluation, check: str, node: str, gpu: int | None) -> Finding | None:
    if ev.recertification is None:
        return Finding(check, SKIP, node, gpu, "not a recertification: handover checks run in `gpucert recertify`")
    if ev.handover is None:
        return Finding(check, SKIP, node, gpu, f"{node} has no handover baseline")
    return None


def identity(ev: Evaluation, gpu: GpuSlot) -> Finding:
    """The GPU in this slot is the one recorded at handover (by serial, else by UUID)."""
    check = "handover.identity"
    missing = _no_handover(ev, check, gpu.node, gpu.index)
    if missing is not None:
        return missing
    assert ev.handover is not None
    g = ev._gpu_evidence(check, gpu)
    if isinstance(g, Finding):
        return g
    was = ev.handover.gpu(gpu.index)
    if was is None:
        return Finding(check, FAIL, gpu.node, gpu.index, f"{gpu!r} was not present at handover")
    return judge_identity(
        gpu.node,
        gpu.index,
        then_serial=was.serial,
        then_uuid=was.uuid,
        serial=g.serial,
        uuid=g.uuid,
        run=ev.handover.recorded.run,
    )


def against_handover(ev: Evaluation, metric: str, node: str, gpu: int | None) -> Finding:
    """The figure against the node's own handover median, within max(3 x recorded spread, 3 %)."""
    check = f"handover.{metric}"
    missing = _no_handover(ev, check, node, gpu)
    if missing is not None:
        return missing
    assert ev.handover is not None
    baseline = ev.baseline_of(node)
    if metric not in baseline.metrics:
        return Finding(check, ERROR, node, gpu, f"the baseline {baseline.sku} has no figure for {metric}")
    from gpucert.evaluate.evaluation import GpuSlot  # evaluation.py imports this module

    swapped = gpu is not None and identity(ev, GpuSlot(node, gpu)).status is FAIL
    if gpu is not None and swapped and ev.handover.gpu(gpu) is not None:
        message = f"{node}/gpu{gpu} is not the GPU of handover (see handover.identity)"
        return Finding(check, SKIP, node, gpu, message, cause=str(CheckKey("handover.identity", node, gpu)))
    now = ev._figure(metric, node, gpu)
    if isinstance(now, Finding):
        return dataclasses.replace(now, check=check)
    was = ev.handover.gpu(gpu) if gpu is not None else None
    rec = ev.handover.node_metrics.get(metric) if gpu is None else (was.metrics.get(metric) if was else None)
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
        run=ev.handover.recorded.run,
        higher_is_better=baseline.metrics[metric].comparison.value == "min",
    )
