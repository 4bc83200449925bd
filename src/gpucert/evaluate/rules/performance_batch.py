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
from typing import NamedTuple, cast

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
from gpucert.measure.evidence import GpuEvidence, NodeEvidence
from gpucert.measure.evidence_base import SampleArray
from gpucert.plan.checks import NODE_METRICS

__all__ = ["Ask", "Believed", "Slots", "believe_all", "believe_many", "believe_p2p", "figures_of_rows", "slots_of"]

Rows = Sequence[npt.NDArray[np.float64]]

_EMPTY = np.empty(0)
_EMPTY.flags.writeable = False
_new = tuple.__new__  # a named tuple made by the tuple's own constructor: its generated __new__ is Python


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
    for n, which in by_count.items():
        with np.errstate(all="ignore"):  # Python's float arithmetic overflows to inf silently too
            ordered = _stacked([rows[i] for i in which], n)
            ordered.sort(axis=1)  # in place: the stacked copy is this call's own
            _fill(medians, slows, which, ordered, top, slow)
    return medians, slows


def _stacked(rows: Rows, n: int) -> npt.NDArray[np.float64]:
    """The rows of `n` samples each as one (rows, n) array: np.stack's copy, in one concatenation (np.stack
    reshapes each row in Python first: 8x the time for a pool's 8,192 rows)."""
    return np.concatenate(rows).reshape(len(rows), n) if rows else np.empty((0, n))


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
    centres = centre.tolist()
    for i, m in zip(places, centres, strict=True):
        medians[i] = m
    if slow is None:
        return
    sign, max_deviation = slow
    kept = ordered if rows.size == len(ordered) else ordered[rows]  # most often every row: no copy
    worst = kept[:, 0] if sign > 0 else kept[:, -1]
    # slow_samples' r of each sample against its own median rises with the sample (IEEE division and subtraction
    # round monotonically): a row has a slow sample exactly when its worst is one, and only those rows are told
    any_slow = sign * (worst / centre - 1) < -max_deviation
    # the 10th percentile where higher is better (the 90th where lower is): quantile_of_sorted's interpolation
    pos = (0.1 if sign > 0 else 0.9) * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    lows = (kept[:, lo] + (kept[:, hi] - kept[:, lo]) * (pos - lo)).tolist()
    worsts = worst.tolist()
    # most measurements have no slow sample: theirs told in one comprehension, the few others' depths after
    made = [
        _new(SlowSamples, (0, n, m, low, worst, ())) if m > 0 else None
        for m, low, worst in zip(centres, lows, worsts, strict=True)
    ]
    for j in np.flatnonzero(any_slow).tolist():
        if made[j] is not None:  # each slow sample's shortfall, deepest first
            ratios = kept[j] / centre[j] - 1  # each sample against its own median: slow_samples' r
            depths = tuple(sorted((-sign * ratios[sign * ratios < -max_deviation]).tolist(), reverse=True))
            made[j] = SlowSamples(len(depths), n, centres[j], lows[j], worsts[j], depths)
    for i, s in zip(places, made, strict=True):
        slows[i] = s


Key = tuple[str, int | None]  # (node, gpu); gpu None for a node-level metric


class Ask(NamedTuple):
    """One metric to believe of a pool's evidence: the SKU figure (`expected`), the samples the spec asks of its
    probe (`least`), and (`slow`: the sign and maxDeviation) where stability is judged, to tell slow samples."""

    metric: str
    expected: float | None
    least: int
    slow: tuple[float, float] | None = None


@dataclass(slots=True)
class Slots:
    """Every GPU (or, for a node-level metric, node) of the nodes' evidence, in order, a GPU index listed twice once
    (its first, as `NodeEvidence.gpu` answers), with its evidence and its (node, GPU) key: the same for every
    metric of a pool, so told once and shared by their `Believed` (which nobody writes)."""

    evidence: list[NodeEvidence] = field(default_factory=list)
    gpus: list[int | None] = field(default_factory=list)
    found: list[GpuEvidence | None] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)


@dataclass(slots=True)
class Believed:
    """`believe_all`'s answer, one entry a GPU (or node) in each list: its node's evidence, the GPU (None: the
    node's), its figure or why it cannot be believed, and its slow samples (where asked); `keys`: each one's (node,
    GPU). Iterates as the first four. The evidence, GPU and key lists are the pool's `Slots`', shared."""

    evidence: list[NodeEvidence] = field(default_factory=list)
    gpus: list[int | None] = field(default_factory=list)
    figures: list[Sampled | str] = field(default_factory=list)
    slow: list[SlowSamples | None] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)
    refused: int = 0  # how many figures are why not (a string), not figures

    def __iter__(self) -> Iterator[tuple[NodeEvidence, int | None, Sampled | str, SlowSamples | None]]:
        return zip(self.evidence, self.gpus, self.figures, self.slow, strict=True)


