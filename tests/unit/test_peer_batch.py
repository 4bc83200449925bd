"""The peer-dependent checks told many at once (issue 28) say what the one-at-a-time rules say, to the bit:
`figures_of_rows` and `believe_all` against `believable` and `slow_samples` on hostile samples (not numbers,
infinities, zero, negative, absurd, too few, finite samples whose sum is not, ties, uneven counts), either way of
better; `quiet_keys` against the index's own questions (judge, stability, notes) on pools with stragglers, unstable
GPUs, small nodes and no spread."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gpucert.evaluate.rules import stragglers_told
from gpucert.evaluate.rules.performance import Sampled, believable
from gpucert.evaluate.rules.performance_batch import believe_all, figures_of_rows
from gpucert.evaluate.rules.stability import slow_samples
from gpucert.evaluate.rules.stragglers import MIN_PEERS, PeerIndex, Rules
from gpucert.evaluate.stats import median as median_of
from gpucert.measure.evidence import GpuEvidence, Measurement, NodeEvidence, P2pEvidence, P2pPair

rng = random.Random(28)


def _hostile_rows() -> list[list[float]]:
    rows: list[list[float]] = []
    for n in (3, 4, 5, 6, 7, 20, 21, 60):
        for _ in range(6):
            rows.append([100.0 * (1 + rng.gauss(0, 0.02)) for _ in range(n)])
    base = [100.0 + i * 0.25 for i in range(20)]
    for bad in (math.nan, math.inf, -math.inf, 0.0, -0.0, -3.0, 1e6, 999.9, 1000.1, 5e-324):
        for at in (0, 7, 19):
            row = list(base)
            row[at] = bad
            rows.append(row)
    rows.append([1e308, 1e308, 50.0, 60.0, 70.0])  # finite, their sum is not
    rows.append([100.0] * 9)  # ties, no spread
    rows.append([100.0] * 8 + [60.0, 60.0, 61.0, 40.0])  # deep slow samples, ties among them
    rows.append([100.0] * 8 + [140.0, 150.0, 160.0])  # slow where lower is better
    rows.append([])
    return rows


@pytest.mark.parametrize("expected", [None, 100.0, 10.0])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_figures_of_rows_say_what_believable_and_slow_samples_say(expected: float | None, sign: float) -> None:
    rows = _hostile_rows()
    medians, slows = figures_of_rows([np.array(r, dtype=np.float64) for r in rows], expected, 5, (sign, 0.05))
    for row, median, slow in zip(rows, medians, slows, strict=True):
        one = believable(_node("n", {0: row}), "m", 0, expected, 5)
        if median is None:  # left to believable, which refuses it or believes it
            assert slow is None
            continue
        assert isinstance(one, Sampled), (row, one)  # never believed here where believable refuses it
        assert repr(median) == repr(one.value)
        assert slow == slow_samples(row, sign, 0.05)
    clean = [r for r in rows if len(r) >= 5 and all(math.isfinite(x) and x > 0 for x in r)]
    clean = [r for r in clean if expected is None or max(r) <= 10 * expected]
    assert sum(m is not None for m in medians) == len(clean) > 1  # every measurement believable alike is told here


def _node(name: str, rows: dict[int, list[float]], metric: str = "m", unit: str = "GB/s") -> NodeEvidence:
    gpus = [GpuEvidence(index=i, measurements={metric: Measurement(unit=unit, samples=r)}) for i, r in rows.items()]
    return NodeEvidence(node=name, target="t", probe_version="1", started="s", finished="f", gpus=gpus)


def test_believe_all_is_believable_gpu_by_gpu_with_duplicates_and_p2p() -> None:
    rows = _hostile_rows()
    nodes = [_node(f"n{i}", {g: rows[(i * 8 + g) % len(rows)] for g in range(8)}) for i in range(len(rows) // 8 + 1)]
    dup = nodes[0].model_copy(update={"gpus": [*nodes[0].gpus, nodes[1].gpus[0]]})  # index 0 listed twice
    nodes[0] = dup
    for expected in (None, 100.0):
        found = believe_all(nodes, "m", expected, 5, (1.0, 0.05))
        keys = [(ev.node, i) for ev, i, _f, _s in found]
        assert len(keys) == len(set(keys)) == sum(len({g.index for g in ev.gpus}) for ev in nodes)
        for ev, idx, figure, slow in found:
            assert idx is not None
            one = believable(ev, "m", idx, expected, 5, ev.gpu(idx))
            assert repr(figure) == repr(one)
            first = ev.gpu(idx)
            assert first is not None
            assert slow == (
                slow_samples(list(first.measurements["m"].samples), 1.0, 0.05) if isinstance(one, Sampled) else None
            )
    pairs = [
        P2pPair(src=a, dst=b, peer_access=True, samples=[50.0 + rng.random() for _ in range(5)])
        for a in range(4)
        for b in range(4)
        if a != b
    ]
    pairs[2] = pairs[2].model_copy(update={"samples": [50.0, math.nan, 50.0, 50.0, 50.0]})
    pairs[5] = pairs[5].model_copy(update={"samples": []})
    p2p = NodeEvidence(
        node="p", target="t", probe_version="1", started="s", finished="f",
        gpus=[GpuEvidence(index=i) for i in range(4)], p2p=P2pEvidence(pairs=pairs),
    )  # fmt: skip
    for expected in (None, 50.0, 4.0):
        for ev, idx, figure, _slow in believe_all([p2p], "p2p.bandwidth", expected, 5):
            assert repr(figure) == repr(believable(ev, "p2p.bandwidth", idx, expected, 5))


def _index(
    values: dict[tuple[str, int | None], float], samples: dict[tuple[str, int | None], list[float]], sign: float
) -> PeerIndex:
    rules = Rules(0.05, higher_is_better=sign > 0, metrics=8)
    return PeerIndex("m", {k: Sampled(v, 60, "GB/s") for k, v in values.items()}, rules, samples=samples)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("nodes", [2, 5, 40])
def test_quiet_keys_are_exactly_those_the_index_passes_without_a_word(sign: float, nodes: int) -> None:
    values: dict[tuple[str, int | None], float] = {}
    samples: dict[tuple[str, int | None], list[float]] = {}
    for n in range(nodes):
        for g in range(8 if n % 7 else 3):  # every seventh node shows 3 GPUs: too few node peers
            figure = 100.0 * (1 + rng.gauss(0, 0.01))
            if (n, g) in ((1, 2), (3, 5)):
                figure *= 0.8 if sign > 0 else 1.25  # stragglers
            if n == 4:
                figure *= 0.9 if sign > 0 else 1.1  # a whole node behind
            values[(f"n{n}", g)] = figure
            s = [figure * (1 + rng.gauss(0, 0.005)) for _ in range(60)]
            if (n, g) in ((2, 1), (3, 3)):
                s[::5] = [figure * (0.7 if sign > 0 else 1.4)] * 12  # unstable
            samples[(f"n{n}", g)] = s
    values[("n1", 7)] = values[("n1", 6)]  # ties
    for stable in (True, False):
        idx = _index(values, samples if stable else {}, sign)
        quiet = stragglers_told.quiet_keys(idx, stability=stable)
        for key in values:
            alone = not idx.behind(key) and not (stable and idx.unstable(key)) and not idx.notes(key, stability=stable)
            assert (key in quiet) == alone, key
            assert idx.quiet(key, stability=stable) == alone
    flat = _index({(f"n{n}", g): 100.0 for n in range(5) for g in range(8)}, {}, sign)  # no spread: z is 0 or inf
    flat_quiet = stragglers_told.quiet_keys(flat, stability=False)
    assert all((k in flat_quiet) == (not flat.behind(k) and not flat.notes(k, stability=False)) for k in flat.values)


def test_min_peers_is_one_figure() -> None:
    assert stragglers_told.MIN_PEERS is MIN_PEERS


def _correlation_as_written(u: list[float], v: list[float]) -> float:
    """combined.robust_correlation over Python lists (rules/combined.py before its numpy path)."""
    from gpucert.evaluate.rules.combined import MIN_FOR_CORRELATION, _located, _scale

    if len(u) < MIN_FOR_CORRELATION:
        return 1.0
    (mu, su), (mv, sv) = _located(u), _located(v)
    if su <= 0 or sv <= 0:
        return 1.0
    a = [(x - mu) / su for x in u]
    b = [(y - mv) / sv for y in v]
    plus = _scale([x + y for x, y in zip(a, b, strict=True)]) ** 2
    minus = _scale([x - y for x, y in zip(a, b, strict=True)]) ** 2
    return (plus - minus) / (plus + minus) if plus + minus > 0 else 1.0


@pytest.mark.parametrize("odd", [None, math.inf, -math.inf, 1e308, math.nan])
def test_robust_correlation_by_arrays_is_the_lists_one(odd: float | None) -> None:
    from gpucert.evaluate.rules.combined import robust_correlation

    for n in (8, 9, 64, 501):
        u = [rng.gauss(0, 1) for _ in range(n)]
        v = [x * 0.6 + rng.gauss(0, 1) for x in u]
        if odd is not None:
            u[3] = odd
        assert repr(robust_correlation(u, v)) == repr(_correlation_as_written(u, v))


def _residual_by_definition(values: dict[tuple[str, int | None], Sampled], key: tuple[str, int | None]) -> float | None:
    """A GPU's figure against the median of its node's other keys (relative), None with fewer than MIN_PEERS of
    them or for a node's own figure: what PeerIndex asked one key at a time before `node_residuals`."""
    if key[1] is None:
        return None
    others = [v.value for k, v in values.items() if k[0] == key[0] and k != key]
    if len(others) < MIN_PEERS:
        return None
    return values[key].value / median_of(others) - 1


