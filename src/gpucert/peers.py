"""The peer comparisons of one run: each metric's PeerIndex (analysis/stragglers), built once from every measured
node's evidence (and, on recertification, the fleet's latest evidence), and what the verdict says beside the
checks: the fleet's median against the SKU figure, and the comparisons that could not be made for too few peers.

Reads nothing itself: the Evaluation hands it the evidence. Figures that cannot be believed are no peers (they
would move the median the others are held to).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpucert.analysis.performance import Sampled, figure_of, sample_problem, samples_of
from gpucert.analysis.stragglers import PeerIndex, Rules
from gpucert.baseline import Comparison, GpuBaseline
from gpucert.checks import NODE_METRICS, REPEATED_METRICS
from gpucert.evidence import NodeEvidence
from gpucert.spec import ClusterSpec

__all__ = ["PeerComparisons", "probe_of_metric", "unstable_is_judged"]


def probe_of_metric(metric: str) -> str:
    """The probe that measures a metric (`compute.gemm.bf16` -> compute)."""
    return metric.split(".", 1)[0]


def unstable_is_judged(metric: str) -> bool:
    """Whether `stability.<metric>` applies: the samples are one GPU's (or node's) repetitions over time. P2P
    samples come from the GPU's different pairs: a slow partner would read as instability."""
    return metric in REPEATED_METRICS


class PeerComparisons:
    """Every metric's peers, indexed on first use."""

    def __init__(
        self,
        evidence: Callable[[], Sequence[NodeEvidence]],
        spec: ClusterSpec,
        baseline: GpuBaseline,
        *,
        pool_of: Callable[[str], str] | None = None,
    ) -> None:
        self._evidence = evidence
        self.spec = spec
        self.baseline = baseline
        self.pool_of = pool_of
        self._index: dict[str, PeerIndex] = {}

    def rules(self, metric: str) -> Rules:
        s = self.spec.certify.stragglers
        return Rules(
            max_deviation=s.max_deviation,
            min_z=s.min_z,
            higher_is_better=self.baseline.metrics[metric].comparison is Comparison.MIN,
        )

    def index(self, metric: str) -> PeerIndex:
        if metric not in self._index:
            values: dict[tuple[str, int | None], Sampled] = {}
            samples: dict[tuple[str, int | None], list[float]] = {}
            expected = self.baseline.metrics[metric].expected
            least = self.spec.certify.min_samples(probe_of_metric(metric))
            for ev in self._evidence():
                if not ev.collected:
                    continue
                indices: list[int | None] = [None] if metric in NODE_METRICS else [g.index for g in ev.gpus]
                for idx in indices:
                    got = samples_of(ev, metric, idx)
                    s = figure_of(ev, metric, idx)
                    if s is not None and sample_problem(got, expected, least) is None:
                        values[(ev.node, idx)] = s
                        samples[(ev.node, idx)] = got
            self._index[metric] = PeerIndex(
                metric,
                values,
                self.rules(metric),
                samples=samples if unstable_is_judged(metric) else None,
                pool_of=self.pool_of,
            )
        return self._index[metric]

    def metrics(self) -> list[str]:
        """The measured metrics the spec's probes cover and the baseline has a figure for (one node's all-reduce
        included; the multi-node figure has its own check)."""
        probes = {p.value for p in self.spec.certify.probes}
        return [m for m in self.baseline.metrics if probe_of_metric(m) in probes and m != "nccl.all_reduce.multinode"]

    def against_sku(self) -> list[dict[str, Any]]:
        """Per metric, the fleet's median against the SKU's figure. Informational: peer comparison is blind when
        half the fleet or more is slow (two hardware batches), and every GPU can sit inside the baseline's
        tolerance while the fleet as a whole is behind; `behind` marks a fleet further off than maxDeviation."""
        out = []
        for metric in self.metrics():
            fleet = self.index(metric).fleet_median()
            if fleet is None:
                continue
            b = self.baseline.metrics[metric]
            deviation = fleet.median / b.expected - 1
            sign = 1.0 if b.comparison is Comparison.MIN else -1.0
            behind = sign * deviation < -self.spec.certify.stragglers.max_deviation
            what = "nodes" if metric in NODE_METRICS else "GPUs"
            out.append(
                {
                    "metric": metric,
                    "median": round(fleet.median, 4),
                    "expected": b.expected,
                    "deviation": round(deviation, 4),
                    "unit": b.unit,
                    "count": fleet.n,
                    "behind": behind,
                    "informational": True,  # never a check's outcome: the baseline's tolerance decides
                    "message": (
                        f"{metric}: the median over {fleet.n} {what} is {fleet.median:.4g} {b.unit}, "
                        f"{abs(deviation):.1%} {'below' if deviation < 0 else 'above'} the SKU figure "
                        f"{b.expected:.4g} (tolerance {b.tolerance:.0%})"
                        + ("; no peer comparison can see a fleet that is behind as a whole" if behind else "")
                    ),
                }
            )
        return out

    def undecided(self) -> list[dict[str, Any]]:
        """Every comparison not made for too few peers (never a silent pass), one entry per comparison, place and
        reason, with the metrics it holds for."""
        groups: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
        for metric in self.metrics():
            for u in self.index(metric).undecided(stability=unstable_is_judged(metric)):
                groups.setdefault((u.comparison, u.where, u.why), []).append(metric)
        return [
            {"comparison": c, "where": list(where), "why": why, "metrics": metrics}
            for (c, where, why), metrics in groups.items()
        ]
