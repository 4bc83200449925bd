"""`drift.<metric>`: a GPU against its own history. Pure.

A board's earlier figures carry no board-to-board spread, so its own history detects a smaller loss than its peers
can: the figure now is compared with the mean of the board's earlier medians (the same spec, SKU and serial: the
caller selects them), and fails when it has fallen by more than `limit` AND by more than the run-to-run noise
explains at the stated confidence, with the multiplicity bar of every board and metric the run judges.

The noise is the board's run-to-run repeatability: the spread of its own earlier medians where it has at least
OWN_RUNS of them, else pooled over the pool's boards (the robust spread, over those boards, of each one's figure now
against its own history: most boards of a pool are healthy, as the peer rules assume too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.stats import mad, median, tail_z
from gpucert.plan.checks import CheckStatus, Finding

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_LIMIT",
    "OWN_RUNS",
    "Earlier",
    "drift_bar",
    "judge_drift",
    "own_repeatability",
    "pooled_repeatability",
]

DEFAULT_LIMIT = 0.02  # a board 2% behind its own history is worth a finding (the baseline may say otherwise)
DEFAULT_CONFIDENCE = 0.999  # per run, over every board and metric judged (the spec may say otherwise)
OWN_RUNS = 4  # earlier runs a board needs before its own spread is its repeatability (3 degrees of freedom)
MAD_TO_SD = 1.4826


@dataclass(frozen=True, slots=True)
class Earlier:
    """One earlier run of the board: its median of the metric and what it ran on."""

    run: str
    time: str
    median: float
    driver: str | None = None
    firmware: str | None = None


def own_repeatability(earlier: Sequence[Earlier]) -> float | None:
    """The relative sd of the board's own earlier medians; None with fewer than OWN_RUNS of them."""
    if len(earlier) < OWN_RUNS:
        return None
    values = [e.median for e in earlier]
    mean = sum(values) / len(values)
    return math.sqrt(sum((v / mean - 1) ** 2 for v in values) / (len(values) - 1))


def pooled_repeatability(ratios: Sequence[float], runs: Sequence[int]) -> float | None:
    """The run-to-run sd pooled over a pool's boards, from each board's figure now over its history's mean
    (`ratios`) and the number of earlier runs behind that mean (`runs`): the robust spread of the ratios, less the
    part the history's own mean adds. None with fewer than 8 boards (too few to estimate a spread)."""
    if len(ratios) < 8:
        return None
    deviations = [r - 1 for r in ratios]
    spread = MAD_TO_SD * mad(deviations, median(deviations))
    inflation = median([math.sqrt(1 + 1 / k) for k in runs])
    return spread / inflation


def drift_bar(tests: int, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """The one-sided z a fall must pass when `tests` boards x metrics are judged in one run (Bonferroni)."""
    return tail_z((1 - confidence) / max(tests, 1))


def _changes(earlier: Sequence[Earlier], driver: str | None, firmware: str | None) -> str:
    said = []
    for what, now, then in (
        ("driver", driver, sorted({e.driver for e in earlier if e.driver})),
        ("firmware", firmware, sorted({e.firmware for e in earlier if e.firmware})),
    ):
        other = [v for v in then if v != now]
        if now and other:
            said.append(f"{what} {', '.join(other)} then, {now} now")
    if not said:
        return ""
    return f"; {' and '.join(said)}: the comparison still holds (the board is the same), and the change may be why"


def judge_drift(
    metric: str,
    node: str,
    gpu: int,
    now: Sampled,
    earlier: Sequence[Earlier],
    *,
    repeatability: float | None,
    bar: float,
    limit: float = DEFAULT_LIMIT,
    higher_is_better: bool = True,
    driver: str | None = None,
    firmware: str | None = None,
) -> Finding:
    """`drift.<metric>` of one GPU: its figure now against the mean of its `earlier` medians. `repeatability` is
    the relative run-to-run sd (own_repeatability, else pooled_repeatability); None fails closed (an error)."""
    check, where = f"drift.{metric}", f"{node}/gpu{gpu}"
    if not earlier:
        return Finding(check, CheckStatus.ERROR, node, gpu, f"{where}: no history to compare {metric} with")
    ref = sum(e.median for e in earlier) / len(earlier)
    quoted = ", ".join(f"{e.median:.4g} ({e.run})" for e in earlier[-5:])
    history = f"{len(earlier)} earlier run(s), mean {ref:.4g} {now.unit}; latest {quoted}"
    if repeatability is None or repeatability <= 0:
        return Finding(
            check,
            CheckStatus.ERROR,
            node,
            gpu,
            f"{where} {metric}: its run-to-run repeatability is unknown (fewer than {OWN_RUNS} earlier runs of its "
            f"own and too few boards in its pool with history), so a fall cannot be judged; history: {history}",
            observed=now.value,
            expected=ref,
            unit=now.unit,
        )
    fall = (1 - now.value / ref) if higher_is_better else (now.value / ref - 1)
    se = repeatability * math.sqrt(1 + 1 / len(earlier))
    z = fall / se
    threshold = max(limit, bar * se)
    failed = fall > threshold
    word = "below" if (now.value < ref) == higher_is_better else "above"
    message = (
        f"{where} {metric} {now.value:.4g} {now.unit} is {abs(fall):.2%} {word} its own history ({history}); "
        f"run-to-run repeatability {repeatability:.2%}, z {z:.1f} against a bar of {bar:.2f}, limit {limit:.1%}: "
        f"{'fell by more than both' if failed else 'within'}"
        f"{_changes(earlier, driver, firmware)}"
    )
    return Finding(
        check,
        CheckStatus.FAIL if failed else CheckStatus.PASS,
        node,
        gpu,
        message,
        observed=now.value,
        expected=ref,
        unit=now.unit,
        limit=ref * (1 - threshold) if higher_is_better else ref * (1 + threshold),
    )
