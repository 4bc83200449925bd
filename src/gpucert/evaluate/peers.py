"""The peer comparisons of one run: each metric's PeerIndex (analysis/stragglers) per node pool, built once from
the evidence of the pool's measured nodes (and, on recertification, the fleet's latest evidence of that pool), and
what the verdict says beside the checks: each pool's median against its SKU figure, and the comparisons that could
not be made for too few peers. A node's peers are its pool's nodes, never another pool's (another SKU).

Reads nothing itself: the run's view hands it the evidence. Figures that cannot be believed are no peers (they
would move the median the others are held to).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from gpucert.evaluate.rules.combined import Combined, told
from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.rules.performance_batch import Ask, Believed, believe_many
from gpucert.evaluate.rules.stragglers import FLEET, PeerIndex, Rules
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import NODE_METRICS, REPEATED_METRICS
from gpucert.spec.baseline import Comparison, GpuBaseline
from gpucert.spec.cluster import ClusterSpec

__all__ = ["Believe", "PeerComparisons", "probe_of_metric", "unstable_is_judged"]

# (the evidence of a pool's nodes, each metric asked: the SKU figure, the samples needed, the sign and maxDeviation
# where stability is judged) -> per metric, each GPU's (or node's) figure or why it cannot be believed, with its slow
# samples (rules/performance_batch.py's believe_many)
Believe = Callable[[Sequence[NodeEvidence], Sequence[Ask]], Mapping[str, Believed]]


def probe_of_metric(metric: str) -> str:
    """The probe that measures a metric (`compute.gemm.bf16` -> compute)."""
    return metric.split(".", 1)[0]


def unstable_is_judged(metric: str) -> bool:
    """Whether `stability.<metric>` applies: the samples are one GPU's (or node's) repetitions over time. P2P
    samples come from the GPU's different pairs: a slow partner would read as instability."""
    return metric in REPEATED_METRICS


