"""Robust statistics: median and MAD, the only summaries gpucert quotes; and the binomial and normal tails the
peer rules test a count of slow samples against."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAD_TO_SIGMA",
    "SPREAD_F_LEVEL",
    "Summary",
    "beta_cdf",
    "binomial_tail",
    "clipped_sd",
    "f_quantile",
    "f_tail",
    "hypergeometric_tail",
    "mad",
    "median",
    "median_of_sorted",
    "node_spread",
    "pooled_spread",
    "quantile",
    "quantile_of_sorted",
    "relative_spread",
    "summarize",
    "t_quantile",
    "t_tail",
    "tail_z",
]

MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates the standard deviation of normally distributed data


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return median_of_sorted(sorted(values))


def median_of_sorted(s: Sequence[float]) -> float:
    """`median` of values already sorted (what `sorted` gave): one sort where a median and a quantile are asked."""
    n = len(s)
    if not n:
        raise ValueError("median of no values")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1), interpolated linearly between the order statistics (numpy's default)."""
    if not values:
        raise ValueError("quantile of no values")
    return quantile_of_sorted(sorted(values), q)


def quantile_of_sorted(s: Sequence[float], q: float) -> float:
    """`quantile` of values already sorted."""
    if not s:
        raise ValueError("quantile of no values")
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
    """The values' median, MAD and count. A pool's thousands of figures by numpy: the same sorts and the same float64
    arithmetic (a median of two is their sum halved, a deviation its absolute difference), so the same bits; values
    that are not all finite numbers by Python's sort, whose order numpy's need not repeat."""
    if len(values) >= _BY_ARRAY:
        a = np.array(values, dtype=np.float64)
        if np.isfinite(a).all():
            a.sort()
            with np.errstate(all="ignore"):  # Python's float arithmetic overflows to inf silently too
                m = _median_of_sorted_array(a)
                deviations = np.abs(a - m)
                deviations.sort()
                return Summary(median=m, mad=_median_of_sorted_array(deviations), n=len(values))
    m = median(values)
    return Summary(median=m, mad=mad(values, m), n=len(values))


_BY_ARRAY = 64  # from this many values numpy's sort pays for making the array


def _median_of_sorted_array(s: npt.NDArray[np.float64]) -> float:
    """`median_of_sorted` of a sorted array, as a Python float."""
    n = s.size
    mid = n // 2
    return float(s[mid]) if n % 2 else float((s[mid - 1] + s[mid]) / 2)


def clipped_sd(values: Sequence[float], summary: Summary, clip: float = 3.0) -> tuple[float, int]:
    """The standard deviation of the values within `clip` MAD-sigmas of their median: nearly as steady as the
    standard deviation on normal data (the MAD needs about 2.7 times the figures for the same), and as deaf to the
    outliers it is looking for. With how many values were kept; 0 with fewer than two."""
    sigma = summary.mad * MAD_TO_SIGMA
    kept = [v for v in values if abs(v - summary.median) <= clip * sigma] if sigma > 0 else list(values)
    if len(kept) < 2:
        return 0.0, len(kept)
    mean = sum(kept) / len(kept)
    return math.sqrt(sum((v - mean) ** 2 for v in kept) / (len(kept) - 1)), len(kept)


def node_spread(
    figures: Sequence[float],
    summary: Summary,
    board_sigma: float,
    boards: int,
    others: Sequence[tuple[float, int]] = (),
) -> tuple[float, int]:
    """The spread of node figures (each the median of its `boards` boards) and its degrees of freedom: their
    `clipped_sd`, pooled with the same nodes' relative spreads on the pool's other metrics (`others`, each
    (sd / median, df); `pooled_spread` says when), never below what the boards' spread within nodes implies for a
    median of `boards` (a handful of nodes that agree by chance must not make a small step a finding).
    `board_sigma`: the relative sd of a board's residual against the median of its node's others, whose variance
    is (1 + pi/2/(boards-1)) a board's; a median's variance is pi/2 a mean's."""
    sd, kept = clipped_sd(figures, summary)
    df = max(kept - 1, 1)
    if summary.median and others and kept > 1:
        relative, df = pooled_spread((sd / abs(summary.median), kept - 1), others)
        sd = relative * abs(summary.median)
    board = board_sigma / math.sqrt(1 + math.pi / 2 / max(boards - 1, 1))
    floor = board * summary.median * math.sqrt(math.pi / 2 / max(boards, 1))
    return max(sd, floor), df


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


def hypergeometric_tail(k: int, total: int, marked: int, drawn: int) -> float:
    """P(X >= k) for X the number of `marked` items among `drawn` taken without replacement from `total`: the
    exact chance that a GPU's `marked` samples hold at least k of the `drawn` deepest of `total` samples when
    every sample is as likely as any other to be deep (its peers' and its own alike)."""
    if k <= 0:
        return 1.0
    top = min(marked, drawn)
    if k > top or drawn > total:
        return 0.0

    def log_choose(n: int, r: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)

    whole = log_choose(total, drawn)
    terms = [
        log_choose(marked, i) + log_choose(total - marked, drawn - i) - whole
        for i in range(k, top + 1)
        if drawn - i <= total - marked
    ]
    if not terms:
        return 0.0
    big = max(terms)
    return min(1.0, math.exp(big) * sum(math.exp(t - big) for t in terms))


