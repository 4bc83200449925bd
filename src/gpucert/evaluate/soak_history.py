"""What a soak remembers of one node since its clock (re)started: per GPU the first readings of the counters that
must not grow, the corrected-ECC readings of the last 24 h, the throttle totals, the XIDs already seen, and each
metric's round medians with their running Mann-Kendall statistic. Small and bounded per round (no samples), so a
soak's memory does not grow with its samples. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpucert.evaluate.soak_round import GpuRound, NodeRound

__all__ = ["ECC_WINDOW_H", "GpuHistory", "NodeHistory", "Series"]

ECC_WINDOW_H = 24.0  # the criterion counts corrected ECC errors per 24 hours


@dataclass(slots=True)
class Series:
    """One metric's round medians in time order, and the Mann-Kendall S over them, kept as each round comes."""

    hours: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    s: int = 0

    def add(self, hour: float, value: float) -> None:
        self.s += sum((value > x) - (value < x) for x in self.values)
        self.hours.append(hour)
        self.values.append(value)


@dataclass(slots=True)
class GpuHistory:
    first_uncorrected: int | None = None
    first_remap_uncorrectable: int | None = None
    # (end of round, corrected count) for the rounds of the last ECC_WINDOW_H, and the last one before them
    corrected: deque[tuple[float, int]] = field(default_factory=deque)
    throttle_ns: dict[str, int] = field(default_factory=dict)
    loaded_s: float = 0.0
    xids: set[tuple[int, str]] = field(default_factory=set)
    series: dict[str, Series] = field(default_factory=dict)

    def add(self, g: GpuRound, end_h: float) -> None:
        if self.first_uncorrected is None:
            self.first_uncorrected = g.uncorrected
        if self.first_remap_uncorrectable is None:
            self.first_remap_uncorrectable = g.remap_uncorrectable
        if g.corrected is not None:
            self.corrected.append((end_h, g.corrected))
            # keep one reading at or before the window's start: the count the window's growth is measured from
            while len(self.corrected) >= 2 and self.corrected[1][0] <= end_h - ECC_WINDOW_H:
                self.corrected.popleft()
        for reason, ns in g.throttle_ns.items():
            self.throttle_ns[reason] = self.throttle_ns.get(reason, 0) + ns
        self.loaded_s += g.loaded_s
        for metric, value in g.medians.items():
            self.series.setdefault(metric, Series()).add(end_h, value)


@dataclass(slots=True)
class NodeHistory:
    """One node since its clock started (round `clock_round`, at hour `clock_h` of the soak)."""

    node: str
    clock_round: int
    clock_h: float
    rounds: int = 0  # rounds added since the clock started
    end_h: float = 0.0  # the end of the last round added
    gpus: dict[int, GpuHistory] = field(default_factory=dict)
    node_series: dict[str, Series] = field(default_factory=dict)
    prior_xids: dict[int, set[tuple[int, str]]] = field(default_factory=dict)  # seen before this round

    def add(self, r: NodeRound) -> None:
        """Take the round in: the criteria then judge it against everything before it."""
        self.prior_xids = {i: set(h.xids) for i, h in self.gpus.items()}
        for g in r.gpus:
            h = self.gpus.setdefault(g.index, GpuHistory())
            h.add(g, r.end_h)
            h.xids.update(g.xids)
        for metric, value in r.node_medians.items():
            self.node_series.setdefault(metric, Series()).add(r.end_h, value)
        self.rounds += 1
        self.end_h = r.end_h
