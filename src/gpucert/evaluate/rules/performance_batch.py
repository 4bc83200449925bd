"""Many measurements' figures at once (issue 28: a pool's peer index believes every GPU's figure of a metric): each
measurement's samples sorted in one numpy call per sample count, the samples every figure needs told by arrays, and
each figure's median and slow samples read from the sorted rows. Pure: sample arrays in, numbers out.

It answers only where the answer is provably `believable`'s and `slow_samples`'s, to the bit: enough samples, every
one finite and above zero, none beyond `ABSURD_FACTOR` x the SKU figure. Then `sample_problem` has nothing to say,
and the median, the ratios to it and the 10th percentile are the same IEEE operations on the same doubles in the
same order (numpy's elementwise float64 add, subtract, multiply and divide round as Python's do). Every other
measurement (too few samples, not numbers, zero or negative, absurd) is None here: the caller asks `believable`,
which says why, in its words (fail closed: a figure is never believed here that `believable` would refuse).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpucert.evaluate.rules.performance import (
    ABSURD_FACTOR,
    MIN_SAMPLES,
    OWN_FIGURES,
    Sampled,
    believable,
    samples_of,
)
from gpucert.evaluate.rules.stability import SlowSamples, slow_samples
from gpucert.evaluate.stats import median
from gpucert.measure.evidence import GpuEvidence, NodeEvidence
from gpucert.measure.evidence_base import SampleArray
from gpucert.plan.checks import NODE_METRICS

__all__ = ["Believed", "Figure", "believe_all", "figures_of_rows"]

# a measurement's median and, where its stability is judged, its slow samples (None without a sign to judge by)
Figure = tuple[float, SlowSamples | None]
Rows = Sequence[npt.NDArray[np.float64]]


def figures_of_rows(
    rows: Rows, expected: float | None, least: int, slow: tuple[float, float] | None = None
) -> list[Figure | None]:
    """Per row (one measurement's samples), its median and (`slow`: the sign, +1 where higher is better, and
    maxDeviation) `slow_samples` of it, where `believable` would believe it; None where it would not, or might not
    (the caller asks it). `least`: the samples the spec asks of the probe; `expected`: the SKU figure."""
    out: list[Figure | None] = [None] * len(rows)
    need = max(least, MIN_SAMPLES)
    by_count: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if row.size >= need:
            by_count.setdefault(row.size, []).append(i)
    top = ABSURD_FACTOR * expected if expected is not None else None
    for n, which in by_count.items():
        with np.errstate(all="ignore"):  # Python's float arithmetic overflows to inf silently too
            _fill(out, which, np.sort(np.stack([rows[i] for i in which]), axis=1), n, top, slow)
    return out


def _fill(
    out: list[Figure | None],
    which: list[int],
    ordered: npt.NDArray[np.float64],
    n: int,
    top: float | None,
    slow: tuple[float, float] | None,
) -> None:
    """`figures_of_rows` of rows of `n` samples each, sorted (`ordered`: one row a measurement)."""
    good = np.isfinite(ordered).all(axis=1) & (ordered[:, 0] > 0)
    if top is not None:
        good &= ~(ordered[:, -1] > top)  # absurd_problem: a sample beyond ABSURD_FACTOR x the SKU figure
    mid = n // 2
    medians = ordered[:, mid] if n % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2  # median_of_sorted
    rows = np.flatnonzero(good)
    if slow is None:
        for r, m in zip(rows.tolist(), medians[rows].tolist(), strict=True):
            out[which[r]] = (m, None)
        return
    sign, max_deviation = slow
    kept, centre = ordered[rows], medians[rows]
    ratios = kept / centre[:, None] - 1  # each sample against its own median: slow_samples' r
    is_slow = sign * ratios < -max_deviation
    # the 10th percentile where higher is better (the 90th where lower is): quantile_of_sorted's interpolation
    pos = (0.1 if sign > 0 else 0.9) * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    lows = (kept[:, lo] + (kept[:, hi] - kept[:, lo]) * (pos - lo)).tolist()
    worsts = (kept[:, 0] if sign > 0 else kept[:, -1]).tolist()
    counts = is_slow.sum(axis=1).tolist()
    for j, (r, m) in enumerate(zip(rows.tolist(), centre.tolist(), strict=True)):
        depths: tuple[float, ...] = ()
        if counts[j]:  # each slow sample's shortfall, deepest first
            depths = tuple(sorted((-sign * ratios[j][is_slow[j]]).tolist(), reverse=True))
        found = SlowSamples(len(depths), n, m, lows[j], worsts[j], depths) if m > 0 else None
        out[which[r]] = (m, found)


# one GPU's (or node's) figure in a pool: its node's evidence, the GPU (None: the node's), its figure or why it cannot
# be believed, and its slow samples (where asked)
Believed = tuple[NodeEvidence, int | None, Sampled | str, SlowSamples | None]


def _row(samples: Sequence[float]) -> npt.NDArray[np.float64]:
    return samples.array if isinstance(samples, SampleArray) else np.asarray(samples, dtype=np.float64)


def believe_all(
    evidence: Sequence[NodeEvidence],
    metric: str,
    expected: float | None,
    least: int,
    slow: tuple[float, float] | None = None,
) -> list[Believed]:
    """`believable` of every GPU (or, for a node-level metric, node) of the nodes' evidence on `metric`, in the order
    the nodes and their GPUs are listed (a GPU index listed twice: its first, as `NodeEvidence.gpu` answers), and
    `slow_samples` of each figure believed (`slow`: the sign and maxDeviation, where stability is judged). The
    measurements of one GPU each are told by `figures_of_rows`; the rest, and every figure it leaves, by
    `believable` itself."""
    slots: list[tuple[NodeEvidence, int | None, GpuEvidence | None]] = []
    for ev in evidence:
        if metric in NODE_METRICS:
            slots.append((ev, None, None))
            continue
        seen: set[int] = set()
        for gpu in ev.gpus:
            if gpu.index not in seen:
                seen.add(gpu.index)
                slots.append((ev, gpu.index, gpu))
    if metric == "p2p.bandwidth":
        return _believe_p2p(slots, expected, least)
    empty = np.empty(0)
    units: list[str | None] = []
    rows: list[npt.NDArray[np.float64]] = []
    for _ev, _idx, g in slots:
        m = g.measurements.get(metric) if g is not None and metric not in OWN_FIGURES else None
        units.append(m.unit if m is not None else None)
        rows.append(_row(m.samples) if m is not None else empty)
    told = figures_of_rows(rows, expected, least, slow)
    out: list[Believed] = []
    for (ev, idx, g), unit, row, fig in zip(slots, units, rows, told, strict=True):
        if fig is not None and unit is not None:
            out.append((ev, idx, Sampled(fig[0], row.size, unit), fig[1]))
            continue
        found = believable(ev, metric, idx, expected, least, g)
        mine = None
        if slow is not None and isinstance(found, Sampled):
            mine = slow_samples(samples_of(ev, metric, idx, g), *slow)
        out.append((ev, idx, found, mine))
    return out


def _row_stats(rows: Rows) -> tuple[list[float], list[bool], list[float]]:
    """Per row (one pair's samples, at least one): its median, whether every sample is finite and above zero, and its
    largest sample."""
    medians, clean, tops = [0.0] * len(rows), [False] * len(rows), [0.0] * len(rows)
    by_count: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        by_count.setdefault(row.size, []).append(i)
    for n, which in by_count.items():
        with np.errstate(all="ignore"):
            ordered = np.sort(np.stack([rows[i] for i in which]), axis=1)
            mid = n // 2
            told = ordered[:, mid] if n % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2
        good = (np.isfinite(ordered).all(axis=1) & (ordered[:, 0] > 0)).tolist()
        for i, m, g, top in zip(which, told.tolist(), good, ordered[:, -1].tolist(), strict=True):
            medians[i], clean[i], tops[i] = m, g, top
    return medians, clean, tops


def _believe_p2p(
    slots: list[tuple[NodeEvidence, int | None, GpuEvidence | None]], expected: float | None, least: int
) -> list[Believed]:
    """`believable` of each GPU's P2P figure (the median of its pairs' medians, on every sample of its pairs): each
    pair's samples told once for both its GPUs; a GPU whose samples all are numbers above zero, enough and none
    absurd, from them; any other by `believable`."""
    need = max(least, MIN_SAMPLES)
    top_allowed = ABSURD_FACTOR * expected if expected is not None else None
    rows: list[npt.NDArray[np.float64]] = []
    of_gpu: dict[tuple[int, int], list[int]] = {}  # (the node's place in `slots` order, GPU) -> its pairs' rows
    nodes: dict[int, int] = {}
    for ev, _idx, _g in slots:
        if id(ev) in nodes or ev.p2p is None:
            continue
        place = nodes[id(ev)] = len(nodes)
        for p in ev.p2p.pairs:
            if len(p.samples):
                for end in {p.src, p.dst}:
                    of_gpu.setdefault((place, end), []).append(len(rows))
                rows.append(_row(p.samples))
    medians, clean, tops = _row_stats(rows)
    out: list[Believed] = []
    for ev, idx, g in slots:
        which = of_gpu.get((nodes[id(ev)], idx), []) if id(ev) in nodes and idx is not None else []
        n = sum(rows[j].size for j in which)
        if (
            which
            and ev.p2p is not None
            and n >= need
            and all(clean[j] for j in which)
            and not (top_allowed is not None and max(tops[j] for j in which) > top_allowed)
        ):
            figure: Sampled | str = Sampled(median([medians[j] for j in which]), n, ev.p2p.unit)
        else:
            figure = believable(ev, "p2p.bandwidth", idx, expected, least, g)
        out.append((ev, idx, figure, None))
    return out
