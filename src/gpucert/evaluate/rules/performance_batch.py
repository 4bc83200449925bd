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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

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

__all__ = ["Believed", "believe_all", "figures_of_rows"]

Rows = Sequence[npt.NDArray[np.float64]]


def figures_of_rows(
    rows: Rows, expected: float | None, least: int, slow: tuple[float, float] | None = None
) -> tuple[list[float | None], list[SlowSamples | None]]:
    """Per row (one measurement's samples), its median where `believable` would believe it (None where it would
    not, or might not: the caller asks it), and (`slow`: the sign, +1 where higher is better, and maxDeviation)
    `slow_samples` of it. `least`: the samples the spec asks of the probe; `expected`: the SKU figure. Two lists,
    not a pair a row: what a pool's index keeps is most of what it allocates (the collector walks every survivor)."""
    medians: list[float | None] = [None] * len(rows)
    slows: list[SlowSamples | None] = [None] * len(rows)
    need = max(least, MIN_SAMPLES)
    by_count: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if row.size >= need:
            by_count.setdefault(row.size, []).append(i)
    top = ABSURD_FACTOR * expected if expected is not None else None
    for which in by_count.values():
        with np.errstate(all="ignore"):  # Python's float arithmetic overflows to inf silently too
            ordered = np.sort(np.stack([rows[i] for i in which]), axis=1)
            _fill(medians, slows, which, ordered, top, slow)
    return medians, slows


def _fill(
    medians: list[float | None],
    slows: list[SlowSamples | None],
    which: list[int],
    ordered: npt.NDArray[np.float64],
    top: float | None,
    slow: tuple[float, float] | None,
) -> None:
    """`figures_of_rows` of rows of as many samples each, sorted (`ordered`: one row a measurement)."""
    n = ordered.shape[1]
    good = np.isfinite(ordered).all(axis=1) & (ordered[:, 0] > 0)
    if top is not None:
        good &= ~(ordered[:, -1] > top)  # absurd_problem: a sample beyond ABSURD_FACTOR x the SKU figure
    mid = n // 2
    told = ordered[:, mid] if n % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2  # median_of_sorted
    rows = np.flatnonzero(good)
    places = [which[r] for r in rows.tolist()]
    centre = told[rows]
    for i, m in zip(places, centre.tolist(), strict=True):
        medians[i] = m
    if slow is None:
        return
    sign, max_deviation = slow
    kept = ordered[rows]
    ratios = kept / centre[:, None] - 1  # each sample against its own median: slow_samples' r
    is_slow = sign * ratios < -max_deviation
    # the 10th percentile where higher is better (the 90th where lower is): quantile_of_sorted's interpolation
    pos = (0.1 if sign > 0 else 0.9) * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    lows = (kept[:, lo] + (kept[:, hi] - kept[:, lo]) * (pos - lo)).tolist()
    worsts = (kept[:, 0] if sign > 0 else kept[:, -1]).tolist()
    counts = is_slow.sum(axis=1).tolist()
    for j, (i, m) in enumerate(zip(places, centre.tolist(), strict=True)):
        depths: tuple[float, ...] = ()
        if counts[j]:  # each slow sample's shortfall, deepest first
            depths = tuple(sorted((-sign * ratios[j][is_slow[j]]).tolist(), reverse=True))
        slows[i] = SlowSamples(len(depths), n, m, lows[j], worsts[j], depths) if m > 0 else None


@dataclass(slots=True)
class Believed:
    """`believe_all`'s answer, one entry a GPU (or node) in each list: its node's evidence, the GPU (None: the
    node's), its figure or why it cannot be believed, and its slow samples (where asked). Iterates as those
    four-tuples."""

    evidence: list[NodeEvidence] = field(default_factory=list)
    gpus: list[int | None] = field(default_factory=list)
    figures: list[Sampled | str] = field(default_factory=list)
    slow: list[SlowSamples | None] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[NodeEvidence, int | None, Sampled | str, SlowSamples | None]]:
        return zip(self.evidence, self.gpus, self.figures, self.slow, strict=True)


def _row(samples: Sequence[float]) -> npt.NDArray[np.float64]:
    return samples.array if isinstance(samples, SampleArray) else np.asarray(samples, dtype=np.float64)


