"""Handover rules: a node held to its own handover baseline (`baselines/nodes/<node>.yaml`). Pure.

A GPU may be well inside its SKU's tolerance and still be measurably slower than it was at handover: each figure
is held within max(3 x the spread recorded then, 3 %) of its handover median, in the direction that matters; a
GPU whose serial changed was swapped, and its handover figures do not apply to the new board.
"""

from __future__ import annotations

from gpucert.evaluate.rules.performance import Sampled
from gpucert.plan.checks import CheckStatus, Finding

__all__ = ["MIN_TOLERANCE", "SPREAD_FACTOR", "handover_tolerance", "judge_against_handover", "judge_identity"]

# A node is held to its own handover figure within max(SPREAD_FACTOR x spread, MIN_TOLERANCE): three robust
# standard deviations of what was seen at handover, and never tighter than 3 %, the run-to-run variation of a
# healthy GPU's clocks and temperature that no sample count removes.
SPREAD_FACTOR = 3.0
MIN_TOLERANCE = 0.03


def handover_tolerance(spread: float) -> float:
    return max(SPREAD_FACTOR * spread, MIN_TOLERANCE)


def judge_identity(
    node: str,
    gpu: int,
    *,
    then_serial: str | None,
    then_uuid: str | None,
    serial: str | None,
    uuid: str | None,
    run: str,
) -> Finding:
    """The GPU in this slot is the one recorded at handover: by serial, else by UUID."""
    where = f"{node}/gpu{gpu}"
    then, now, what = (then_serial, serial, "serial") if then_serial else (then_uuid, uuid, "UUID")
    if then == now:
        return Finding("handover.identity", CheckStatus.PASS, node, gpu, f"{where}: {what} {now} as at handover")
    return Finding(
        "handover.identity",
        CheckStatus.FAIL,
        node,
        gpu,
        f"{where} was swapped since handover (run {run}): {what} {then} then, {now} now; record a new handover "
        "baseline once the new GPU is certified",
        observed=now,
        expected=then,
    )


def judge_against_handover(
    metric: str,
    node: str,
    gpu: int | None,
    now: Sampled,
    *,
    median: float,
    spread: float,
    n: int,
    unit: str,
    run: str,
    higher_is_better: bool,
) -> Finding:
    """`handover.<metric>`: the figure measured now against the handover median and its tolerance."""
    tol = handover_tolerance(spread)
    sign = 1.0 if higher_is_better else -1.0
    deviation = now.value / median - 1
    where = node if gpu is None else f"{node}/gpu{gpu}"
    word = "below" if deviation < 0 else "above"
    msg = (
        f"{where} {metric} {now.value:.4g} {now.unit} (median of {now.n} samples) is {abs(deviation):.1%} {word} "
        f"its handover median {median:.4g} {unit} (run {run}, spread {spread:.1%} over {n} samples, tolerance "
        f"{tol:.1%})"
    )
    status = CheckStatus.FAIL if sign * deviation < -tol else CheckStatus.PASS
    limit = median * (1 - sign * tol)
    return Finding(
        f"handover.{metric}",
        status,
        node,
        gpu,
        msg,
        observed=round(now.value, 4),
        expected=median,
        unit=unit,
        limit=round(limit, 4),
    )
