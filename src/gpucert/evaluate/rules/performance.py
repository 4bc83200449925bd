"""Measured performance: the figure of a measurement (the median of its samples), whether its samples can be
believed at all, and the figure against the SKU baseline. The comparisons with peers are in `stragglers`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from gpucert.evaluate.stats import median
from gpucert.measure.evidence import GpuEvidence, Measurement, NcclEvidence, NodeEvidence, P2pPair
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.baseline import Comparison, MetricBaseline
from gpucert.spec.cluster import MIN_SAMPLES as SPEC_MIN_SAMPLES

__all__ = [
    "ABSURD_FACTOR",
    "MIN_SAMPLES",
    "OWN_FIGURES",
    "Sampled",
    "absurd_problem",
    "against_baseline",
    "baseline_passes",
    "believable",
    "evidence_problem",
    "figure_of",
    "p2p_problem",
    "p2p_problems",
    "sample_problem",
    "samples_of",
    "top_busbw",
]

# a figure needs this many samples: every probe's timing protocol takes at least five repetitions (min_reps)
MIN_SAMPLES = SPEC_MIN_SAMPLES
# no GPU measures ten times its SKU's figure: a sample that does is not a measurement
ABSURD_FACTOR = 10.0

Key = tuple[str, int | None]  # (node, gpu) ; gpu None for node-level metrics


class Sampled(NamedTuple):
    """A measurement reduced to its median, with the number of samples behind it. A named tuple of a float, an int
    and a string, which the cyclic garbage collector stops tracking: a fleet's index and view keep one per GPU and
    metric (74,000 at 1,024 x 8), and each collection of the oldest generation walked every one (issue 28)."""

    value: float
    n: int
    unit: str


def top_busbw(sweep: NcclEvidence) -> list[float]:
    """The bus bandwidth samples at the sweep's largest message: what an all-reduce is judged by."""
    return list(max(sweep.points, key=lambda p: p.size_bytes).busbw) if sweep.points else []


def _pairs_of(ev: NodeEvidence, index: int | None) -> list[P2pPair]:
    if ev.p2p is None or index is None:
        return []
    return [p for p in ev.p2p.pairs if index in (p.src, p.dst) and p.samples]


OWN_FIGURES = frozenset(("nccl.all_reduce", "p2p.bandwidth"))  # figures not one measurement's median (figure_of)


def _measurement(
    ev: NodeEvidence, metric: str, index: int | None, found: GpuEvidence | None = None
) -> Measurement | None:
    g = found if found is not None else ev.gpu(index) if index is not None else None
    m = g.measurements.get(metric) if g is not None else None
    return m if m is not None and m.samples else None


def figure_of(ev: NodeEvidence, metric: str, index: int | None) -> Sampled | None:
    """One GPU's (or, for nccl.all_reduce, the node's) figure for a metric; None when it was not measured.

    P2P: the median over the pairs the GPU is part of of each pair's median; NCCL: at the largest message.
    """
    if metric == "nccl.all_reduce":
        busbw = top_busbw(ev.nccl) if ev.nccl is not None else []
        return Sampled(median(busbw), len(busbw), "GB/s") if busbw else None
    if metric == "p2p.bandwidth":
        pairs = _pairs_of(ev, index)
        if not pairs or ev.p2p is None:
            return None
        return Sampled(median([median(p.samples) for p in pairs]), sum(len(p.samples) for p in pairs), ev.p2p.unit)
    m = _measurement(ev, metric, index)
    return Sampled(median(m.samples), len(m.samples), m.unit) if m is not None else None


def samples_of(ev: NodeEvidence, metric: str, index: int | None, found: GpuEvidence | None = None) -> list[float]:
    """Every sample behind `figure_of`'s figure (P2P: those of every pair the GPU is part of). `found`:
    `ev.gpu(index)`, where the caller has it."""
    if metric == "nccl.all_reduce":
        return top_busbw(ev.nccl) if ev.nccl is not None else []
    if metric == "p2p.bandwidth":
        return [x for p in _pairs_of(ev, index) for x in p.samples]
    m = _measurement(ev, metric, index, found)
    return list(m.samples) if m is not None else []


