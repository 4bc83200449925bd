"""Trend tests over a series of round medians: the Mann-Kendall test (is there a monotone trend?) and the
Theil-Sen slope (how steep?). Pure; no I/O.

Mann-Kendall as Gilbert, "Statistical Methods for Environmental Pollution Monitoring" (1987), ch. 16: the statistic
S = sum over pairs i < j of sign(x_j - x_i). Without ties its exact distribution is that of n(n-1)/2 - 2I with I
the inversions of a random permutation (Kendall, "Rank Correlation Methods", 1975), counted here by the Mahonian
numbers, so the probability is exact for the short series a soak has; with ties, or above EXACT_MAX_N values, the
normal approximation with the ties' variance correction and the continuity correction (Gilbert eq. 16.4, 16.5).
Theil-Sen: the median of the slopes of every pair (Sen 1968).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import median

__all__ = ["EXACT_MAX_N", "MannKendall", "mann_kendall", "p_decrease", "theil_sen"]

EXACT_MAX_N = 100  # the inversion counts of 100 values are 4951 integers: exact is cheap up to here
# the screen (`p_decrease`) keeps its exact tables up to here and takes the normal approximation above: a table per
# length kept for a soak's every round would grow with the rounds (tens of MB by 100 rounds)
SCREEN_EXACT_N = 30


@dataclass(frozen=True, slots=True)
class MannKendall:
    n: int
    s: int
    p_increase: float  # one-sided: the chance of an S this large or larger with no trend
    p_decrease: float  # one-sided: the chance of an S this small or smaller with no trend
    exact: bool


def _sign(d: float) -> int:
    return (d > 0) - (d < 0)


@lru_cache(maxsize=SCREEN_EXACT_N)
def _inversion_counts(n: int) -> tuple[int, ...]:
    """How many permutations of n values have k inversions, for k = 0 .. n(n-1)/2 (the Mahonian numbers)."""
    counts = [1]
    for i in range(2, n + 1):  # multiply by 1 + q + ... + q^(i-1): a running sum over a window of i
        out = [0] * (len(counts) + i - 1)
        window = 0
        for k in range(len(out)):
            window += counts[k] if k < len(counts) else 0
            window -= counts[k - i] if 0 <= k - i < len(counts) else 0
            out[k] = window
        counts = out
    return tuple(counts)


def p_decrease(n: int, s: int) -> float:
    """P(S <= s) for n values without ties and no trend: a quick screen before the full test (exact to
    SCREEN_EXACT_N values, the normal approximation above)."""
    if n < 3:
        return 1.0
    if n > SCREEN_EXACT_N:
        var = n * (n - 1) * (2 * n + 5) / 18
        return _normal_tail(-(s - _sign(s)) / math.sqrt(var))
    pairs = n * (n - 1) // 2
    return _at_least_inversions(n)[(pairs - s) // 2]


@lru_cache(maxsize=SCREEN_EXACT_N)
def _at_least_inversions(n: int) -> tuple[float, ...]:
    """P(I >= k) for k = 0 .. n(n-1)/2: the screen looks one up each round, for every metric of every GPU."""
    counts = _inversion_counts(n)
    total = math.factorial(n)
    tail, out = 0, []
    for c in reversed(counts):
        tail += c
        out.append(tail / total)
    return tuple(reversed(out))


def _normal_tail(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def mann_kendall(values: list[float]) -> MannKendall:
    """The Mann-Kendall statistic of `values` in time order, with both one-sided p-values (1.0 for under 3)."""
    n = len(values)
    s = sum(_sign(values[j] - values[i]) for i in range(n) for j in range(i + 1, n))
    if n < 3:
        return MannKendall(n, s, 1.0, 1.0, exact=True)
    ties: dict[float, int] = {}
    for v in values:
        ties[v] = ties.get(v, 0) + 1
    if len(ties) == n and n <= EXACT_MAX_N:
        counts = _inversion_counts(n)
        total = math.factorial(n)
        pairs = n * (n - 1) // 2
        inversions = (pairs - s) // 2  # S = pairs - 2I
        p_increase = sum(counts[: inversions + 1]) / total  # S >= s: at most this many inversions
        p_decrease = sum(counts[inversions:]) / total
        return MannKendall(n, s, p_increase, p_decrease, exact=True)
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties.values())) / 18
    if var <= 0:  # every value the same: no trend
        return MannKendall(n, s, 1.0, 1.0, exact=False)
    z = (s - _sign(s)) / math.sqrt(var)
    return MannKendall(n, s, _normal_tail(z), _normal_tail(-z), exact=False)


def theil_sen(times: list[float], values: list[float]) -> float:
    """The median slope over every pair of points at different times (0.0 when there is no such pair)."""
    slopes = [
        (values[j] - values[i]) / (times[j] - times[i])
        for i in range(len(values))
        for j in range(i + 1, len(values))
        if times[j] != times[i]
    ]
    return float(median(slopes)) if slopes else 0.0
