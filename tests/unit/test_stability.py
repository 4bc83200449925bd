"""stability.<metric> weighs how deep the slow samples are (issue 27): the rank test of rules/stability.py."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.rules.stability import TailPool, scan, slow_samples
from gpucert.evaluate.rules.stragglers import PeerIndex, Rules
from gpucert.evaluate.stats import hypergeometric_tail
from gpucert.plan.checks import CheckStatus
from gpucert.spec.cluster import DEFAULT_SAMPLES, CertifySpec

Key = tuple[str, int | None]
TARGET = ("n2", 3)


def test_hypergeometric_tail_is_the_exact_sum() -> None:
    def exact(k: int, total: int, marked: int, drawn: int) -> float:
        hits = range(k, min(marked, drawn) + 1)
        return sum(comb(marked, i) * comb(total - marked, drawn - i) for i in hits) / comb(total, drawn)

    for args in [(3, 5120, 40, 3), (4, 640, 20, 4), (3, 640, 20, 10), (2, 100, 10, 30), (1, 10, 3, 2), (3, 10, 8, 5)]:
        assert hypergeometric_tail(*args) == pytest.approx(exact(*args), rel=1e-9)
    assert hypergeometric_tail(0, 10, 3, 2) == 1.0
    assert hypergeometric_tail(3, 10, 3, 2) == 0.0  # three of two drawn


def pool_samples(nodes: int, n: int = 20, hiccups: float = 0.0, seed: int = 5) -> dict[Key, list[float]]:
    """Healthy boards, cv 1%; `hiccups`: the fraction of every board's samples 6% down (a preempted repetition)."""
    rng = np.random.default_rng(seed)
    out: dict[Key, list[float]] = {}
    for key in ((f"n{i}", g) for i in range(nodes) for g in range(8)):
        x = 100 * (1 + 0.01 * rng.standard_normal(n))
        out[key] = list(np.where(rng.random(n) < hiccups, x * 0.94, x))
    return out


def judged(samples: dict[Key, list[float]], metrics: int = 1) -> PeerIndex:
    values = {k: Sampled(float(np.median(s)), len(s), "GB/s") for k, s in samples.items()}
    return PeerIndex("memory.bandwidth", values, Rules(0.05, metrics=metrics), samples=samples)


def with_slow(samples: dict[Key, list[float]], factor: float, count: int) -> dict[Key, list[float]]:
    out = dict(samples)
    out[TARGET] = [x * factor if i < count else x for i, x in enumerate(samples[TARGET])]
    return out


def test_three_deep_slow_samples_fail_where_three_as_shallow_as_the_peers_hiccups_pass() -> None:
    """128 GPUs whose samples hiccup 6% down now and then (2%). Three samples 6% down are what a healthy board
    shows; three 20% down are deeper than any peer's: the count alone (the rule before) could not tell them
    apart and passed both (3 of 20 at the peers' 1.8% rate: p 5.7e-3 per GPU, 0.73 for any of 128)."""
    clean = pool_samples(16, hiccups=0.02)
    shallow = judged(with_slow(clean, 0.925, 3)).stability(TARGET)
    deep = judged(with_slow(clean, 0.8, 3)).stability(TARGET)
    assert shallow is not None
    assert deep is not None
    assert shallow.status is CheckStatus.PASS, shallow.message
    assert "3 of 20 samples are more than 5.0% below" in shallow.message
    assert "where 33 of its peers' 2540 are" in shallow.message
    assert deep.status is CheckStatus.FAIL, deep.message
    assert "3 of 20 samples are more than 5.0% below its own median" in deep.message
    assert "3 of its samples are at least 18.5% below its median, where 0 of its peers' 2540 are" in deep.message
    assert "for any of 128 GPUs x 1 metrics at 3 depths" in deep.message