def _row(samples: Sequence[float]) -> npt.NDArray[np.float64]:
    return samples.array if type(samples) is SampleArray else np.asarray(samples, dtype=np.float64)


def slots_of(evidence: Sequence[NodeEvidence], *, per_node: bool) -> Slots:
    """`Slots` of the nodes' evidence: each node's (`per_node`: a node-level metric's) or each GPU's."""
    out = Slots()
    for ev in evidence:
        if per_node:
            out.evidence.append(ev)
            out.gpus.append(None)
            out.found.append(None)
            continue
        seen: set[int] = set()
        for gpu in ev.gpus:
            if gpu.index not in seen:
                seen.add(gpu.index)
                out.evidence.append(ev)
                out.gpus.append(gpu.index)
                out.found.append(gpu)
    out.keys = [(ev.node, gpu) for ev, gpu in zip(out.evidence, out.gpus, strict=True)]
    return out


def believe_many(evidence: Sequence[NodeEvidence], asks: Sequence[Ask]) -> dict[str, Believed]:
    """`believe_all` of every metric asked, over the same evidence (a pool's): the GPUs (and nodes) listed once for
    them all, and each GPU's measurements looked up in one pass over the GPUs for every metric (at 1,024 x 8 the
    evidence is a heap of hundreds of MiB: a pass per metric waited on memory for every GPU's dict again)."""
    slots: dict[bool, Slots] = {}
    for ask in asks:
        per_node = ask.metric in NODE_METRICS
        if per_node not in slots:
            slots[per_node] = slots_of(evidence, per_node=per_node)
    measured = [a.metric for a in asks if a.metric not in NODE_METRICS and a.metric not in OWN_FIGURES]
    found = _measurements(slots[False].found, measured) if measured else {}
    return {a.metric: _believe(slots[a.metric in NODE_METRICS], a, found.get(a.metric)) for a in asks}


def _measurements(gpus: Sequence[GpuEvidence | None], metrics: Sequence[str]) -> dict[str, tuple[Rows, list[str]]]:
    """Each GPU's samples of each metric as an array (empty where it has none) and their unit (empty), GPU by GPU:
    each measurement read once, while its GPU's are at hand."""
    out: dict[str, tuple[list[npt.NDArray[np.float64]], list[str]]] = {m: ([], []) for m in metrics}
    lists = [(metric, rows.append, units.append) for metric, (rows, units) in out.items()]
    for g in gpus:
        held = g.measurements if g is not None else {}
        for metric, row, unit in lists:
            m = held.get(metric)
            if m is None:
                row(_EMPTY)
                unit("")
            else:
                samples = m.samples
                row(samples.array if type(samples) is SampleArray else np.asarray(samples, dtype=np.float64))
                unit(m.unit)
    return dict(out)


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
    return believe_many(evidence, [Ask(metric, expected, least, slow)])[metric]


def _believe(slots: Slots, ask: Ask, measured: tuple[Rows, list[str]] | None) -> Believed:
    """`believe_all` of one metric over the pool's slots (`measured`: each slot's samples of it and their unit,
    where the figure is one measurement's median)."""
    metric, expected, least, slow = ask
    out = Believed(slots.evidence, slots.gpus, keys=slots.keys)
    if metric == "p2p.bandwidth":
        out.figures = believe_p2p(slots, expected, least)
        out.slow = [None] * len(out.figures)
        out.refused = sum(1 for f in out.figures if type(f) is str)
        return out
    found = slots.found
    # a node's figure, or one of its own (nccl.all_reduce): believable's to say
    rows, units = measured if measured is not None else ([_EMPTY] * len(found), [""] * len(found))
    medians, slows = figures_of_rows(rows, expected, least, slow)
    # a median told implies a measurement of enough samples: its figure at once; any other is believable's to say
    figures: list[Sampled | str | None] = [
        _new(Sampled, (v, r.size, u)) if v is not None else None for v, r, u in zip(medians, rows, units, strict=True)
    ]
    figures_left = [i for i, f in enumerate(figures) if f is None]
    for i in figures_left:
        ev, idx, g = slots.evidence[i], slots.gpus[i], found[i]
        figure = figures[i] = believable(ev, metric, idx, expected, least, g)
        mine = None
        if slow is not None and isinstance(figure, Sampled):
            mine = slow_samples(samples_of(ev, metric, idx, g), *slow)
        slows[i] = mine
    out.figures = cast("list[Sampled | str]", figures)
    out.slow = slows
    out.refused = sum(1 for i in figures_left if type(figures[i]) is str)
    return out