def _slots(evidence: Sequence[NodeEvidence], metric: str) -> tuple[Believed, list[GpuEvidence | None]]:
    """Every GPU (or, for a node-level metric, node) of the nodes' evidence, in order, a GPU index listed twice
    once (its first, as `NodeEvidence.gpu` answers), with its evidence; figures and slow samples not yet told."""
    out, found = Believed(), list[GpuEvidence | None]()
    for ev in evidence:
        if metric in NODE_METRICS:
            out.evidence.append(ev)
            out.gpus.append(None)
            found.append(None)
            continue
        seen: set[int] = set()
        for gpu in ev.gpus:
            if gpu.index not in seen:
                seen.add(gpu.index)
                out.evidence.append(ev)
                out.gpus.append(gpu.index)
                found.append(gpu)
    return out, found


def believe_all(
    evidence: Sequence[NodeEvidence],
    metric: str,
    expected: float | None,
    least: int,
    slow: tuple[float, float] | None = None,
) -> Believed:
    """`believable` of every GPU (or, for a node-level metric, node) of the nodes' evidence on `metric`, in the order
    the nodes and their GPUs are listed (a GPU index listed twice: its first, as `NodeEvidence.gpu` answers), and
    `slow_samples` of each figure believed (`slow`: the sign and maxDeviation, where stability is judged). The
    measurements of one GPU each are told by `figures_of_rows`; the rest, and every figure it leaves, by
    `believable` itself."""
    out, found = _slots(evidence, metric)
    if metric == "p2p.bandwidth":
        out.figures = _believe_p2p(out, found, expected, least)
        out.slow = [None] * len(out.figures)
        return out
    empty = np.empty(0)
    units: list[str | None] = []
    rows: list[npt.NDArray[np.float64]] = []
    for g in found:
        m = g.measurements.get(metric) if g is not None and metric not in OWN_FIGURES else None
        units.append(m.unit if m is not None else None)
        rows.append(_row(m.samples) if m is not None else empty)
    medians, slows = figures_of_rows(rows, expected, least, slow)
    for i, (ev, idx, g) in enumerate(zip(out.evidence, out.gpus, found, strict=True)):
        median, unit = medians[i], units[i]
        if median is not None and unit is not None:
            out.figures.append(Sampled(median, rows[i].size, unit))
            out.slow.append(slows[i])
            continue
        figure = believable(ev, metric, idx, expected, least, g)
        mine = None
        if slow is not None and isinstance(figure, Sampled):
            mine = slow_samples(samples_of(ev, metric, idx, g), *slow)
        out.figures.append(figure)
        out.slow.append(mine)
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
    out: Believed, found: list[GpuEvidence | None], expected: float | None, least: int
) -> list[Sampled | str]:
    """`believable` of each GPU's P2P figure (the median of its pairs' medians, on every sample of its pairs): each
    pair's samples told once for both its GPUs; a GPU whose samples all are numbers above zero, enough and none
    absurd, from them; any other by `believable`."""
    need = max(least, MIN_SAMPLES)
    top_allowed = ABSURD_FACTOR * expected if expected is not None else None
    rows: list[npt.NDArray[np.float64]] = []
    ends: list[tuple[int, int, int]] = []  # each row's node (its place among the nodes) and GPUs
    place_of: dict[int, int] = {}
    for ev in out.evidence:
        if id(ev) in place_of or ev.p2p is None:
            continue
        place = place_of[id(ev)] = len(place_of)
        for p in ev.p2p.pairs:
            if len(p.samples):
                rows.append(_row(p.samples))
                ends.append((place, p.src, p.dst))
    medians, clean, tops = _row_stats(rows)
    # per (node, GPU): its pairs' medians, how many samples, whether all are numbers above zero, the largest
    told: dict[tuple[int, int], tuple[list[float], list[int], list[bool], list[float]]] = {}
    for j, (place, a, b) in enumerate(ends):
        for end in (a,) if a == b else (a, b):
            pairs = told.setdefault((place, end), ([], [], [], []))
            pairs[0].append(medians[j])
            pairs[1].append(rows[j].size)
            pairs[2].append(clean[j])
            pairs[3].append(tops[j])
    figures: list[Sampled | str] = []
    for ev, idx, g in zip(out.evidence, out.gpus, found, strict=True):
        got = told.get((place_of[id(ev)], idx)) if id(ev) in place_of and idx is not None else None
        if (
            got is not None
            and ev.p2p is not None
            and sum(got[1]) >= need
            and all(got[2])
            and not (top_allowed is not None and max(got[3]) > top_allowed)
        ):
            figures.append(Sampled(median(got[0]), sum(got[1]), ev.p2p.unit))
        else:
            figures.append(believable(ev, "p2p.bandwidth", idx, expected, least, g))
    return figures
