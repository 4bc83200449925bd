"""A pool's peer indexes built by arrays (issue 28: the first checks of a re-test built every metric's index of the
pool, one GPU at a time) say what the one-at-a-time arithmetic says, to the bit: `summarize` of thousands of
figures, each GPU's residual against its node's others, each GPU's z against its node's others, the pool's slow
samples told at once, every metric of a pool believed in one pass, and each GPU's P2P figure from its pairs."""

from __future__ import annotations

import math
import random

import pytest

from gpucert.evaluate.rules import stragglers_told
from gpucert.evaluate.rules.performance import Sampled, believable
from gpucert.evaluate.rules.performance_batch import Ask, believe_all, believe_many, believe_p2p, slots_of
from gpucert.evaluate.rules.stability import SlowSamples, TailPool
from gpucert.evaluate.rules.stragglers import PeerIndex, Rules
from gpucert.evaluate.stats import MAD_TO_SIGMA, Summary, mad, median, summarize
from gpucert.measure.evidence import GpuEvidence, Measurement, NodeEvidence, P2pEvidence, P2pPair

rng = random.Random(2028)
Key = tuple[str, int | None]


def _summary_by_lists(values: list[float]) -> Summary:
    m = median(values)
    return Summary(median=m, mad=mad(values, m), n=len(values))


@pytest.mark.parametrize("n", [63, 64, 65, 1000, 8191])
def test_summarize_by_arrays_is_the_lists_one(n: int) -> None:
    values = [rng.choice([100.0, 100.5]) if i % 5 == 0 else rng.gauss(100, 3) for i in range(n)]
    assert repr(summarize(values)) == repr(_summary_by_lists(values))
    residuals = [v / 100.0 - 1 for v in values]  # around zero, of both signs
    assert repr(summarize(residuals)) == repr(_summary_by_lists(residuals))


@pytest.mark.parametrize("odd", [math.inf, -math.inf, math.nan])
def test_summarize_of_values_not_all_finite_is_pythons(odd: float) -> None:
    values = [rng.gauss(100, 3) for _ in range(100)]
    values[17] = odd
    assert repr(summarize(values)) == repr(_summary_by_lists(values))


# finite figures whose sum overflows: Python's float arithmetic gives inf silently, numpy's warns (RuntimeWarning,
# an error under this project's filterwarnings): the arrays must say what the lists say, and nothing more
HUGE = 1.7e308


def test_summarize_of_figures_whose_sum_overflows_is_the_lists_one_without_a_warning() -> None:
    values = [HUGE] * 64 + [1.0] * 6  # the median is a mean of two HUGE ones: inf
    assert repr(summarize(values)) == repr(_summary_by_lists(values))
    spread = [-HUGE] * 40 + [HUGE] * 40  # each deviation from the median (0) is finite, their mean is too
    assert repr(summarize(spread)) == repr(_summary_by_lists(spread))


def test_node_medians_and_residuals_of_figures_whose_sum_overflows_are_the_lists_ones() -> None:
    values = {(f"n{n}", g): Sampled(HUGE, 60, "u") for n in range(3) for g in range(9 if n else 8)}
    by_node: dict[str, list[Key]] = {}
    for k in values:
        by_node.setdefault(k[0], []).append(k)
    wanted = {node: median([values[k].value for k in keys]) for node, keys in by_node.items()}
    assert repr(stragglers_told.node_medians(values, by_node)) == repr(wanted)
    found = stragglers_told.node_residuals(values, by_node)
    assert all(repr(r) == repr(_residual(values, k)) for k, r in found.items())


def _residual(values: dict[Key, Sampled], key: Key) -> float:
    others = [v.value for k, v in values.items() if k[0] == key[0] and k != key]
    return values[key].value / median(others) - 1


@pytest.mark.parametrize("gpus", [4, 5, 8, 9])
def test_node_residuals_of_many_alike_nodes_by_arrays_are_each_gpus_by_definition(gpus: int) -> None:
    values: dict[Key, Sampled] = {}
    for n in range(60):
        for g in range(gpus):
            v = 100.0 if n % 3 == 0 and g % 2 else rng.gauss(100, 2)  # ties on every third node
            values[(f"n{n}", g)] = Sampled(v, 60, "GB/s")
    values[("n7", 1)] = values[("n7", 0)]  # a GPU's own figure twice on its node
    by_node: dict[str, list[Key]] = {}
    for k in values:
        by_node.setdefault(k[0], []).append(k)
    found = stragglers_told.node_residuals(values, by_node)
    assert list(found) == list(values)
    assert all(repr(r) == repr(_residual(values, k)) for k, r in found.items())
    values[("n9", 2)] = Sampled(math.inf, 60, "GB/s")  # not a number to sort by arrays: Python's sort decides
    found = stragglers_told.node_residuals(values, by_node)
    assert all(repr(r) == repr(_residual(values, k)) for k, r in found.items())


