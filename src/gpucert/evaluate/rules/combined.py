"""One statistic over a GPU's metrics at once: `straggler.combined` (the GPU against its node's peers on every
per-GPU metric) and, through rules/drift.py, `drift.combined` (the board against its own history on every metric).
Pure: numbers in, Findings out.

A GPU a few percent slow on every metric stands out of no single metric's spread far enough for that metric's bar,
but its metrics together say more than any one of them: the sum of its per-metric z (each the GPU's robust z on one
metric, worse-is-negative) over the square root of the sum of the metrics' correlation matrix is again a standard
normal for a healthy GPU (Stouffer's z for correlated tests). The correlation is measured, never assumed: over the
pool's GPUs, metric by metric pair, with a robust estimator (Gnanadesikan and Kettenring's, on the MAD), so that
the few slow GPUs do not move it; a negative estimate counts as none (a larger denominator only makes the check
stricter). Boards whose metrics move together (one clock drives every GEMM) gain little from combining them, and
the statistic says so by its denominator: it gains sqrt(k) on k independent metrics and nothing on k copies of one.

Each metric's z is capped at the combined check's own bar before it is summed: a metric beyond it is its own check's
finding, and one metric alone never carries the combined statistic past that bar (it adds at most bar / sqrt(k) on k
metrics: "slow on several metrics at once").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpucert.evaluate.stats import MAD_TO_SIGMA, median, summarize
from gpucert.plan.checks import CheckStatus, Finding

__all__ = [
    "COMBINED",
    "DRIFT_COMBINED",
    "MIN_FOR_CORRELATION",
    "Combined",
    "combine",
    "correlations",
    "judge_drift_combined",
    "judge_peer_combined",
    "robust_correlation",
    "told",
]

Key = tuple[str, int | None]  # (node, gpu)
MIN_FOR_CORRELATION = 8  # GPUs with both metrics before their correlation is estimated (fewer: taken as 1)


def _scale(values: Sequence[float]) -> float:
    return MAD_TO_SIGMA * summarize(values).mad  # a long list by numpy where every value is finite: the same bits


Located = tuple[float, float]  # a list's median and robust scale (`_scale`)


def _located(values: Sequence[float]) -> Located:
    return median(values), _scale(values)


def robust_correlation(
    u: Sequence[float], v: Sequence[float], u_at: Located | None = None, v_at: Located | None = None
) -> float:
    """Gnanadesikan-Kettenring correlation on the MAD: (s(u+v)^2 - s(u-v)^2) / (s(u+v)^2 + s(u-v)^2) of the two
    standardized by their own robust scale. 1.0 with fewer than MIN_FOR_CORRELATION pairs or no spread (the
    conservative answer: a perfectly correlated metric adds nothing). `u_at`, `v_at`: `_located(u)` and
    `_located(v)`, where the caller keeps them (a metric's whole list is paired with every other metric's)."""
    if len(u) != len(v):
        raise ValueError("robust_correlation needs pairs")
    if len(u) < MIN_FOR_CORRELATION:
        return 1.0
    mu, su = u_at if u_at is not None else _located(u)
    mv, sv = v_at if v_at is not None else _located(v)
    if su <= 0 or sv <= 0:
        return 1.0
    with np.errstate(all="ignore"):  # the same IEEE operations as the lists', element by element
        a = (np.asarray(u, dtype=np.float64) - mu) / su
        b = (np.asarray(v, dtype=np.float64) - mv) / sv
        plus, minus = _scale((a + b).tolist()) ** 2, _scale((a - b).tolist()) ** 2
    return (plus - minus) / (plus + minus) if plus + minus > 0 else 1.0


def correlations(zs: Mapping[str, Mapping[Key, float]]) -> dict[tuple[str, str], float]:
    """Every pair of metrics' robust correlation over the GPUs that have both, floored at 0 (and 1 on the diagonal)."""
    metrics = sorted(zs)
    out: dict[tuple[str, str], float] = {}
    whole: dict[str, Located] = {}  # each metric's list over all its GPUs, located once

    def located(m: str, both: list[Key]) -> Located | None:
        """`_located` of metric m's list over `both`, kept where that is m's whole list in its own order."""
        if len(both) != len(zs[m]) or len(both) < MIN_FOR_CORRELATION or both != list(zs[m]):
            return None
        if m not in whole:
            whole[m] = _located(list(zs[m].values()))
        return whole[m]

    for i, a in enumerate(metrics):
        out[(a, a)] = 1.0
        for b in metrics[i + 1 :]:
            both = [k for k in zs[a] if k in zs[b]]
            u, v = [zs[a][k] for k in both], [zs[b][k] for k in both]
            r = max(0.0, min(1.0, robust_correlation(u, v, located(a, both), located(b, both))))
            out[(a, b)] = out[(b, a)] = r
    return out


