"""Robust statistics: median and MAD, the only summaries gpucert quotes; and the binomial and normal tails the
peer rules test a count of slow samples against."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["MAD_TO_SIGMA", "Summary", "binomial_tail", "mad", "median", "quantile", "summarize", "tail_z"]

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


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def tail_z(probability: float) -> float:
    """The one-sided normal z of a tail probability (how many sd out a Gaussian reaches it): 2.3e-4 -> 3.5."""
    if probability >= 1:
        return -math.inf
    if probability <= 1e-300:
        return 37.0  # beyond what a double can tell apart
    return -NormalDist().inv_cdf(probability)
