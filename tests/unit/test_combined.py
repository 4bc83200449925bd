"""One statistic over a GPU's metrics (rules/combined.py) on hand-made numbers: the robust correlation, Stouffer's z
with it, the cap that keeps one metric from carrying it, and a GPU a few percent slow on every metric found where
each metric alone misses it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpucert.evaluate.rules.combined import (
    COMBINED,
    Combined,
    combine,
    correlations,
    judge_peer_combined,
    robust_correlation,
)
from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.rules.stragglers import PeerIndex, Rules
from gpucert.plan.checks import CheckStatus

Key = tuple[str, int | None]
METRICS = [f"m{i}" for i in range(8)]


def test_the_robust_correlation_measures_what_moves_together_and_ignores_a_few_outliers() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(400), rng.standard_normal(400)
    assert robust_correlation(list(a), list(b)) == pytest.approx(0.0, abs=0.12)
    c = 0.9 * a + math.sqrt(1 - 0.9**2) * b
    assert robust_correlation(list(a), list(c)) == pytest.approx(0.9, abs=0.05)
    # five GPUs far out on both (the slow boards the check looks for) do not make two independent metrics correlated
    a2, b2 = [*a[:395], *([-30.0] * 5)], [*b[:395], *([-30.0] * 5)]
    assert float(np.corrcoef(a2, b2)[0, 1]) > 0.5  # Pearson's would
    assert robust_correlation(a2, b2) == pytest.approx(0.0, abs=0.15)
    assert robust_correlation([1.0, 2.0], [2.0, 1.0]) == 1.0  # too few to tell: the conservative answer


def test_stouffers_z_gains_sqrt_k_on_independent_metrics_and_nothing_on_copies_of_one() -> None:
    z = dict.fromkeys(METRICS, -2.0)
    independent = {(a, b): float(a == b) for a in METRICS for b in METRICS}
    copies = {(a, b): 1.0 for a in METRICS for b in METRICS}
    assert combine(z, independent, cap=3.5) == pytest.approx((-2.0 * math.sqrt(8), 8.0))
    assert combine(z, copies, cap=3.5) == pytest.approx((-2.0, 64.0))


def test_one_metric_far_out_never_carries_the_combined_statistic() -> None:
    """A GPU 30% slow on memory alone is memory's finding, not 'slow on several metrics at once'."""
    z = {**dict.fromkeys(METRICS, 0.0), "m0": -60.0}
    independent = {(a, b): float(a == b) for a in METRICS for b in METRICS}
    combined, _ = combine(z, independent, cap=3.5)
    assert combined == pytest.approx(-3.5 / math.sqrt(8))


def fleet(nodes: int, rho: float, seed: int = 3, slow: float = 0.0) -> dict[str, dict[Key, Sampled]]:
    """Boards with a 1% spread per metric, their offsets correlated `rho` across metrics; n1/gpu3 `slow` on all."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[Key, Sampled]] = {m: {} for m in METRICS}
    for n in range(nodes):
        for g in range(8):
            common = rng.standard_normal()
            for m in METRICS:
                z = math.sqrt(rho) * common + math.sqrt(1 - rho) * rng.standard_normal()
                v = 100 * (1 + 0.01 * z) * (1 - slow if (n, g) == (1, 3) else 1)
                out[m][(f"n{n}", g)] = Sampled(v, 20, "GB/s")
    return out


def pool_view(values: dict[str, dict[Key, Sampled]]) -> tuple[Combined, float, dict[str, PeerIndex]]:
    """What peers.PeerComparisons.combined builds: each metric's PeerIndex, each GPU's z against its node's others."""
    idx = {m: PeerIndex(m, v, Rules(0.05)) for m, v in values.items()}
    zs = {m: {k: z for k in i.values if (z := i.node_z(k)) is not None} for m, i in idx.items()}
    combined = Combined.of(zs, cap=3.5)
    return combined, idx["m0"].bar(combined.count), idx


def test_a_gpu_a_few_percent_slow_on_every_metric_is_found_where_each_metric_alone_misses_it() -> None:
    combined, bar, idx = pool_view(fleet(32, rho=0.0, slow=0.035))
    assert all(i.judge(("n1", 3)).status is CheckStatus.PASS for i in idx.values())  # the 5% gate, metric by metric
    found = judge_peer_combined(("n1", 3), combined, bar, "its node's peers")
    assert found is not None
    assert (found.check, found.status, found.node, found.gpu) == (COMBINED, CheckStatus.FAIL, "n1", 3)
    assert isinstance(found.observed, float)
    assert found.observed < -bar
    for m in METRICS:  # the finding names every metric and its z
        assert f"{m} -" in found.message
    assert "over 8 metrics against its node's peers" in found.message


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_no_healthy_gpu_fails_whether_or_not_its_metrics_move_together(rho: float) -> None:
    """The correlation is measured: boards whose metrics move together (rho 0.9) are not flagged by a sum that
    assumed them independent."""
    combined, bar, _ = pool_view(fleet(32, rho=rho, seed=11))
    worst = min(t[1] for k in {k for per in combined.zs.values() for k in per} if (t := combined.of_key(k)))
    assert worst > -bar
    total = sum(v for v in correlations(combined.zs).values())
    assert total == pytest.approx(8 + 56 * rho, abs=8)
    if rho:  # the same figures summed as if independent would flag some board
        independent = {(a, b): float(a == b) for a in METRICS for b in METRICS}
        naive = [combine(zz, independent, 3.5)[0] for zz in _each(combined)]
        assert min(naive) < -bar


def _each(combined: Combined) -> list[dict[str, float]]:
    keys = {k for per in combined.zs.values() for k in per}
    return [{m: per[k] for m, per in combined.zs.items()} for k in keys]
