"""Measured performance against the SKU baseline, then against peers (straggler detection).

A GPU below its baseline is a baseline finding; one inside the baseline but well behind its peers on the same node
or in the fleet is a straggler finding. Never both: one root cause, one finding.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from gpucert.analysis.stats import Summary, median, summarize
from gpucert.baseline import Comparison, MetricBaseline
from gpucert.checks import CheckStatus, Finding
from gpucert.evidence import Measurement, NcclEvidence, NodeEvidence, P2pPair

__all__ = [
    "ABSURD_FACTOR",
    "MIN_PEERS",
    "MIN_SAMPLES",
    "STRAGGLER_MIN_Z",
    "Sampled",
    "StragglerIndex",
    "against_baseline",
    "evidence_problem",
    "figure_of",
    "sample_problem",
    "samples_of",
    "top_busbw",
]

STRAGGLER_MIN_Z = 3.5  # a deviation must also stand out of the peers' own spread by this robust z
MIN_PEERS = 3
# a figure needs this many samples: every probe's timing protocol takes at least five repetitions (min_reps)
MIN_SAMPLES = 5
# no GPU measures ten times its SKU's figure: a sample that does is not a measurement
ABSURD_FACTOR = 10.0

Key = tuple[str, int | None]  # (node, gpu) ; gpu None for node-level metrics


@dataclass(frozen=True, slots=True)
class Sampled:
    """A measurement reduced to its median, with the number of samples behind it."""

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


def _measurement(ev: NodeEvidence, metric: str, index: int | None) -> Measurement | None:
    g = ev.gpu(index) if index is not None else None
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


def samples_of(ev: NodeEvidence, metric: str, index: int | None) -> list[float]:
    """Every sample behind `figure_of`'s figure (P2P: those of every pair the GPU is part of)."""
    if metric == "nccl.all_reduce":
        return top_busbw(ev.nccl) if ev.nccl is not None else []
    if metric == "p2p.bandwidth":
        return [x for p in _pairs_of(ev, index) for x in p.samples]
    m = _measurement(ev, metric, index)
    return list(m.samples) if m is not None else []


def evidence_problem(
    ev: NodeEvidence, metric: str, unit: str, gpu: int | None = None
) -> tuple[CheckStatus, str] | None:
    """What in a node's evidence for `metric` contradicts a measurement (the status it gives and why), or None: an
    all-reduce that returned wrong values fails; one over another number of ranks than the node's GPUs, or a
    figure in another unit than the baseline's, cannot be judged."""
    if metric == "nccl.all_reduce" and ev.nccl is not None:
        if not ev.nccl.correct:
            return CheckStatus.FAIL, "the all-reduce returned wrong values"
        if ev.nccl.ranks != len(ev.gpus):
            return (
                CheckStatus.ERROR,
                f"the all-reduce ran over {ev.nccl.ranks} ranks, the node shows {len(ev.gpus)} GPUs",
            )
    if metric == "p2p.bandwidth":
        units = {ev.p2p.unit} if ev.p2p is not None else set()
    else:
        g = ev.gpu(gpu) if gpu is not None else None
        m = g.measurements.get(metric) if g is not None else None
        units = {m.unit} if m is not None else set()
    if units - {unit}:
        return CheckStatus.ERROR, f"{metric} was measured in {', '.join(sorted(units))}, the baseline is in {unit}"
    return None


def sample_problem(samples: list[float], expected: float | None) -> str | None:
    """Why these samples cannot be believed as a measurement (None when they can): too few, not numbers, zero or
    negative, or orders of magnitude beyond the SKU's figure `expected`."""
    if len(samples) < MIN_SAMPLES:
        return f"{len(samples)} samples, fewer than the {MIN_SAMPLES} a figure needs"
    odd = [x for x in samples if not math.isfinite(x)]
    if odd:
        return f"{len(odd)} of {len(samples)} samples are not numbers ({odd[0]})"
    low = [x for x in samples if x <= 0]
    if low:
        return f"{len(low)} of {len(samples)} samples are zero or negative ({low[0]})"
    if expected is not None and max(samples) > ABSURD_FACTOR * expected:
        return (
            f"a sample of {max(samples):.4g} is more than {ABSURD_FACTOR:.0f}x the baseline figure {expected:.4g}: "
            "no GPU measures that"
        )
    return None