def test_the_rank_test_needs_more_slow_samples_in_a_small_pool() -> None:
    """Three samples beyond every peer's in 32 GPUs: the chance that some healthy GPU's samples hold the pool's
    three deepest is about 3 / 32^2 (3e-3), past the bar; four are not (about 7e-5). The rule before flagged
    three here (its rate estimated from the same samples made it lenient by about 3!)."""
    clean = pool_samples(4)
    three = judged(with_slow(clean, 0.8, 3)).stability(TARGET)
    four = judged(with_slow(clean, 0.8, 4)).stability(TARGET)
    assert three is not None
    assert four is not None
    assert three.status is CheckStatus.PASS, three.message
    assert four.status is CheckStatus.FAIL, four.message


def test_the_bar_holds_for_every_metric_the_pool_judges() -> None:
    """With 8 metrics judged, three samples beyond every peer's in 128 GPUs are about 24 / 128^2 (1.5e-3) likely
    somewhere in a clean fleet, past the bar; four are not (about 1e-5). A fleet's false alarms are counted over
    all its metrics, as a certification fails on any of them."""
    clean = pool_samples(16)
    three = judged(with_slow(clean, 0.8, 3), metrics=8).stability(TARGET)
    four = judged(with_slow(clean, 0.8, 4), metrics=8).stability(TARGET)
    assert three is not None
    assert four is not None
    assert three.status is CheckStatus.PASS, three.message
    assert four.status is CheckStatus.FAIL, four.message
    assert "for any of 128 GPUs x 8 metrics at 3 depths" in four.message


def test_two_slow_samples_are_never_a_pattern() -> None:
    found = judged(with_slow(pool_samples(16), 0.5, 2)).stability(TARGET)
    assert found is not None
    assert found.status is CheckStatus.PASS
    assert "fewer than 3 slow samples are never a pattern" in found.message


def test_many_shallow_slow_samples_are_tested_all_together() -> None:
    """Eight samples 7% down among peers whose hiccups reach 6%: no single depth is rare, their number is (seven
    come out beyond 5%, tested all together at the shallowest's depth)."""
    clean = pool_samples(16, hiccups=0.02)
    found = judged(with_slow(clean, 0.93, 8)).stability(TARGET)
    assert found is not None
    assert found.status is CheckStatus.FAIL, found.message
    assert "7 of its samples are at least 5.3% below its median, where 43 of its peers' 2540 are" in found.message


def test_the_scan_takes_the_most_telling_depth() -> None:
    mine = slow_samples([100.0] * 14 + [80.0, 79.0, 78.0, 94.0, 94.0, 93.0], 1.0, 0.05)
    assert mine is not None
    assert mine.k == 6
    assert mine.depths[0] == pytest.approx(0.22)
    pool = TailPool()
    pool.add(mine)
    peer = slow_samples([100.0] * 95 + [94.0] * 5, 1.0, 0.05)
    assert peer is not None
    for _ in range(50):
        pool.add(peer)
    found = scan(mine, pool)
    assert found is not None
    # its four deepest, beyond every peer's 6%: rarer than its three deepest alone, and than all six
    assert (found.own, found.as_deep) == (4, 4)
    assert found.depth == pytest.approx(0.07)
    assert found.chance == pytest.approx(hypergeometric_tail(4, 5020, 20, 4))
    lower_is_better = slow_samples([1.0] * 17 + [1.2, 1.3, 1.4], -1.0, 0.05)
    assert lower_is_better is not None
    assert lower_is_better.depths == pytest.approx((0.4, 0.3, 0.2))


def test_every_probe_is_asked_the_default_samples_unless_the_spec_says() -> None:
    """The default count set from benchmarks/stability.py reaches the measure plan; the spec's own count wins."""
    assert DEFAULT_SAMPLES == {"memory": 60, "compute": 60, "pcie": 60}
    assert CertifySpec().planned_samples() == DEFAULT_SAMPLES
    assert CertifySpec().min_samples("pcie") == 5  # a figure of fewer (older evidence) is still believed
    asked = CertifySpec.model_validate({"samples": {"pcie": 24, "nccl": 40}}).planned_samples()
    assert asked == {"memory": 60, "compute": 60, "pcie": 24, "nccl": 40}
