"""Handover rules: a node held to its own handover baseline (`baselines/nodes/<node>.yaml`). Pure.

A GPU may be well inside its SKU's tolerance and still be measurably slower than it was at handover. A figure
fails when it has fallen below its handover median by more than the limit (the baseline's `drift.limit`, 2% by
default: the handover figure is the board's own earlier figure, as history is for `drift`) AND by more than the
noise of the difference explains: the standard error of (now / handover - 1), from each run's own samples (the
spread and sample count of this run and of handover) and the boards' run-to-run repeatability where history gives
one (node_repeatability: each board's earlier medians, pooled over the node's boards; else rules/drift.py's pooled
estimate from the boards' figures now against their history), times the multiplicity bar of every handover
figure the run judges (drift.drift_bar at the spec's `certify.drift.confidence`). A GPU whose serial changed was
swapped, and its handover figures do not apply to the new board.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucert.evaluate.rules.drift import DEFAULT_LIMIT, Earlier, sampling_error
from gpucert.evaluate.rules.performance import Sampled
from gpucert.plan.checks import CheckStatus, Finding

__all__ = [
    "MIN_DEGREES",
    "HandoverNoise",
    "difference_error",
    "judge_against_handover",
    "judge_identity",
    "node_repeatability",
]

# the degrees of freedom a repeatability pooled over a node's boards needs (8 boards with 2 runs each): with fewer,
# an estimate that came out low by chance fails healthy boards (benchmarks/recertify.py)
MIN_DEGREES = 8


@dataclass(frozen=True, slots=True)
class HandoverNoise:
    """What the difference between a figure now and at handover is judged with: the run-to-run repeatability
    (relative sd of one run's median; None where no history gives it) and where it came from, the multiplicity
    bar, and the limit."""

    repeatability: float | None
    source: str
    bar: float
    limit: float = DEFAULT_LIMIT


def node_repeatability(boards: Sequence[Sequence[Earlier]]) -> tuple[float, int] | None:
    """The run-to-run repeatability of one node's boards pooled: the relative spread of each board's earlier
    medians about its own mean, pooled over the boards (one variance, sum of squares over degrees of freedom), and
    the degrees of freedom; None with fewer than MIN_DEGREES. A board's own spread from a few runs has as many
    degrees of freedom as runs less one (3 from 4), and its chance lows fail healthy boards; the node's boards
    share the estimate as rules/drift.py's pooled estimate assumes a pool's boards do."""
    squares, degrees = 0.0, 0
    for earlier in boards:
        if len(earlier) < 2:
            continue
        mean = sum(e.median for e in earlier) / len(earlier)
        squares += sum((e.median / mean - 1) ** 2 for e in earlier)
        degrees += len(earlier) - 1
    if degrees < MIN_DEGREES:
        return None
    return math.sqrt(squares / degrees), degrees


def _median_error(spread: float, n: int) -> float:
    """The relative standard error of one run's median from its samples (drift.sampling_error of that run)."""
    return sampling_error([Earlier("", "", 1.0, spread=spread, n=n)])


def difference_error(
    now_spread: float, now_n: int, then_spread: float, then_n: int, repeatability: float | None
) -> float:
    """The relative standard error of (median now / median at handover - 1): each run's median varies by the
    board's run-to-run repeatability, never by less than its own samples' error (drift.judge_drift's rule), and
    the two runs are independent. An unknown repeatability counts as none: the samples alone, which can only fail
    more GPUs (fail closed)."""
    r = repeatability or 0.0
    now = max(r, _median_error(now_spread, now_n))
    then = max(r, _median_error(then_spread, then_n))
    return math.hypot(now, then)


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
    now_spread: float,
    median: float,
    spread: float,
    n: int,
    unit: str,
    run: str,
    higher_is_better: bool,
    noise: HandoverNoise,
) -> Finding:
    """`handover.<metric>`: the figure measured now against the handover median. It fails when it has fallen by
    more than both the limit and `noise.bar` standard errors of the difference."""
    se = difference_error(now_spread, now.n, spread, n, noise.repeatability)
    tol = max(noise.limit, noise.bar * se)
    sign = 1.0 if higher_is_better else -1.0
    deviation = now.value / median - 1
    z = -sign * deviation / se if se > 0 else (math.inf if sign * deviation < 0 else 0.0)
    where = node if gpu is None else f"{node}/gpu{gpu}"
    word = "below" if deviation < 0 else "above"
    if noise.repeatability is None:
        rr = f"run-to-run repeatability unknown ({noise.source}): held to the limit and the samples' own error"
    else:
        rr = f"run-to-run repeatability {noise.repeatability:.2%} ({noise.source})"
    failed = sign * deviation < -tol
    msg = (
        f"{where} {metric} {now.value:.4g} {now.unit} (median of {now.n} samples, spread {now_spread:.1%}) is "
        f"{abs(deviation):.1%} {word} its handover median {median:.4g} {unit} (run {run}, spread {spread:.1%} over "
        f"{n} samples); {rr}; standard error of the difference {se:.2%}, z {z:.1f} against a bar of "
        f"{noise.bar:.2f}, limit {noise.limit:.1%}: tolerance {tol:.1%}, "
        f"{'fell by more than both' if failed else 'within'}"
    )
    limit = median * (1 - sign * tol)
    return Finding(
        f"handover.{metric}",
        CheckStatus.FAIL if failed else CheckStatus.PASS,
        node,
        gpu,
        msg,
        observed=round(now.value, 4),
        expected=median,
        unit=unit,
        limit=round(limit, 4),
    )
