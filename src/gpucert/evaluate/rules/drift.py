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
from gpucert.plan.checks import GPU_METRICS, CheckKey, CheckStatus, Finding
from gpucert.plan.history_records import HistoryEntry, Snapshot

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_LIMIT",
    "OWN_RUNS",
    "BoardHistory",
    "Earlier",
    "board_history",
    "drift_bar",
    "drift_fall",
    "drift_metrics",
    "drift_plan",
    "judge_drift",
    "own_repeatability",
    "pooled_repeatability",
    "sampling_error",
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
    spread: float = 0.0  # the robust relative sd of that run's samples
    n: int = 0  # ... and how many there were


def sampling_error(earlier: Sequence[Earlier]) -> float:
    """The relative standard error of one run's median from its samples alone (1.2533 sd / sqrt(n), averaged
    over the earlier runs): the run-to-run repeatability can be no smaller, whatever a few runs happened to show."""
    errors = [1.2533 * e.spread / math.sqrt(e.n) for e in earlier if e.n > 0]
    return sum(errors) / len(errors) if errors else 0.0


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


def drift_fall(
    now: float, earlier: Sequence[Earlier], repeatability: float, *, higher_is_better: bool = True
) -> tuple[float, float]:
    """How far the figure `now` has fallen against the mean of its `earlier` medians (relative, worse is positive),
    and the standard error of that fall: `repeatability` (the relative run-to-run sd) for the run now and for the
    mean of the earlier runs."""
    ref = sum(e.median for e in earlier) / len(earlier)
    fall = (1 - now / ref) if higher_is_better else (now / ref - 1)
    return fall, repeatability * math.sqrt(1 + 1 / len(earlier))


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
    the relative run-to-run sd (own_repeatability, else pooled_repeatability); None where neither is known: the
    fall is then held to the limit and the samples' own error, which can only fail more GPUs, and says so."""
    check, where = f"drift.{metric}", f"{node}/gpu{gpu}"
    if not earlier:
        return Finding(check, CheckStatus.ERROR, node, gpu, f"{where}: no history to compare {metric} with")
    ref = sum(e.median for e in earlier) / len(earlier)
    quoted = ", ".join(f"{e.median:.4g} ({e.run})" for e in earlier[-5:])
    history = f"{len(earlier)} earlier run(s), mean {ref:.4g} {now.unit}; latest {quoted}"
    unknown = ""
    if repeatability is None:  # a smaller noise only makes the check stricter: never a pass it could not judge
        unknown = (
            f" (unknown: fewer than {OWN_RUNS} earlier runs of its own and too few boards of its pool with history; "
            "held to the limit and its samples' own error)"
        )
        repeatability = 0.0
    repeatability = max(repeatability, sampling_error(earlier))
    fall, se = drift_fall(now.value, earlier, repeatability, higher_is_better=higher_is_better)
    z = fall / se if se > 0 else math.copysign(math.inf, fall) if fall else 0.0
    threshold = max(limit, bar * se)
    failed = fall > threshold
    word = "below" if (now.value < ref) == higher_is_better else "above"
    message = (
        f"{where} {metric} {now.value:.4g} {now.unit} is {abs(fall):.2%} {word} its own history ({history}); "
        f"run-to-run repeatability {repeatability:.2%}{unknown}, z {z:.1f} against a bar of {bar:.2f}, "
        f"limit {limit:.1%}: "
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


@dataclass(frozen=True, slots=True)
class BoardHistory:
    """The earlier runs one board is compared with, and what was set aside: `replaced` when the GPU in this slot
    has another serial than before (a new board starts a new history), `refused` per run whose entry failed."""

    earlier: list[Earlier]
    replaced: str | None = None
    refused: tuple[str, ...] = ()


def board_history(
    entries: Sequence[HistoryEntry],
    *,
    spec: str,
    baseline: str | None,
    gpu: int,
    serial: str | None,
    metric: str,
    refused: dict[str, str] | None = None,
) -> BoardHistory:
    """The earlier medians of the board `serial` in slot `gpu` of `metric`, from entries of the same spec and SKU
    baseline only; entries in `refused` (run -> reason) are set aside and named."""
    refused = refused or {}
    earlier: list[Earlier] = []
    others: set[str] = set()
    for e in entries:
        if e.spec != spec or e.baseline != baseline:
            continue
        if e.run in refused:
            continue
        g = next((g for g in e.gpus if g.index == gpu), None)
        if g is None:
            continue
        if serial is None or g.serial != serial:
            others.add(g.serial or "unknown")
            continue
        if metric in g.metrics:
            fig = g.metrics[metric]
            earlier.append(Earlier(e.run, e.time, fig.median, e.driver, g.firmware, fig.spread, fig.n))
    replaced = None
    if others:
        replaced = (
            f"slot {gpu} held board(s) {', '.join(sorted(others))} before; board {serial} was put in since and its "
            "history starts here (the earlier board's figures are not compared)"
        )
    reasons = tuple(f"run {run} refused: {why}" for run, why in sorted(refused.items()))
    return BoardHistory(earlier, replaced, reasons)


DRIFT_PREFIXES = ("memory", "compute", "pcie")  # a GPU's own measurements (p2p is a pair's, nccl a node's)


def drift_metrics(probes: set[str], baseline_metrics: set[str]) -> list[str]:
    """The metrics each GPU is held to its own history on: its own measurements the spec's probes take."""
    return [m for m in GPU_METRICS if m.split(".")[0] in DRIFT_PREFIXES and m.split(".")[0] in probes and m in
            baseline_metrics]  # fmt: skip


def drift_plan(
    snapshot: Snapshot | None,
    boards: dict[str, list[tuple[int, str | None]]],
    digests: dict[str, str | None],
    metrics: dict[str, list[str]],
) -> tuple[list[CheckKey], list[tuple[str, str]]]:
    """The `drift.<metric>` keys of a run and the boards left out with why. `boards`: each placed node's GPU slots
    and the serial measured in each (None where not measured); `digests`: the SKU baseline of the node's pool;
    `metrics`: the node's drift metrics. A board with earlier runs of its own (or with refused ones: refusing is a
    finding) is judged; a board put in since, or a node with no history, is left out and said."""
    keys: list[CheckKey] = []
    left: list[tuple[str, str]] = []
    nodes = snapshot.nodes if snapshot is not None else {}
    for node, slots in boards.items():
        history = nodes.get(node)
        if history is None or not metrics.get(node):
            left.append(("drift.*", "no history of the node before this run (it starts with its first signed run)"))
            continue
        for index, serial in slots:
            bh = board_history(history.entries, spec=snapshot.spec if snapshot else "", baseline=digests.get(node),
                               gpu=index, serial=serial, metric=metrics[node][0])  # fmt: skip
            if serial is None or bh.earlier or history.refused:
                keys += [CheckKey(f"drift.{m}", node, index) for m in metrics[node]]
                if len(metrics[node]) >= 2:  # the board on every metric at once (rules/combined.py)
                    keys.append(CheckKey("drift.combined", node, index))
            else:
                why = bh.replaced or "no earlier run of this board under this spec and SKU baseline"
                left.append((f"drift.* on {node}/gpu{index}", why))
    return keys, left
