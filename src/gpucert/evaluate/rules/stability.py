"""`stability.<metric>`: a GPU (or node) whose samples are slow now and then where its peers' are not. Pure:
samples in, the statistic and the finding's words out (`judge_stability`, which `PeerIndex.stability` asks).

A sample is slow when it is more than `maxDeviation` below (worse than) the GPU's own median. How slow matters as
much as how many: three samples 20% down are rarer among healthy GPUs than three 6% down. The test weighs both
by asking the pool's samples themselves how rare that depth is, with no model of their tail:

- Every sample of the pool (each GPU's relative to its own median, the GPU's own included) is ranked by depth.
  If the GPU were as healthy as its peers, each of its samples would be as likely as any other to be among the
  deepest; the chance that its n samples hold at least j of the pool's r deepest is hypergeometric, exact for any
  distribution of healthy samples (heavy tails, rare hiccups, whatever the peers show).
- The threshold r is set by the GPU's own samples: its 3rd deepest, its 4th deepest, and (five or more slow) its
  shallowest slow sample, each with every sample of the pool at least as deep. Deep samples make r small, so the
  chance small: depth is weighed by how few of the peers' samples reach it. Three depths are tested; the chance
  is multiplied by three (Bonferroni), by the number of GPUs judged and by the number of metrics the pool's rule
  judges (8 with the memory, compute and PCIe probes), and the GPU fails when that is below the one-sided normal
  tail of `minZ` (2.3e-4 at 3.5): a clean pool shows a stability finding on any metric at most that often.
- Beyond the deepest sample any peer shows, the samples cannot say how rare a depth is; nothing is extrapolated
  (a fitted tail would flag the heavy tails real boards have). So with 8 metrics judged a GPU needs three slow
  samples beyond its peers' in pools of about 320 GPUs or more (the chance is about 24 / GPUs^2), four from about
  50 GPUs, five below; two never reach the bar below about 100,000 GPUs and are not tested. The number of
  samples sets the power: how likely a GPU slow in a fraction of its repetitions shows that many
  (benchmarks/stability.py).

The count test it replaces (samples beyond `maxDeviation` against the peers' rate at that fixed depth, binomial)
ignored depth, and its rate estimated from the data made it lenient by about j! at j slow samples.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpucert.evaluate.stats import hypergeometric_tail, median_of_sorted, quantile_of_sorted, tail_z
from gpucert.plan.checks import CheckStatus, Finding

__all__ = [
    "DEPTHS_TESTED",
    "MIN_SLOW_SAMPLES",
    "DepthScan",
    "Rules",
    "SlowSamples",
    "TailPool",
    "judge_stability",
    "scan",
    "slow_samples",
    "unstable",
    "verdict",
]


@dataclass(frozen=True, slots=True)
class Rules:
    """The spec's knobs (`certify.stragglers`) for one metric's peer rules, and which way is worse for it."""

    max_deviation: float
    min_z: float = 3.5
    higher_is_better: bool = True
    metrics: int = 1  # how many metrics the pool's stability rule judges: its bar holds for all of them at once


MIN_SLOW_SAMPLES = 3  # the fewest slow samples tested: two are 1 / GPUs likely among the pool's deepest anyway
SHALLOWEST_FROM = 5  # with this many slow samples or more, all of them are tested too (at the shallowest's depth)
DEPTHS_TESTED = 3  # the 3rd and 4th deepest, and all of them from SHALLOWEST_FROM: the Bonferroni factor


class SlowSamples(NamedTuple):
    """A measurement's slow samples: those more than maxDeviation below (worse than) its own median. A named tuple
    of numbers, which the garbage collector stops tracking (one per GPU and metric whose stability is judged)."""

    k: int
    n: int
    median: float
    low: float  # the 10th percentile (the 90th where lower is better): the depth of the bad tail
    worst: float
    depths: tuple[float, ...]  # each slow sample's shortfall from the median, relative, deepest first


def slow_samples(samples: Sequence[float], sign: float, max_deviation: float) -> SlowSamples | None:
    """The samples' slow ones (`sign` +1 where higher is better, -1 where lower is), None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)  # once, for the median and the quantile both
    m = median_of_sorted(ordered)
    if m <= 0:
        return None
    if math.isfinite(sum(ordered)):  # numbers all: the slow ones are at the worse end of the sorted samples
        depths = []
        for x in ordered if sign > 0 else reversed(ordered):
            r = x / m - 1
            if not sign * r < -max_deviation:
                break
            depths.append(-sign * r)
        depths.sort(reverse=True)
    else:
        depths = sorted((-sign * r for r in [x / m - 1 for x in samples] if sign * r < -max_deviation), reverse=True)
    low = quantile_of_sorted(ordered, 0.1 if sign > 0 else 0.9)
    worst = min(samples) if sign > 0 else max(samples)
    return SlowSamples(len(depths), len(samples), m, low, worst, tuple(depths))