def evidence_problem(
    ev: NodeEvidence,
    metric: str,
    unit: str,
    gpu: int | None = None,
    *,
    found: GpuEvidence | None = None,
    matrix: Mapping[int, str | None] | None = None,
) -> tuple[CheckStatus, str] | None:
    """What in a node's evidence for `metric` contradicts a measurement (the status it gives and why), or None: an
    all-reduce that returned wrong values fails; one over another number of ranks than the node's GPUs, or a
    figure in another unit than the baseline's, cannot be judged. Where the caller has them: `found`, `ev.gpu(gpu)`;
    `matrix`, `p2p_problems(ev)`."""
    if metric == "nccl.all_reduce" and ev.nccl is not None:
        if not ev.nccl.correct:
            return CheckStatus.FAIL, "the all-reduce returned wrong values"
        if ev.nccl.ranks != len(ev.gpus):
            return (
                CheckStatus.ERROR,
                f"the all-reduce ran over {ev.nccl.ranks} ranks, the node shows {len(ev.gpus)} GPUs",
            )
    if metric == "p2p.bandwidth":
        wrong = matrix[gpu] if matrix is not None and gpu is not None and gpu in matrix else p2p_problem(ev, gpu)
        if wrong is not None:
            return CheckStatus.ERROR, wrong
        units = {ev.p2p.unit} if ev.p2p is not None else set()
    else:
        g = found if found is not None else ev.gpu(gpu) if gpu is not None else None
        m = g.measurements.get(metric) if g is not None else None
        units = {m.unit} if m is not None else set()
    if units - {unit}:
        return CheckStatus.ERROR, f"{metric} was measured in {', '.join(sorted(units))}, the baseline is in {unit}"
    return None


def p2p_problem(ev: NodeEvidence, gpu: int | None) -> str | None:
    """Why the node's P2P matrix cannot be judged for `gpu` (None when it can): every ordered pair of the node's
    GPUs must be there exactly once, no GPU paired with itself or with a GPU the node does not show, every pair of
    `gpu` measured (none with an error or without samples, whichever of its GPUs the pair's error names), and
    measured GPU to GPU (without peer access the driver stages the copy through host memory, so the figure is not
    P2P's)."""
    if ev.p2p is None or gpu is None:
        return None
    indices = {g.index for g in ev.gpus}
    whole, seen = _matrix(ev, indices)
    return whole if whole is not None else _gpu_pairs_problem(ev, gpu, sorted(indices), seen)


def p2p_problems(ev: NodeEvidence) -> dict[int, str | None]:
    """`p2p_problem` of every GPU the node shows, its matrix looked over once (each GPU's check asks): the pairs
    missing and those staged through the host found in one pass each, then each GPU's of them (in the same order
    `_gpu_pairs_problem` names them)."""
    if ev.p2p is None:
        return {}
    indices = {g.index for g in ev.gpus}
    whole, seen = _matrix(ev, indices)
    order = sorted(indices)
    if whole is not None:
        return dict.fromkeys(order, whole)
    missing = [(a, b) for a in order for b in order if a != b and (a, b) not in seen]
    unmeasured = _unmeasured(ev.p2p.pairs)
    staged = [(p.src, p.dst) for p in ev.p2p.pairs if not p.peer_access and not p.error]
    if not missing and not unmeasured and not staged:  # a whole matrix measured GPU to GPU: most nodes
        return dict.fromkeys(order)
    return {i: _pairs_problem(i, missing, unmeasured, staged) for i in order}


def _unmeasured(pairs: Sequence[P2pPair]) -> list[tuple[int, int, str]]:
    """The pairs that were not measured, each with why: an error recorded (the probe's, whatever samples it left),
    or no samples. Either is a problem of BOTH the pair's GPUs: the probe adds a GPU error for the pair's source
    only (probes/between_gpus.py), and a PASS must mean that every pair of the GPU was measured."""
    return [
        (p.src, p.dst, p.error if p.error is not None else "it recorded no samples")
        for p in pairs
        if p.error is not None or not p.samples
    ]


def _pairs_problem(
    gpu: int, missing: list[tuple[int, int]], unmeasured: list[tuple[int, int, str]], staged: list[tuple[int, int]]
) -> str | None:
    """`_gpu_pairs_problem` of `gpu` from its node's missing, unmeasured and staged pairs (each in the order it names
    them)."""
    lacks = [f"{a}->{b}" for a, b in missing if gpu in (a, b)]
    if lacks:
        return f"the P2P matrix lacks the pairs {', '.join(lacks)}"
    not_measured = _unmeasured_problem(gpu, unmeasured)
    if not_measured is not None:
        return not_measured
    through = [f"{a}->{b}" for a, b in staged if gpu in (a, b)]
    if through:
        return f"no peer access between GPUs {', '.join(through)}: the copies went through the host, not GPU to GPU"
    return None