def _where(key: Key) -> str:
    return key[0] if key[1] is None else f"{key[0]}/gpu{key[1]}"


def against_baseline(check: str, key: Key, sampled: Sampled, baseline: MetricBaseline) -> Finding:
    limit = baseline.threshold()
    ok = sampled.value >= limit if baseline.comparison is Comparison.MIN else sampled.value <= limit
    deviation = sampled.value / baseline.expected - 1
    word = "below" if deviation < 0 else "above"
    msg = (
        f"{_where(key)} {check} {sampled.value:.4g} {sampled.unit} (median of {sampled.n} samples) is "
        f"{abs(deviation):.1%} {word} the baseline {baseline.expected:.4g} {baseline.unit} "
        f"(limit {limit:.4g}, tolerance {baseline.tolerance:.0%})"
    )
    return Finding(
        check=check,
        status=CheckStatus.PASS if ok else CheckStatus.FAIL,
        node=key[0],
        gpu=key[1],
        message=msg,
        observed=round(sampled.value, 4),
        expected=baseline.expected,
        unit=baseline.unit,
        limit=round(limit, 4),
    )


class StragglerIndex:
    """One metric across the fleet, summarised once; judges each GPU against its node peers and the fleet."""

    def __init__(
        self,
        metric: str,
        values: Mapping[Key, Sampled],
        *,
        max_deviation: float,
        higher_is_better: bool = True,
        min_z: float = STRAGGLER_MIN_Z,
    ) -> None:
        self.metric = metric
        self.values = values
        self.max_deviation = max_deviation
        self.sign = 1.0 if higher_is_better else -1.0
        self.min_z = min_z
        self.fleet: Summary | None = summarize([s.value for s in values.values()]) if values else None
        self._by_node: dict[str, list[Key]] = defaultdict(list)
        for key in values:
            self._by_node[key[0]].append(key)

    def _behind(self, value: float, peers: Summary) -> tuple[float, float] | None:
        deviation = value / peers.median - 1
        z = peers.z(value)
        if self.sign * deviation < -self.max_deviation and self.sign * z < -self.min_z:
            return deviation, z
        return None

    def judge(self, key: Key) -> Finding:
        """Pass, or a `straggler.<metric>` failure saying by how much, against whom, and on how many samples."""
        check = f"straggler.{self.metric}"
        s = self.values[key]
        reasons: list[str] = []
        if key[1] is not None:
            peers = [self.values[k].value for k in self._by_node[key[0]] if k != key]
            if len(peers) >= MIN_PEERS:
                node_peers = summarize(peers)
                hit = self._behind(s.value, node_peers)
                if hit:
                    reasons.append(
                        f"{abs(hit[0]):.1%} {'below' if self.sign > 0 else 'above'} the median of its "
                        f"{len(peers)} peers on {key[0]} ({node_peers.median:.4g} {s.unit}, robust z "
                        f"{hit[1]:.1f})"
                    )
        if self.fleet is not None and self.fleet.n - 1 >= MIN_PEERS:
            hit = self._behind(s.value, self.fleet)
            if hit:
                reasons.append(
                    f"{abs(hit[0]):.1%} {'below' if self.sign > 0 else 'above'} the fleet median over "
                    f"{self.fleet.n} {'GPUs' if key[1] is not None else 'nodes'} "
                    f"({self.fleet.median:.4g} {s.unit}, robust z {hit[1]:.1f})"
                )
        fleet_median = self.fleet.median if self.fleet else s.value
        if not reasons:
            return Finding(
                check=check,
                status=CheckStatus.PASS,
                node=key[0],
                gpu=key[1],
                observed=s.value,
                expected=round(fleet_median, 4),
                unit=s.unit,
                message=f"{_where(key)} {self.metric} {s.value:.4g} {s.unit} is in line with its peers",
            )
        msg = (
            f"{_where(key)} {self.metric} {s.value:.4g} {s.unit} (median of {s.n} samples) is "
            + " and ".join(reasons)
            + f"; limit {self.max_deviation:.0%}"
        )
        return Finding(
            check=check,
            status=CheckStatus.FAIL,
            node=key[0],
            gpu=key[1],
            message=msg,
            observed=round(s.value, 4),
            expected=round(fleet_median, 4),
            unit=s.unit,
        )
