"""Issue 27: the node-level rule's spread pooled over the pool's per-GPU metrics (stats.pooled_spread), the F-test
that keeps a metric whose nodes truly differ more on its own spread, and Snedecor's F it is judged by."""

from __future__ import annotations

import math

import pytest

from gpucert.evaluate import stats
from gpucert.evaluate.rules.stragglers import PeerIndex, Rules
from gpucert.evaluate.stats import beta_cdf, f_quantile, pooled_spread, t_quantile
from gpucert.plan.checks import CheckStatus

from .test_stragglers import fleet, nodes_with_spread

OTHERS = [(0.0064, 14)] * 8  # eight other metrics of the same 16 nodes, each sd 0.64% on 14 degrees of freedom


def test_f_quantiles_match_the_tables() -> None:
    """Snedecor's F against its printed tables (5% and 1% points), F(1, d) against Student's t squared, and the
    incomplete beta against closed forms."""
    assert f_quantile(0.05, 5, 60) == pytest.approx(2.37, abs=0.005)
    assert f_quantile(0.01, 5, 60) == pytest.approx(3.34, abs=0.005)
    assert f_quantile(0.05, 10, 120) == pytest.approx(1.91, abs=0.005)
    assert f_quantile(0.05, 2, 10) == pytest.approx(4.10, abs=0.005)
    assert f_quantile(0.05, 1, 20) == pytest.approx(t_quantile(0.025, 20) ** 2, rel=1e-6)
    assert beta_cdf(0.5, 2, 3) == pytest.approx(11 / 16)
    assert beta_cdf(0.3, 0.5, 0.5) == pytest.approx(2 / math.pi * math.asin(math.sqrt(0.3)))


def test_a_spread_like_the_others_is_pooled_and_a_larger_one_kept() -> None:
    sd, df = pooled_spread((0.007, 14), OTHERS)
    assert df == 126
    assert sd == pytest.approx(math.sqrt((0.007**2 * 14 + 0.0064**2 * 112) / 126))
    assert pooled_spread((0.02, 14), OTHERS) == (0.02, 14)  # F = 9.8, far beyond F(0.05; 14, 112) = 1.78
    assert pooled_spread((0.007, 14), []) == (0.007, 14)


def test_a_four_percent_slow_node_among_16_is_found_on_the_pooled_spread() -> None:
    """16 nodes' own spread, on 14 degrees of freedom, sets Student's t bar high enough that this 4% slow node
    (z about -6.8 against the nodes' true sd) passes; pooled with the other metrics' spread of the same nodes
    (126 degrees of freedom) it is found."""
    vals = nodes_with_spread(16, seed=3)
    for g in range(8):
        vals[("n3", g)] *= 0.96
    alone = PeerIndex("m", fleet(vals), Rules(0.05)).node_level("n3")
    assert alone is not None
    assert alone.status is CheckStatus.PASS, alone.message
    idx = PeerIndex("m", fleet(vals), Rules(0.05), others=lambda _pool: OTHERS)
    found = idx.node_level("n3")
    assert found is not None
    assert found.status is CheckStatus.FAIL, found.message
    assert "on 126 degrees of freedom, bar 4.3" in found.message
    assert [n for n in range(16) if idx.node_level(f"n{n}").status is CheckStatus.FAIL] == [3]  # type: ignore[union-attr]


def test_a_metric_whose_nodes_differ_more_keeps_its_own_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes spread by 2% on this metric, 0.64% on the others: pooled regardless, a clean node is a finding; the
    F-test keeps this metric on its own spread, and no clean node fails."""
    vals = nodes_with_spread(16, node_sd=0.02, seed=2)
    idx = PeerIndex("m", fleet(vals), Rules(0.05), others=lambda _pool: OTHERS)
    assert all(idx.node_level(f"n{n}").status is CheckStatus.PASS for n in range(16))  # type: ignore[union-attr]
    monkeypatch.setattr(stats, "SPREAD_F_LEVEL", 1e-12)  # no F-test: always pooled
    always = PeerIndex("m", fleet(vals), Rules(0.05), others=lambda _pool: OTHERS)
    assert [n for n in range(16) if always.node_level(f"n{n}").status is CheckStatus.FAIL] == [3]  # type: ignore[union-attr]