def _matrix(ev: NodeEvidence, indices: set[int]) -> tuple[str | None, set[tuple[int, int]]]:
    """Why the node's P2P matrix as a whole cannot be judged (None when it can), and the pairs it holds."""
    seen: set[tuple[int, int]] = set()
    for p in ev.p2p.pairs if ev.p2p is not None else ():
        if p.src == p.dst:
            return f"the P2P matrix pairs GPU {p.src} with itself", seen
        if not {p.src, p.dst} <= indices:
            return f"the P2P matrix has a pair {p.src}->{p.dst} of a GPU the node does not show", seen
        if (p.src, p.dst) in seen:
            return f"the P2P matrix holds the pair {p.src}->{p.dst} twice", seen
        seen.add((p.src, p.dst))
    return None, seen


def _gpu_pairs_problem(ev: NodeEvidence, gpu: int, order: list[int], seen: set[tuple[int, int]]) -> str | None:
    """Why `gpu`'s pairs of a whole matrix cannot be judged: one is missing, was not measured (an error, or no
    samples: `_unmeasured`), or went through the host."""
    missing = [(a, b) for a in order for b in order if a != b and gpu in (a, b) and (a, b) not in seen]
    pairs = ev.p2p.pairs if ev.p2p is not None else []
    staged = [(p.src, p.dst) for p in pairs if not p.peer_access and not p.error]
    return _pairs_problem(gpu, missing, _unmeasured(pairs), staged)


def _unmeasured_problem(gpu: int, unmeasured: list[tuple[int, int, str]]) -> str | None:
    """Why `gpu`'s figure cannot be judged or believed: the pairs of it that were not measured (`_unmeasured`)."""
    mine = [f"the P2P pair {a}->{b} was not measured: {why}" for a, b, why in unmeasured if gpu in (a, b)]
    return "; ".join(mine) if mine else None


def sample_problem(samples: list[float], expected: float | None, min_samples: int = MIN_SAMPLES) -> str | None:
    """Why these samples cannot be believed as a measurement (None when they can): fewer than `min_samples` (the
    spec's count for the probe, at least five), not numbers, zero or negative, or orders of magnitude beyond the
    SKU's figure `expected`."""
    if len(samples) < max(min_samples, MIN_SAMPLES):
        need = max(min_samples, MIN_SAMPLES)
        why = "a figure needs" if need == MIN_SAMPLES else "the spec asks of this probe (certify.samples)"
        return f"{len(samples)} samples, fewer than the {need} {why}"
    # what nearly every measurement is: finite (their sum is; a NaN or an infinity makes it not) and above zero,
    # told in two passes in C; any other is looked at sample by sample, for the words
    if not (math.isfinite(sum(samples)) and min(samples) > 0):
        odd = [x for x in samples if not math.isfinite(x)]
        if odd:
            return f"{len(odd)} of {len(samples)} samples are not numbers ({odd[0]})"
        low = [x for x in samples if x <= 0]
        if low:
            return f"{len(low)} of {len(samples)} samples are zero or negative ({low[0]})"
    return absurd_problem(max(samples), expected)


def absurd_problem(top: float, expected: float | None) -> str | None:
    """Why a measurement whose largest sample is `top` cannot be believed against the figure `expected`: orders of
    magnitude beyond it (sample_problem's last question, for a reader that kept only the largest sample)."""
    if expected is not None and top > ABSURD_FACTOR * expected:
        return (
            f"a sample of {top:.4g} is more than {ABSURD_FACTOR:.0f}x the baseline figure {expected:.4g}: "
            "no GPU measures that"
        )
    return None


def believable(
    ev: NodeEvidence,
    metric: str,
    gpu: int | None,
    expected: float | None,
    min_samples: int = MIN_SAMPLES,
    found: GpuEvidence | None = None,
) -> Sampled | str:
    """The figure of one measurement when its samples can be believed, else why not: the one answer to "is this
    figure believable" that the checks, the peers, the handover record and the exporter all ask. `found`:
    `ev.gpu(gpu)`, where the caller has it."""
    if metric == "p2p.bandwidth":  # figure_of's figure from the pairs in hand
        unmeasured = _unmeasured_problem(gpu, _unmeasured(ev.p2p.pairs)) if ev.p2p and gpu is not None else None
        if unmeasured is not None:  # never a figure from the GPU's other pairs
            return unmeasured
        pairs = _pairs_of(ev, gpu)
        problem = sample_problem([x for p in pairs for x in p.samples], expected, min_samples)
        if problem is not None:
            return problem
        if pairs and ev.p2p is not None:
            n = sum(len(p.samples) for p in pairs)
            return Sampled(median([median(p.samples) for p in pairs]), n, ev.p2p.unit)
        return f"{metric} was not measured"
    m = _measurement(ev, metric, gpu, found) if metric not in OWN_FIGURES else None
    samples = list(m.samples) if m is not None else samples_of(ev, metric, gpu, found)
    problem = sample_problem(samples, expected, min_samples)
    if problem is not None:
        return problem
    if m is not None:  # figure_of's figure, from the samples in hand
        return Sampled(median(samples), len(samples), m.unit)
    figure = figure_of(ev, metric, gpu)
    return figure if figure is not None else f"{metric} was not measured"