def test_node_medians_are_each_nodes_median_of_its_figures() -> None:
    values: dict[Key, Sampled] = {}
    for n in range(30):
        for g in range(8 if n % 4 else 7):  # nodes of 8 figures and of 7
            values[(f"n{n}", g)] = Sampled(100.0 if n % 5 == 0 else rng.gauss(100, 2), 60, "u")
    values[("n1", None)] = Sampled(90.0, 60, "u")  # a node's own figure among its GPUs'
    by_node: dict[str, list[Key]] = {}
    for k in values:
        by_node.setdefault(k[0], []).append(k)
    wanted = {node: median([values[k].value for k in keys]) for node, keys in by_node.items()}
    found = stragglers_told.node_medians(values, by_node)
    assert list(found) == list(wanted)
    assert all(repr(found[n]) == repr(wanted[n]) for n in wanted)
    values[("n2", 3)] = Sampled(math.nan, 60, "u")  # not a number: Python's sort decides, as before
    wanted = {node: median([values[k].value for k in keys]) for node, keys in by_node.items()}
    assert repr(stragglers_told.node_medians(values, by_node)) == repr(wanted)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_node_zs_are_summary_z_of_each_residual(sign: float) -> None:
    values = {(f"n{n}", g): Sampled(rng.gauss(100, 2), 60, "u") for n in range(20) for g in range(8)}
    values |= {("flat", g): Sampled(100.0, 60, "u") for g in range(8)}
    values[("n3", 9)] = Sampled(50.0, 60, "u")  # a ninth GPU on one node
    index = PeerIndex("m", values, Rules(0.05, higher_is_better=sign > 0))
    zs = index.node_zs()
    within = index.within("fleet")
    assert within is not None
    assert list(zs) == [k for k in values if index.residual(k) is not None]
    for k, z in zs.items():
        r = index.residual(k)
        assert r is not None
        assert repr(z) == repr(sign * within.z(r))
    flat = PeerIndex("m", {(f"n{n}", g): Sampled(100.0, 60, "u") for n in range(5) for g in range(8)}, Rules(0.05))
    flat_within = flat.within("fleet")
    assert flat_within is not None
    assert flat_within.mad * MAD_TO_SIGMA == 0
    assert set(flat.node_zs().values()) == {0.0}  # no spread: z is 0 (or infinite), never a division by zero


def test_tail_pool_add_all_is_add_of_each() -> None:
    members = [SlowSamples(k, 60, 100.0, 95.0, 90.0, tuple(sorted(rng.random() for _ in range(k)))) for k in range(6)]
    one, many = TailPool(), TailPool()
    for s in members:
        one.add(s)
    many.add_all(members)
    assert (one.n, one.k, one.members) == (many.n, many.k, many.members)
    assert all(one.at_least(d) == many.at_least(d) for d in (0.0, 0.3, 0.5, 0.9, 2.0))


def _node(name: str, rows: dict[int, dict[str, list[float]]], pairs: list[P2pPair] | None = None) -> NodeEvidence:
    gpus = [
        GpuEvidence(index=i, measurements={m: Measurement(unit="GB/s", samples=s) for m, s in ms.items()})
        for i, ms in rows.items()
    ]
    p2p = P2pEvidence(pairs=pairs) if pairs is not None else None
    return NodeEvidence(node=name, target="t", probe_version="1", started="s", finished="f", gpus=gpus, p2p=p2p)


def test_believe_many_is_believe_all_of_each_metric() -> None:
    metrics = ["memory.bandwidth", "pcie.h2d", "nccl.all_reduce", "p2p.bandwidth"]
    nodes = []
    for n in range(6):
        rows = {}
        for g in range(4):
            ms = {m: [100.0 + rng.random() for _ in range(8)] for m in metrics[:2]}
            if (n, g) == (1, 2):
                ms["pcie.h2d"] = [100.0, math.nan, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
            if (n, g) == (2, 3):
                del ms["memory.bandwidth"]
            rows[g] = ms
        nodes.append(_node(f"n{n}", rows))
    asks = [Ask(m, 100.0, 5, (1.0, 0.05) if m != "p2p.bandwidth" else None) for m in metrics]
    found = believe_many(nodes, asks)
    for ask in asks:
        one = believe_all(nodes, *ask)
        assert [repr(x) for x in found[ask.metric]] == [repr(x) for x in one]
        assert found[ask.metric].keys == [(ev.node, g) for ev, g in zip(one.evidence, one.gpus, strict=True)]
        assert found[ask.metric].refused == sum(isinstance(f, str) for f in one.figures)
    assert found["pcie.h2d"].refused == 1  # the NaN sample's: its pool's values are told one by one
    assert found["memory.bandwidth"].keys is found["pcie.h2d"].keys  # the GPUs listed once for every metric


def _pairs(gpus: int, odd: dict[int, list[float]]) -> list[P2pPair]:
    pairs = [
        P2pPair(src=a, dst=b, peer_access=True, samples=[50.0 + rng.random() for _ in range(3)])
        for a in range(gpus)
        for b in range(gpus)
        if a != b
    ]
    for i, samples in odd.items():
        pairs[i] = pairs[i].model_copy(update={"samples": samples})
    return [*pairs, P2pPair(src=1, dst=1, peer_access=True, samples=[51.0, 52.0])]  # a GPU with itself: once


@pytest.mark.parametrize("expected", [None, 50.0, 5.0])
@pytest.mark.parametrize("least", [3, 20])
def test_believe_p2p_of_many_nodes_is_believable_gpu_by_gpu(expected: float | None, least: int) -> None:
    hostile = [[math.nan, 50.0, 50.0], [], [0.0, 50.0, 50.0], [-1.0, 50.0], [1e9, 50.0, 50.0], [math.inf], [49.0]]
    gpus: dict[int, dict[str, list[float]]] = {g: {} for g in range(4)}
    nodes = [_node(f"n{n}", gpus, _pairs(4, {n % 12: hostile[n % len(hostile)]})) for n in range(9)]
    nodes.append(_node("bare", gpus))  # no P2P evidence
    nodes.append(_node("few", gpus, _pairs(4, {})[:3]))  # some GPUs with no pair at all
    slots = slots_of(nodes, per_node=False)
    for ev, idx, figure in zip(slots.evidence, slots.gpus, believe_p2p(slots, expected, least), strict=True):
        assert repr(figure) == repr(believable(ev, "p2p.bandwidth", idx, expected, least)), (ev.node, idx)
