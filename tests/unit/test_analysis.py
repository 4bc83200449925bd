"""Robust statistics, baseline tolerance and straggler detection on hand-made numbers."""

from __future__ import annotations

import math

import pytest

from gpucert.evaluate.rules.performance import Sampled, against_baseline, baseline_passes
from gpucert.evaluate.rules.stragglers import PeerIndex, Rules
from gpucert.evaluate.stats import median, summarize
from gpucert.plan.checks import CheckStatus
from gpucert.spec.baseline import Comparison, Loosened, MetricBaseline


def test_median_and_mad() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0
    assert s.mad == 1.0  # the outlier does not move it
    assert s.z(3.0) == 0.0
    assert s.z(3.0 + 1.4826) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_zero_spread_population() -> None:
    s = summarize([5.0, 5.0, 5.0])
    assert s.z(5.0) == 0.0
    assert s.z(4.0) == -math.inf


def mb(expected: float, tol: float, cmp: Comparison = Comparison.MIN) -> MetricBaseline:
    return MetricBaseline(expected=expected, unit="GB/s", comparison=cmp, tolerance=tol, source="a test's own figure")


def test_baseline_min_and_max() -> None:
    key = ("n1", 0)
    assert against_baseline("m", key, Sampled(91.0, 10, "GB/s"), mb(100, 0.1)).status is CheckStatus.PASS
    low = against_baseline("m", key, Sampled(89.0, 10, "GB/s"), mb(100, 0.1))
    assert low.status is CheckStatus.FAIL
    assert "11.0% below the baseline 100" in low.message
    assert "median of 10 samples" in low.message
    assert against_baseline("m", key, Sampled(109.0, 5, "us"), mb(100, 0.1, Comparison.MAX)).status is CheckStatus.PASS
    assert against_baseline("m", key, Sampled(111.0, 5, "us"), mb(100, 0.1, Comparison.MAX)).status is CheckStatus.FAIL


@pytest.mark.parametrize("cmp", [Comparison.MIN, Comparison.MAX])
def test_a_nodes_baseline_passes_are_against_baselines_findings(cmp: Comparison) -> None:
    # baseline_passes words a node's passes in one expression (a re-test's carried GPUs, issue 28): each field of
    # each pass is against_baseline's, byte for byte, above and below the figure, at the limit and round
    # figures; a figure outside the limit is None (judge_metric words it)
    loose = MetricBaseline(
        expected=2900.0,
        unit="GB/s",
        comparison=cmp,
        tolerance=0.3,
        source="a test's own figure",
        loosened=Loosened(reason="old boards", approved_by="ops"),
    )
    for baseline in (mb(100, 0.1, cmp), loose):
        limit = baseline.threshold()
        values = [limit, baseline.expected, baseline.expected * 0.95, baseline.expected * 1.05, 1e-9, 1e9, 123.456789]
        figures = [(gpu, Sampled(v, 5 + gpu, "GB/s")) for gpu, v in enumerate(values)]
        said = baseline_passes("m", "n1", figures, baseline)
        for (gpu, s), passed in zip(figures, said, strict=True):
            one = against_baseline("m", ("n1", gpu), s, baseline)
            assert passed == (one if one.status is CheckStatus.PASS else None)
            assert passed is None or repr(passed) == repr(one)
        assert None not in said[:2]  # at the limit, and the figure itself, pass


def fleet(values: dict[tuple[str, int | None], float]) -> dict[tuple[str, int | None], Sampled]:
    return {k: Sampled(v, 20, "GB/s") for k, v in values.items()}


def test_straggler_within_node_and_fleet() -> None:
    vals = {(f"n{n}", g): 100.0 + 0.3 * ((g * 7 + n) % 5) for n in range(4) for g in range(8)}
    vals[("n2", 3)] = 93.0
    idx = PeerIndex("memory.bandwidth", fleet(vals), Rules(0.05))
    bad = idx.judge(("n2", 3))
    assert bad.status is CheckStatus.FAIL
    assert bad.check == "straggler.memory.bandwidth"
    assert "7 peers on n2" in bad.message
    assert "fleet median over 32 GPUs" in bad.message
    assert "median of 20 samples" in bad.message
    assert all(idx.judge(k).status is CheckStatus.PASS for k in vals if k != ("n2", 3))


def test_deviation_inside_the_limit_is_not_a_straggler() -> None:
    vals = {("n1", g): 100.0 + 0.1 * g for g in range(8)}
    vals[("n1", 0)] = 96.0  # 4% behind: well outside the noise, but inside maxDeviation 5%
    idx = PeerIndex("m", fleet(vals), Rules(0.05))
    assert idx.judge(("n1", 0)).status is CheckStatus.PASS


def test_noisy_peers_need_a_significant_deviation() -> None:
    # peers spread widely: 6% below the median is within their own noise (robust z > -3.5)
    vals = {("n1", g): v for g, v in enumerate([100.0, 90.0, 110.0, 95.0, 105.0, 85.0, 115.0, 94.0])}
    idx = PeerIndex("m", fleet(vals), Rules(0.05))
    assert idx.judge(("n1", 7)).status is CheckStatus.PASS


def test_lower_is_better_metrics() -> None:
    vals = {("n1", g): 10.0 for g in range(8)}
    vals[("n1", 2)] = 11.0
    idx = PeerIndex("latency", fleet(vals), Rules(0.05, higher_is_better=False))
    f = idx.judge(("n1", 2))
    assert f.status is CheckStatus.FAIL
    assert "above the median" in f.message


def test_node_level_metric_uses_the_fleet_only() -> None:
    vals: dict[tuple[str, int | None], float] = {(f"n{i}", None): 460.0 + i * 0.5 for i in range(6)}
    vals[("n3", None)] = 400.0
    idx = PeerIndex("nccl.all_reduce", fleet(vals), Rules(0.05))
    f = idx.judge(("n3", None))
    assert f.status is CheckStatus.FAIL
    assert "fleet median over 6 nodes" in f.message