def tail_z(probability: float) -> float:
    """The one-sided normal z of a tail probability (how many sd out a Gaussian reaches it): 2.3e-4 -> 3.5."""
    if probability >= 1:
        return -math.inf
    if probability <= 1e-300:
        return 37.0  # beyond what a double can tell apart
    return -NormalDist().inv_cdf(probability)


def t_tail(t: float, df: int) -> float:
    """P(T > t) for Student's t with `df` (a whole number >= 1) degrees of freedom, t >= 0: the closed form for a
    whole number of degrees of freedom (Abramowitz and Stegun 26.7.3-4), a finite series in cos(theta)."""
    theta = math.atan(t / math.sqrt(df))
    c2, term = math.cos(theta) ** 2, 1.0
    if df % 2:
        total = 0.0 if df == 1 else 1.0
        for k in range(3, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:
        total = 1.0
        for k in range(2, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = math.sin(theta) * total
    return max(0.0, (1 - inside) / 2)


@functools.lru_cache(maxsize=1024)
def t_quantile(probability: float, df: int) -> float:
    """The t beyond which Student's t with `df` degrees of freedom has `probability` (one-sided, < 0.5): the z of
    `tail_z` widened for a spread estimated from df + 1 figures."""
    return _beyond(probability, lambda t: t_tail(t, df))


def _beyond(probability: float, tail: Callable[[float], float]) -> float:
    """The x >= 0 beyond which a distribution has `probability`, from its upper `tail` P(X > x), which falls
    monotonically: doubling until the tail is below it, then bisection to a relative 1e-9."""
    lo, hi = 0.0, 1.0
    while tail(hi) > probability and hi < 1e12:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if tail(mid) > probability:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * hi:
            break
    return hi


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b): its continued fraction (Abramowitz and Stegun 26.5.8),
    evaluated by the modified Lentz method, on the side of (a + 1) / (a + b + 2) where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - beta_cdf(1.0 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 1000):
        for coefficient in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + coefficient * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + coefficient / c
            c = c if abs(c) > tiny else tiny
            fraction *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * fraction / a


def f_tail(f: float, df1: int, df2: int) -> float:
    """P(F > f) for Snedecor's F on (df1, df2) degrees of freedom, f >= 0 (Abramowitz and Stegun 26.6.2)."""
    return beta_cdf(df2 / (df2 + df1 * f), df2 / 2, df1 / 2) if f > 0 else 1.0


@functools.lru_cache(maxsize=1024)
def f_quantile(probability: float, df1: int, df2: int) -> float:
    """The F beyond which Snedecor's F on (df1, df2) degrees of freedom has `probability`: the bar a ratio of two
    variance estimates must pass for the first to be larger than the second at that level."""
    return _beyond(probability, lambda f: f_tail(f, df1, df2))


SPREAD_F_LEVEL = 0.05  # the F-test's level: a metric's own spread is larger than the pool's when this unlikely


def pooled_spread(own: tuple[float, int], others: Sequence[tuple[float, int]]) -> tuple[float, int]:
    """One metric's relative node spread, (sd, df), pooled with the other metrics' of the same nodes: the pooled
    variance (each sd squared times its df, summed, over the summed df) on the summed degrees of freedom, unless
    the metric's own variance is larger than the others' pooled one by an F-test at SPREAD_F_LEVEL, one-sided
    (a metric whose nodes truly differ more must keep its own spread, or its clean nodes would be findings).
    Then, and with no others, its own. The others' estimates are independent of the metric's, as the test needs."""
    sd, df = own
    kept = [(s, d) for s, d in others if d > 0 and math.isfinite(s)]
    rest = sum(d for _, d in kept)
    if df <= 0 or rest <= 0:
        return own
    rest_var = sum(s * s * d for s, d in kept) / rest
    if rest_var <= 0 or sd * sd / rest_var > f_quantile(SPREAD_F_LEVEL, df, rest):
        return own
    return math.sqrt((sd * sd * df + rest_var * rest) / (df + rest)), df + rest


def relative_spread(figures: Sequence[float], summary: Summary) -> tuple[float, int]:
    """The `clipped_sd` of the figures over their median, and its degrees of freedom (0 when it cannot be told):
    one metric's node spread as the other metrics of the same nodes can pool it (`pooled_spread`)."""
    sd, kept = clipped_sd(figures, summary) if summary.median else (0.0, 0)
    return (sd / abs(summary.median), kept - 1) if kept > 1 else (0.0, 0)