class PeerComparisons:
    """Every metric's peers in every pool, indexed on first use."""

    def __init__(
        self,
        evidence: Callable[[str], Sequence[NodeEvidence]],
        spec: ClusterSpec,
        baselines: Mapping[str, GpuBaseline],
        *,
        believe: Believe = believe_many,
    ) -> None:
        self._evidence = evidence  # a pool's name -> the evidence of its nodes (and its fleet peers)
        self._believe = believe  # rules.performance_batch.believe_many, or the view's, which keeps its nodes' figures
        self.spec = spec
        self.baselines = baselines
        self._index: dict[tuple[str, str], PeerIndex] = {}
        self._combined: dict[str, tuple[Combined, float]] = {}

    def label(self, pool: str) -> str:
        """How the findings name the group a figure is compared with: the fleet, or one pool of several."""
        return FLEET if len(self.spec.pools) == 1 else f"{pool} pool"

    def rules(self, metric: str, pool: str) -> Rules:
        s = self.spec.stragglers_for(pool)
        return Rules(
            max_deviation=s.max_deviation,
            min_z=s.min_z,
            higher_is_better=self.baselines[pool].metrics[metric].comparison is Comparison.MIN,
            metrics=sum(1 for m in self.metrics(pool) if unstable_is_judged(m)),
        )

    def index(self, metric: str, pool: str) -> PeerIndex:
        if (metric, pool) not in self._index:
            self._index_pool(metric, pool)
        return self._index[(metric, pool)]

    def _index_pool(self, metric: str, pool: str) -> None:
        """Every metric's index of the pool at once (`metric`'s among them): the pool's figures believed in one go,
        its GPUs listed once for all (a node's check asks every metric's peers, and its node-level rule every
        per-GPU metric's spread)."""
        metrics = [m for m in self.metrics(pool) if (m, pool) not in self._index]
        if metric not in metrics:
            metrics.append(metric)
        stable = {m: unstable_is_judged(m) for m in metrics}
        asks = [self.ask(m, pool) for m in metrics]
        evidence = [ev for ev in self._evidence(pool) if ev.collected]
        found = self._believe(evidence, asks)
        label = self.label(pool)
        for m in metrics:
            b = found[m]
            # every figure believed (most pools): all at once; else those believed (the last of a key listed twice)
            values = cast("dict[tuple[str, int | None], Sampled]", dict(zip(b.keys, b.figures, strict=True)))
            if b.refused or len(values) < len(b.keys):
                values = {k: f for k, f in zip(b.keys, b.figures, strict=True) if type(f) is Sampled}
            slow = {k: s for k, s in zip(b.keys, b.slow, strict=True) if s is not None} if stable[m] else None
            self._index[(m, pool)] = PeerIndex(
                m,
                values,
                self.rules(m, pool),
                slow=slow,
                pool_of=lambda _node: label,
                others=lambda _label, m=m: self._other_spreads(m, pool),  # type: ignore[misc]
            )

    def ask(self, metric: str, pool: str) -> Ask:
        """What the pool's index asks of each figure of `metric`: the SKU figure, the samples the spec asks of its
        probe, and (where stability is judged) the sign and maxDeviation that tell slow samples."""
        rules = self.rules(metric, pool)
        how = (1.0 if rules.higher_is_better else -1.0, rules.max_deviation) if unstable_is_judged(metric) else None
        expected = self.baselines[pool].metrics[metric].expected
        return Ask(metric, expected, self.spec.certify.min_samples(probe_of_metric(metric)), how)

    def asks(self, pool: str) -> dict[str, Ask]:
        """`ask` of each of the pool's metrics."""
        return {m: self.ask(m, pool) for m in self.metrics(pool)}

    def _other_spreads(self, metric: str, pool: str) -> list[tuple[float, int]]:
        """The node spreads of the pool's other per-GPU metrics (PeerIndex.relative_spread): the same nodes
        measured again, which the node-level rule pools with `metric`'s own (issue 27: 16 nodes' spread alone is
        too uncertain a bar for a 4% slow node)."""
        return [
            self.index(m, pool).relative_spread(self.label(pool))
            for m in self.metrics(pool)
            if m != metric and m not in NODE_METRICS
        ]

    def combined(self, pool: str) -> tuple[Combined, float]:
        """The pool's GPUs on every per-GPU metric at once (`straggler.combined`): each GPU's robust z against its
        own node's others per metric (worse is negative; a whole node behind cancels out: that is the node-level
        check's), and the bar for every GPU judged, as one more metric's (the run judges each GPU once more)."""
        if pool not in self._combined:
            zs: dict[str, dict[tuple[str, int | None], float]] = {}
            for metric in (m for m in self.metrics(pool) if m not in NODE_METRICS):
                zs[metric] = self.index(metric, pool).node_zs()
            bar = self.index(next(iter(zs)), pool).bar(told(zs)) if zs else math.inf
            self._combined[pool] = (Combined.of(zs, bar), bar)  # a metric counts up to the bar: "several metrics"
        return self._combined[pool]

    def metrics(self, pool: str) -> list[str]:
        """The measured metrics the spec's probes cover and the pool's baseline has a figure for (one node's
        all-reduce included; the multi-node figure has its own check)."""
        probes = {p.value for p in self.spec.certify.probes}
        b = self.baselines[pool]
        return [m for m in b.metrics if probe_of_metric(m) in probes and m != "nccl.all_reduce.multinode"]

    def against_sku(self) -> list[dict[str, Any]]:
        """Per pool and metric, the pool's median against its SKU's figure. Informational: peer comparison is blind
        when half the pool or more is slow (two hardware batches), and every GPU can sit inside the baseline's
        tolerance while the pool as a whole is behind; `behind` marks a pool further off than maxDeviation."""
        out = []
        for pool in self.spec.pool_names:
            several = len(self.spec.pools) > 1
            for metric in self.metrics(pool):
                fleet = self.index(metric, pool).fleet_median()
                if fleet is None:
                    continue
                b = self.baselines[pool].metrics[metric]
                deviation = fleet.median / b.expected - 1
                sign = 1.0 if b.comparison is Comparison.MIN else -1.0
                behind = sign * deviation < -self.spec.stragglers_for(pool).max_deviation
                what = "nodes" if metric in NODE_METRICS else "GPUs"
                out.append(
                    {
                        "metric": metric,
                        "pool": pool,
                        "median": round(fleet.median, 4),
                        "expected": b.expected,
                        "deviation": round(deviation, 4),
                        "unit": b.unit,
                        "count": fleet.n,
                        "behind": behind,
                        "informational": True,  # never a check's outcome: the baseline's tolerance decides
                        "message": (
                            (f"pool {pool}: " if several else "")
                            + f"{metric}: the median over {fleet.n} {what} is {fleet.median:.4g} {b.unit}, "
                            f"{abs(deviation):.1%} {'below' if deviation < 0 else 'above'} the SKU figure "
                            f"{b.expected:.4g} of {self.baselines[pool].sku} (tolerance {b.tolerance:.0%})"
                            + ("; no peer comparison can see a fleet that is behind as a whole" if behind else "")
                        ),
                    }
                )
        return out

    def undecided(self) -> list[dict[str, Any]]:
        """Every comparison not made for too few peers (never a silent pass), one entry per comparison, place and
        reason, with the metrics it holds for."""
        groups: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
        for pool in self.spec.pool_names:
            for metric in self.metrics(pool):
                for u in self.index(metric, pool).undecided(stability=unstable_is_judged(metric)):
                    metrics = groups.setdefault((u.comparison, u.where, u.why), [])
                    if metric not in metrics:
                        metrics.append(metric)
        return [
            {"comparison": c, "where": list(where), "why": why, "metrics": metrics}
            for (c, where, why), metrics in groups.items()
        ]