def _pair_rows(slots: Slots) -> tuple[Rows, list[int], list[int], list[int], list[int], set[tuple[int, int]]]:
    """Every pair with samples of the slots' nodes' P2P evidence: its samples, and its node's place among the nodes
    with P2P evidence (`places`: each slot's, -1 where its node has none) and its two GPUs; and each (place, GPU) of
    a pair not measured (an error, or no samples: `believable` refuses both its GPUs' figures)."""
    rows: list[npt.NDArray[np.float64]] = []
    node, src, dst = list[int](), list[int](), list[int]()
    place_of: dict[int, int] = {}
    unmeasured: set[tuple[int, int]] = set()
    for ev in slots.evidence:
        if id(ev) in place_of or ev.p2p is None:
            continue
        place = place_of[id(ev)] = len(place_of)
        for p in ev.p2p.pairs:
            row = _row(p.samples)
            if p.error is not None or not row.size:
                unmeasured.update(((place, p.src), (place, p.dst)))
            if row.size:
                rows.append(row)
                node.append(place)
                src.append(p.src)
                dst.append(p.dst)
    places = [place_of.get(id(ev), -1) for ev in slots.evidence]
    return rows, places, node, src, dst, unmeasured


def _row_stats(
    rows: Rows, sizes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Per row (one pair's samples, at least one; `sizes`: how many each): its median, whether every sample is finite
    and above zero, and its largest sample."""
    medians, clean, tops = np.zeros(len(rows)), np.zeros(len(rows), dtype=bool), np.zeros(len(rows))
    for n in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == n).tolist()
        with np.errstate(all="ignore"):
            ordered = _stacked([rows[i] for i in which] if len(which) < len(rows) else rows, n)
            ordered.sort(axis=1)
            mid = n // 2
            told = ordered[:, mid] if n % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2
        medians[which] = told
        clean[which] = np.isfinite(ordered).all(axis=1) & (ordered[:, 0] > 0)
        tops[which] = ordered[:, -1]
    return medians, clean, tops


def _median_of_groups(
    values: npt.NDArray[np.float64], starts: npt.NDArray[np.intp], counts: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """`median_of_sorted` of each group of `values` (sorted within each group: `starts` and `counts` say where)."""
    mid = starts + counts // 2
    lower = starts + np.maximum(counts // 2 - 1, 0)
    with np.errstate(all="ignore"):
        found: npt.NDArray[np.float64] = np.where(counts % 2 == 1, values[mid], (values[lower] + values[mid]) / 2)
    return found


def believe_p2p(slots: Slots, expected: float | None, least: int) -> list[Sampled | str]:
    """`believable` of each GPU's P2P figure (the median of its pairs' medians, on every sample of its pairs): each
    pair's samples told once for both its GPUs, each GPU's pairs at once by arrays; a GPU whose samples all are
    numbers above zero, enough and none absurd, from them; any other (a GPU of a pair not measured among them) by
    `believable`."""
    rows, places, node, src, dst, unmeasured = _pair_rows(slots)
    told: dict[tuple[int, int], tuple[float, int]] = {}  # per (node, GPU) believed here: its figure and samples
    if rows:
        sizes = np.array([r.size for r in rows], dtype=np.int64)
        medians, clean, tops = _row_stats(rows, sizes)
        a, b, at = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(node, dtype=np.int64)
        twice = a != b  # a pair counts for both its GPUs (a GPU with itself, once)
        row = np.concatenate([np.arange(len(rows)), np.flatnonzero(twice)])
        end_node, end_gpu = at[row], np.concatenate([a, b[twice]])
        order = np.lexsort((medians[row], end_gpu, end_node))  # by node and GPU, each GPU's pair medians sorted
        row, end_node, end_gpu = row[order], end_node[order], end_gpu[order]
        new = np.ones(len(row), dtype=bool)
        new[1:] = (end_node[1:] != end_node[:-1]) | (end_gpu[1:] != end_gpu[:-1])
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, len(row)))
        total = np.add.reduceat(sizes[row], starts)
        good = np.logical_and.reduceat(clean[row], starts) & (total >= max(least, MIN_SAMPLES))
        if expected is not None:
            good &= ~(np.maximum.reduceat(tops[row], starts) > ABSURD_FACTOR * expected)
        figure = _median_of_groups(medians[row], starts, counts)
        kept, heads = np.flatnonzero(good), starts[good]
        ends = zip(end_node[heads].tolist(), end_gpu[heads].tolist(), strict=True)
        told = dict(zip(ends, zip(figure[kept].tolist(), total[kept].tolist(), strict=True), strict=True))
    figures: list[Sampled | str] = []
    for ev, idx, g, place in zip(slots.evidence, slots.gpus, slots.found, places, strict=True):
        got = None
        if idx is not None and ev.p2p is not None and (place, idx) not in unmeasured:
            got = told.get((place, idx))
        if got is not None and ev.p2p is not None:
            figures.append(Sampled(got[0], got[1], ev.p2p.unit))
        else:
            figures.append(believable(ev, "p2p.bandwidth", idx, expected, least, g))
    return figures
