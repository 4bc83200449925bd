"""Robust statistics: median and MAD, the only summaries gpucert quotes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MAD_TO_SIGMA", "Summary", "mad", "median", "quantile", "summarize"]

MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates the standard deviation of normally distributed data


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1), interpolated linearly between the order statistics (numpy's default)."""
    if not values:
        raise ValueError("quantile of no values")
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def mad(values: Sequence[float], center: float | None = None) -> float:
    """Median absolute deviation from `center` (the median when not given)."""
    c = median(values) if center is None else center
    return median([abs(v - c) for v in values])


@dataclass(frozen=True, slots=True)
class Summary:
    median: float
    mad: float
    n: int

    @property
    def spread(self) -> float:
        """MAD as a fraction of the median: a robust coefficient of variation."""
        return self.mad * MAD_TO_SIGMA / self.median if self.median else 0.0

    def z(self, value: float) -> float:
        """Robust z-score of `value` against this population (±inf when the population has no spread)."""
        sigma = self.mad * MAD_TO_SIGMA
        if sigma == 0:
            return 0.0 if value == self.median else float("inf") if value > self.median else float("-inf")
        return (value - self.median) / sigma


def summarize(values: Sequence[float]) -> Summary:
    m = median(values)
    return Summary(median=m, mad=mad(values, m), n=len(values))