def test_node_residuals_are_each_gpus_against_the_median_of_its_nodes_others() -> None:
    """`node_residuals` sorts a node's figures once and takes one value out (bisect) instead of asking each GPU's
    median of the others: the same numbers, to the bit, with ties, a duplicate of the GPU's own figure, even and odd
    counts, a node with a figure of its own (GPU None) among its GPUs, and nodes too small to be compared."""
    values: dict[tuple[str, int | None], Sampled] = {}
    rows = {
        "ties": [100.0, 100.0, 100.0, 100.0, 90.0, 100.0, 100.0, 100.0],
        "odd": [rng.uniform(90, 110) for _ in range(7)],
        "even": [rng.uniform(90, 110) for _ in range(8)],
        "dupes": [95.0, 101.0, 95.0, 103.0, 101.0],
        "small": [100.0, 80.0, 120.0],
        "four": [100.0, 80.0, 120.0, 80.0],
    }
    for node, figures in rows.items():
        for i, v in enumerate(figures):
            values[(node, i)] = Sampled(v, 60, "GB/s")
    values[("mixed", None)] = Sampled(50.0, 60, "GB/s")
    for i, v in enumerate([100.0, 104.0, 96.0, 101.0]):
        values[("mixed", i)] = Sampled(v, 60, "GB/s")
    by_node: dict[str, list[tuple[str, int | None]]] = {}
    for k in values:
        by_node.setdefault(k[0], []).append(k)
    found = stragglers_told.node_residuals(values, by_node)
    wanted = {k: r for k in values if (r := _residual_by_definition(values, k)) is not None}
    assert found == wanted
    assert list(found) == list(wanted)  # in `values`' order
    assert not any(k[0] == "small" for k in found)
    assert ("mixed", None) not in found