def combine(
    z: Mapping[str, float], corr: Mapping[tuple[str, str], float], cap: float, variance: float | None = None
) -> tuple[float, float]:
    """The combined z of one GPU's per-metric z (worse is negative), each capped at +-`cap`, and the sum of the
    correlations it was divided by (k for k independent metrics, k^2 for k copies of one; `variance`: that sum,
    where the caller keeps it for these metrics in this order)."""
    metrics = list(z)
    capped = [max(-cap, min(cap, z[m])) for m in metrics]
    if variance is None:
        variance = sum(corr.get((a, b), 1.0) for a in metrics for b in metrics)
    return sum(capped) / math.sqrt(variance), variance


def told(zs: Mapping[str, Mapping[Key, float]]) -> int:
    """How many GPUs have a z on two metrics or more: a combined z each (the check's multiplicity)."""
    count: dict[Key, int] = {}
    for per in zs.values():
        for k in per:
            count[k] = count.get(k, 0) + 1
    return sum(1 for n in count.values() if n >= 2)


@dataclass(frozen=True, slots=True)
class Combined:
    """Per metric, each GPU's z (worse is negative), and the correlations over them: the pool's combined view."""

    zs: Mapping[str, Mapping[Key, float]]
    corr: Mapping[tuple[str, str], float]
    cap: float
    count: int  # how many GPUs have a combined z (the multiplicity of the check)
    # the sum of the correlations per set of metrics told (in their order): most GPUs have the same set
    variances: dict[tuple[str, ...], float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, zs: Mapping[str, Mapping[Key, float]], cap: float) -> Combined:
        return cls(zs, correlations(zs), cap, told(zs))

    def of_key(self, key: Key) -> tuple[dict[str, float], float, float] | None:
        """The key's per-metric z, its combined z and the correlations' sum; None with fewer than two metrics."""
        mine = {m: z for m, per in self.zs.items() if (z := per.get(key)) is not None and math.isfinite(z)}
        if len(mine) < 2:
            return None
        told = tuple(mine)
        z, variance = combine(mine, self.corr, self.cap, self.variances.get(told))
        self.variances[told] = variance
        return mine, z, variance


COMBINED = "straggler.combined"


def _listed(mine: Mapping[str, float], cap: float) -> str:
    return ", ".join(f"{m} {z:.1f}" + ("" if abs(z) <= cap else f" (counted {math.copysign(cap, z):.1f})")
                     for m, z in sorted(mine.items(), key=lambda kv: kv[1]))  # fmt: skip


def judge_peer_combined(key: Key, combined: Combined, bar: float, within: str) -> Finding | None:
    """`straggler.combined` of one GPU: pass, or fail when its combined z is behind by more than `bar` (the bar
    for every GPU the pool judges); None with fewer than two metrics told. `within`: whom the z are against."""
    told = combined.of_key(key)
    if told is None:
        return None
    mine, z, variance = told
    k, where = len(mine), f"{key[0]}/gpu{key[1]}"
    figures = (
        f"combined z {z:.1f} over {k} metrics against {within} (bar {bar:.1f} for any of {combined.count} GPUs); "
        f"each metric's robust z: {_listed(mine, combined.cap)}; each counted up to the bar, divided by the square "
        f"root of {variance:.1f}, the sum of the metrics' correlations over the pool's GPUs ({k} if they were "
        f"independent, {k * k} if one)"
    )
    behind = z < -bar
    status = CheckStatus.FAIL if behind else CheckStatus.PASS
    message = f"{where} is behind on several metrics at once: {figures}" if behind else f"{where}: {figures}"
    return Finding(COMBINED, status, key[0], key[1], message, observed=round(z, 2), expected=0.0, unit="z",
                   limit=round(-bar, 2))  # fmt: skip


DRIFT_COMBINED = "drift.combined"


def judge_drift_combined(
    key: Key, combined: Combined, falls: Mapping[str, float], *, bar: float, limit: float, source: str
) -> Finding | None:
    """`drift.combined` of one board: fails when its combined z (each metric's fall over its standard error, the
    correlations measured over the pool's boards) passes `bar` AND its mean fall over the metrics passes `limit`;
    None with fewer than two metrics told. `falls`: each metric's relative fall (worse is positive)."""
    told = combined.of_key(key)
    if told is None:
        return None
    mine, z, variance = told
    k, where = len(mine), f"{key[0]}/gpu{key[1]}"
    mean = sum(falls[m] for m in mine) / k
    each = ", ".join(f"{m} {falls[m]:+.2%} z {-mine[m]:.1f}" for m in sorted(mine, key=lambda m: mine[m]))
    failed = z < -bar and mean > limit
    message = (
        f"{where} {'fell' if failed else 'is within its own history'} on {k} metrics at once: mean fall "
        f"{mean:.2%} (limit {limit:.1%}), combined z {-z:.1f} against a bar of {bar:.2f} (each fall over its "
        f"run-to-run error, {source}; each counted up to the bar, divided by the square root of "
        f"{variance:.1f}, the sum of the metrics' correlations over the pool's boards: {k} if independent, {k * k} "
        f"if one); each metric's fall: {each}"
    )
    return Finding(DRIFT_COMBINED, CheckStatus.FAIL if failed else CheckStatus.PASS, key[0], key[1], message,
                   observed=round(-z, 2), expected=0.0, unit="z", limit=round(bar, 2))  # fmt: skip
