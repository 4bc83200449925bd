"""What a soak remembers of one node since its clock (re)started: per GPU the first readings of the counters that
must not grow, the corrected-ECC readings of the last 24 h, the throttle totals, the XIDs already seen, and each
metric's round medians with their running Mann-Kendall statistic. Small and bounded per round (no samples), so a
soak's memory does not grow with its samples. Pure: no I/O.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gpucert.evaluate.soak_round import GpuRound, NodeRound

__all__ = ["ECC_WINDOW_H", "GpuHistory", "Medians", "NodeHistory"]

ECC_WINDOW_H = 24.0  # the criterion counts corrected ECC errors per 24 hours


class Medians:
    """Several metrics' round medians side by side (one GPU's, or the node's), a row a round, with each metric's
    Mann-Kendall S kept as the rounds come: one array operation a round for all of them (8 bytes a value: the
    trend test needs every one). The metrics are the first round's; a later round without one holds NaN there."""

    __slots__ = ("_rows", "hours", "n", "names", "reference", "s")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.hours: array[float] = array("d")
        self._rows = np.empty((16, len(names)))
        self.n = 0
        self.s = np.zeros(len(names), dtype=np.int64)
        self.reference: np.ndarray | None = None  # the median of the first rounds, once there are that many

    def add(self, hour: float, medians: dict[str, float]) -> None:
        row = np.array([medians.get(m, np.nan) for m in self.names], dtype=float)
        if self.n:
            signs = np.sign(row - self._rows[: self.n])
            self.s += np.where(np.isnan(signs), 0, signs).sum(axis=0).astype(np.int64)
        if self.n == len(self._rows):
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
        self._rows[self.n] = row
        self.n += 1
        self.hours.append(hour)

    @property
    def last(self) -> np.ndarray:
        row: np.ndarray = self._rows[self.n - 1]
        return row

    def column(self, metric: str) -> list[float]:
        return [float(v) for v in self._rows[: self.n, self.names.index(metric)]]

    def least_squares_drop(self, metric: str, reference: float) -> float:
        """How much the least-squares line of `metric` loses over the rounds, as a fraction of `reference`."""
        hours = np.frombuffer(self.hours)
        values = self._rows[: self.n, self.names.index(metric)]
        spread = hours - hours.mean()
        denominator = float((spread**2).sum())
        if denominator == 0 or reference <= 0:
            return 0.0
        slope = float((spread * (values - values.mean())).sum()) / denominator
        return -slope * float(hours[-1] - hours[0]) / reference

    def earlier(self) -> np.ndarray | None:
        """Each metric's median over the rounds before the last (None for the first round): what a round of the
        reference, not yet complete, is held to."""
        return np.median(self._rows[: self.n - 1], axis=0) if self.n > 1 else None

    def reference_of(self, rounds: int) -> np.ndarray | None:
        """Each metric's median over the first `rounds` rounds (None until there are more rounds than that)."""
        if self.reference is None and self.n > rounds:
            self.reference = np.median(self._rows[:rounds], axis=0)
        return self.reference


@dataclass(slots=True)
class GpuHistory:
    first_uncorrected: int | None = None
    first_remap_uncorrectable: int | None = None
    # (end of round, corrected count) for the rounds of the last ECC_WINDOW_H, and the last one before them
    corrected: deque[tuple[float, int]] = field(default_factory=deque)
    throttle_ns: dict[str, int] = field(default_factory=dict)
    loaded_s: float = 0.0
    xids: set[tuple[int, str]] = field(default_factory=set)
    medians: Medians | None = None
    board: tuple[str | None, str | None] | None = None  # (serial, UUID) of the first round that read them

    def add(self, g: GpuRound, end_h: float) -> None:
        if self.board is None and g.board != (None, None):
            self.board = g.board
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
        if self.medians is None:
            self.medians = Medians(tuple(sorted(g.medians)))
        self.medians.add(end_h, g.medians)


@dataclass(slots=True)
class NodeHistory:
    """One node since its clock started (round `clock_round`, at hour `clock_h` of the soak)."""

    node: str
    clock_round: int
    clock_h: float
    rounds: int = 0  # rounds added since the clock started
    end_h: float = 0.0  # the end of the last round added
    gpus: dict[int, GpuHistory] = field(default_factory=dict)
    node_medians: Medians | None = None
    prior_xids: dict[int, set[tuple[int, str]]] = field(default_factory=dict)  # seen before this round

    def add(self, r: NodeRound) -> None:
        """Take the round in: the criteria then judge it against everything before it."""
        self.prior_xids = {i: set(h.xids) for i, h in self.gpus.items()}
        for g in r.gpus:
            h = self.gpus.setdefault(g.index, GpuHistory())
            h.add(g, r.end_h)
            h.xids.update(g.xids)
        if self.node_medians is None:
            self.node_medians = Medians(tuple(sorted(r.node_medians)))
        self.node_medians.add(r.end_h, r.node_medians)
        self.rounds += 1
        self.end_h = r.end_h