class TailPool:
    """A pool's slow samples, every member's at once (the GPU judged among them): how many are at least so deep."""

    def __init__(self) -> None:
        self.n = 0  # every sample of the pool's members, slow or not
        self.k = 0
        self.members = 0
        self._depths: list[float] = []  # ascending once frozen
        self._sorted = True

    def add(self, s: SlowSamples) -> None:
        self.n += s.n
        self.k += s.k
        self.members += 1
        self._depths.extend(s.depths)
        self._sorted = False

    def add_all(self, members: Sequence[SlowSamples]) -> None:
        """`add` of each (a pool's thousands at once)."""
        self.n += sum(s.n for s in members)
        self.k += sum(s.k for s in members)
        self.members += len(members)
        for s in members:
            if s.depths:  # most measurements have no slow sample
                self._depths.extend(s.depths)
        self._sorted = False

    def at_least(self, depth: float) -> int:
        if not self._sorted:
            self._depths.sort()
            self._sorted = True
        return len(self._depths) - bisect.bisect_left(self._depths, depth)


@dataclass(frozen=True, slots=True)
class DepthScan:
    """The GPU's most telling depth: `own` of its samples at least `depth` below its median, where `as_deep` of
    the pool's samples (its own included) are; `chance`: that a healthy GPU's samples hold that many of them."""

    own: int
    depth: float
    as_deep: int
    chance: float


def _tested(k: int) -> list[int]:
    return [j for j in (MIN_SLOW_SAMPLES, MIN_SLOW_SAMPLES + 1) if j <= k] + ([k] if k >= SHALLOWEST_FROM else [])


def scan(mine: SlowSamples, pool: TailPool) -> DepthScan | None:
    """The smallest chance over the depths tested (None with fewer than MIN_SLOW_SAMPLES slow samples); `pool`
    holds `mine` too."""
    best: DepthScan | None = None
    for j in _tested(mine.k):
        depth = mine.depths[j - 1]
        own = sum(1 for d in mine.depths if d >= depth)  # ties: every one of its samples that deep
        as_deep = max(pool.at_least(depth), own)
        chance = hypergeometric_tail(own, max(pool.n, mine.n), mine.n, as_deep)
        if best is None or chance < best.chance:
            best = DepthScan(own, depth, as_deep, chance)
    return best


def verdict(found: DepthScan | None, gpus: int, metrics: int, min_z: float) -> tuple[float, float, bool]:
    """The chance that any of `gpus` healthy GPUs shows what the scan found, at any depth tested, on any of the
    `metrics` the pool's stability rule judges; its z, and whether that is unstable (z at least `minZ`): a healthy
    fleet shows a rare depth somewhere, and the bar holds for the whole pool, not each metric alone."""
    anywhere = min(1.0, found.chance * DEPTHS_TESTED * gpus * max(metrics, 1)) if found is not None else 1.0
    z = tail_z(anywhere)
    return anywhere, z, found is not None and z >= min_z


def unstable(mine: SlowSamples, tails: TailPool, rules: Rules) -> bool:
    """Whether `judge_stability` fails the GPU whose slow samples are `mine` among its pool's `tails`, unworded."""
    return verdict(scan(mine, tails), tails.members, rules.metrics, rules.min_z)[2]


def _where(key: tuple[str, int | None]) -> str:
    return key[0] if key[1] is None else f"{key[0]}/gpu{key[1]}"


def judge_stability(
    check: str, key: tuple[str, int | None], mine: SlowSamples, tails: TailPool, rules: Rules, unit: str
) -> Finding:
    """`check` (`stability.<metric>`) of the GPU (or node) `key`, whose slow samples are `mine` among its pool's
    `tails` (its own included): pass, or fail when `verdict` says so, with the figures the reader needs."""
    metric = check.removeprefix("stability.")
    sign = 1.0 if rules.higher_is_better else -1.0
    word = "below" if sign > 0 else "above"
    peers = tails.members - 1
    k_peers, n_peers = tails.k - mine.k, tails.n - mine.n
    figures = (
        f"{mine.k} of {mine.n} samples are more than {rules.max_deviation:.1%} {word} its own median "
        f"{mine.median:.4g} {unit} ({'lowest' if sign > 0 else 'highest'} {mine.worst:.4g}, "
        f"{'10th' if sign > 0 else '90th'} percentile {mine.low:.4g}); its {peers} peers: {k_peers} "
        f"of {n_peers} samples ({k_peers / n_peers if n_peers else 0:.2%})"
    )
    found = scan(mine, tails)
    judged = tails.members
    anywhere, z, bad = verdict(found, judged, rules.metrics, rules.min_z)
    status = CheckStatus.FAIL if bad else CheckStatus.PASS
    message = f"{_where(key)} {metric}: {figures}"
    if found is not None:
        why = (
            f"{found.own} of its samples are at least {found.depth:.1%} {word} its median, where "
            f"{found.as_deep - found.own} of its peers' {n_peers} are: so many that deep by chance p = "
            f"{found.chance:.1e} per GPU (rank test over its and its peers' samples), {anywhere:.1e} for any "
            f"of {judged} GPUs x {rules.metrics} metrics at {DEPTHS_TESTED} depths (z {z:.1f}, limit minZ "
            f"{rules.min_z:g})"
        )
        message = (
            f"{_where(key)} {metric} is unstable where its peers are not: {figures}; {why}"
            if status is CheckStatus.FAIL
            else f"{message}; {why}"
        )
    elif mine.k:
        message += f"; fewer than {MIN_SLOW_SAMPLES} slow samples are never a pattern"
    return Finding(
        check,
        status,
        key[0],
        key[1],
        message,
        observed=round(mine.low, 4),
        expected=round(mine.median, 4),
        unit=unit,
        limit=round(mine.median * (1 - sign * rules.max_deviation), 4),
    )