def against_baseline(check: str, key: Key, sampled: Sampled, baseline: MetricBaseline) -> Finding:
    limit, ok_min, tail, rounded = _bounds(baseline)
    ok = sampled.value >= limit if ok_min else sampled.value <= limit
    return _against(check, key[0], key[1], sampled, baseline, ok, tail, rounded)


def baseline_passes(
    check: str, node: str, figures: Sequence[tuple[int, Sampled]], baseline: MetricBaseline
) -> list[Finding | None]:
    """`against_baseline` of each of the node's (GPU, figure) where it passes, else None: the baseline's bounds
    told once for the node's GPUs (a re-test decides a carried node's GPUs of a metric at once), and each pass
    worded in one expression as `_against` words it (its fields byte for byte: tests/unit/test_analysis.py),
    without a call per GPU (74,000 at 1,024 x 8)."""
    limit, ok_min, tail, rounded = _bounds(baseline)
    expected, unit = baseline.expected, baseline.unit
    return [
        Finding(
            check,
            CheckStatus.PASS,
            node,
            gpu,
            f"{node}/gpu{gpu} {check} {value:.4g} {measured} (median of {n} samples) is "
            f"{abs(deviation):.1%} {'below' if deviation < 0 else 'above'} {tail}",
            round(value, 4),
            expected,
            unit,
            rounded,
        )
        if (value >= limit if ok_min else value <= limit)
        else None
        for gpu, (value, n, measured) in figures
        for deviation in (value / expected - 1,)
    ]


def _against(
    check: str,
    node: str,
    gpu: int | None,
    sampled: Sampled,
    baseline: MetricBaseline,
    ok: bool,
    tail: str,
    rounded: float,
) -> Finding:
    """`against_baseline`'s finding, its figure on the right side of the limit (`ok`) or not."""
    deviation = sampled.value / baseline.expected - 1
    word = "below" if deviation < 0 else "above"
    where = node if gpu is None else f"{node}/gpu{gpu}"
    msg = (
        f"{where} {check} {sampled.value:.4g} {sampled.unit} (median of {sampled.n} samples) is "
        f"{abs(deviation):.1%} {word} {tail}"
    )
    return Finding(
        check,
        CheckStatus.PASS if ok else CheckStatus.FAIL,
        node,
        gpu,
        msg,
        round(sampled.value, 4),
        baseline.expected,
        baseline.unit,
        rounded,
    )


# per baseline figure (kept with it: an id is not reused while its object lives), what every GPU's finding says alike
_BOUNDS: dict[int, tuple[MetricBaseline, tuple[float, bool, str, float]]] = {}


def _bounds(baseline: MetricBaseline) -> tuple[float, bool, str, float]:
    """The baseline's limit, whether a figure must reach it (else stay below it), the words of the finding after
    the figure's deviation, and the limit as the finding rounds it: once per baseline figure, not once per GPU."""
    found = _BOUNDS.get(id(baseline))
    if found is not None and found[0] is baseline:
        return found[1]
    limit = baseline.threshold()
    tail = (
        f"the baseline {baseline.expected:.4g} {baseline.unit} (limit {limit:.4g}, tolerance {baseline.tolerance:.0%})"
    )
    if baseline.loosened is not None:  # said wherever the figure is judged: the run signs the baseline that says it
        tail += (
            f" [tolerance loosened on purpose: {baseline.loosened.reason}; approved by {baseline.loosened.approved_by}]"
        )
    told = (limit, baseline.comparison is Comparison.MIN, tail, round(limit, 4))
    if len(_BOUNDS) > 4096:  # a long-lived process judging many baselines: start again
        _BOUNDS.clear()
    _BOUNDS[id(baseline)] = (baseline, told)
    return told
