"""What a PeerIndex (rules/stragglers.py) tells of every GPU of a pool at once, for the many it passes quietly
(issue 28: most of a fleet's GPUs are in line with their peers, and a check asked one GPU at a time what the whole
pool's arrays answer in one go). Pure: the index's figures in, a set of keys out.

A key is quiet when `judge` would pass it (behind neither its node's peers nor its pool), its samples' stability is
judged and would pass (where asked), and `notes` has nothing to say: its check's finding is its baseline's, word for
word. The arrays repeat the index's own arithmetic, element by element in float64 (the robust z, the deviations, the
comparisons with maxDeviation and the bar), so a key is quiet exactly when the one-key questions say so; anything
else (a pool too small, no spread within nodes, a median of zero) is left to those questions.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.rules.stability import MIN_SLOW_SAMPLES, Rules, SlowSamples, TailPool, unstable
from gpucert.evaluate.stats import MAD_TO_SIGMA, Summary, median, median_of_sorted

__all__ = ["MIN_PEERS", "node_medians", "node_residuals", "quiet_keys"]

Key = tuple[str, int | None]  # (node, gpu); gpu None for a node-level metric


class _Index(Protocol):
    """What of rules/stragglers.py's PeerIndex the arrays read."""

    @property
    def values(self) -> Mapping[Key, Sampled]: ...
    @property
    def rules(self) -> Rules: ...
    @property
    def sign(self) -> float: ...
    @property
    def pools(self) -> Mapping[str, Sequence[Key]]: ...
    @property
    def fleet(self) -> Mapping[str, Summary]: ...

    def bar(self, compared: int) -> float: ...
    def within(self, pool: str) -> Summary | None: ...
    def residual(self, key: Key) -> float | None: ...
    def slow(self, key: Key) -> SlowSamples | None: ...
    def tails(self, pool: str) -> TailPool: ...


MIN_PEERS = 3  # a comparison needs at least this many peers: a median of fewer is one of them


def _z(summary: Summary, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """`Summary.z` of each value."""
    sigma = summary.mad * MAD_TO_SIGMA
    if sigma == 0:
        return np.where(x == summary.median, 0.0, np.where(x > summary.median, math.inf, -math.inf))
    return (x - summary.median) / sigma


def _behind(
    index: _Index, deviation: npt.NDArray[np.float64], z: npt.NDArray[np.float64], compared: int
) -> npt.NDArray[np.bool_]:
    """`PeerIndex._behind` of each (deviation, z)."""
    sign = index.sign
    return (sign * deviation < -index.rules.max_deviation) & (sign * z < -index.bar(compared))


def quiet_keys(index: _Index, *, stability: bool) -> set[Key]:
    """The keys `judge` passes, whose stability (`stability`: where it is judged) passes, and of which `notes` says
    nothing: a check of one is its baseline's finding."""
    out: set[Key] = set()
    for pool, keys in index.pools.items():
        fleet, within = index.fleet[pool], index.within(pool)
        if len(keys) - 1 < MIN_PEERS or fleet.median == 0:  # every key has a note, or the arithmetic is odd
            continue
        values = np.array([index.values[k].value for k in keys], dtype=np.float64)
        residuals = [index.residual(k) for k in keys]
        r = np.array([math.nan if x is None else x for x in residuals], dtype=np.float64)
        with np.errstate(all="ignore"):
            behind = _behind(index, values / fleet.median - 1, _z(fleet, values), fleet.n)
            if within is not None:
                behind |= _behind(index, r - within.median, _z(within, r), within.n)  # NaN: no residual, False
        # a GPU's node comparison made (a residual, and a spread within nodes to hold it to); a node's own figure
        # has none to make
        per_gpu = np.array([k[1] is not None for k in keys], dtype=bool)
        told = np.array([x is not None for x in residuals], dtype=bool) if within is not None else ~per_gpu
        compared = ~per_gpu | told
        candidates = ~behind & compared
        if not stability:
            out.update(k for k, quiet in zip(keys, candidates.tolist(), strict=True) if quiet)
            continue
        tails = index.tails(pool)
        if tails.members - 1 < MIN_PEERS:  # stability_told's peers, for every key of the pool: none judged
            continue
        for k, quiet in zip(keys, candidates.tolist(), strict=True):
            if not quiet:
                continue
            slow = index.slow(k)  # judged (stability_told) and passed (not `unstable`, which needs MIN_SLOW_SAMPLES)
            if slow is None or (slow.k >= MIN_SLOW_SAMPLES and unstable(slow, tails, index.rules)):
                continue
            out.add(k)
    return out


def node_residuals(values: Mapping[Key, Sampled], by_node: Mapping[str, Sequence[Key]]) -> dict[Key, float]:
    """Each GPU's figure against the median of its node's other GPUs (relative: figure / median - 1), where the node
    has MIN_PEERS others, in `values`' order; `by_node`: each node's keys. Node by node: the node's figures sorted
    once, the median of a GPU's others that of the sorted figures less one of its own value (the list `median`
    sorts). Nodes of as many GPUs each (most of a fleet) all at once by arrays. A node's own figure (GPU None) has
    no node peers."""
    found: dict[Key, float] = {}
    alike: dict[int, list[Sequence[Key]]] = {}  # nodes of GPUs alone, by their count of GPUs
    for keys in by_node.values():
        if len(keys) - 1 < MIN_PEERS:
            continue
        if any(k[1] is None for k in keys):  # not a node of GPUs alone: each GPU against the others as listed
            figures = [values[k].value for k in keys]
            for i, k in enumerate(keys):
                if k[1] is not None:
                    found[k] = figures[i] / median(figures[:i] + figures[i + 1 :]) - 1
            continue
        alike.setdefault(len(keys), []).append(keys)
    for nodes in alike.values():
        found.update(_residuals_alike(values, nodes))
    return {k: found[k] for k in values if k in found}


def _residuals_alike(values: Mapping[Key, Sampled], nodes: list[Sequence[Key]]) -> dict[Key, float]:
    """`node_residuals` of nodes of n GPUs each: a GPU's others are its node's sorted figures less one of its value
    (which of equal ones does not matter: the same n - 1 values), so their median is one of the sorted figures (n - 1
    odd) or the mean of two of them, chosen by the GPU's rank; the same float64 division and sum as `median_of_sorted`
    of the list without it. Figures that are not all finite: one node at a time, by Python's sort."""
    keys = [k for node in nodes for k in node]
    n = len(nodes[0])
    v = np.array([values[k].value for k in keys], dtype=np.float64).reshape(len(nodes), n)
    if not np.isfinite(v).all():
        out: dict[Key, float] = {}
        for node in nodes:
            ordered = sorted(values[k].value for k in node)
            for k in node:
                x = values[k].value
                j = bisect_left(ordered, x)
                out[k] = x / median_of_sorted(ordered[:j] + ordered[j + 1 :]) - 1
        return out
    order = np.argsort(v, axis=1, kind="stable")
    s = np.take_along_axis(v, order, axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(len(nodes), axis=0), axis=1)

    def others(i: int) -> npt.NDArray[np.float64]:  # the i-th of the sorted figures without the GPU's own
        return np.where(i < rank, s[:, [i]], s[:, [i + 1]])

    m = n - 1
    mid = m // 2
    with np.errstate(all="ignore"):  # Python's float arithmetic overflows to inf silently too
        median_of_others = others(mid) if m % 2 else (others(mid - 1) + others(mid)) / 2
        r = v / median_of_others - 1
    return dict(zip(keys, r.ravel().tolist(), strict=True))


def node_medians(values: Mapping[Key, Sampled], by_node: Mapping[str, Sequence[Key]]) -> dict[str, float]:
    """Each node's figure: the median of its keys' figures, in `by_node`'s order. Nodes of as many figures each at
    once by arrays (the same sort, and a median of two their sum halved: the same bits); figures that are not all
    finite by Python's sort, node by node."""
    alike: dict[int, list[str]] = defaultdict(list)
    for node, keys in by_node.items():
        alike[len(keys)].append(node)
    found: dict[str, float] = {}
    for n, nodes in alike.items():
        v = np.array([values[k].value for node in nodes for k in by_node[node]], dtype=np.float64).reshape(-1, n)
        if not n or not np.isfinite(v).all():
            found.update((node, median([values[k].value for k in by_node[node]])) for node in nodes)
            continue
        v.sort(axis=1)
        mid = n // 2
        with np.errstate(all="ignore"):  # Python's float arithmetic overflows to inf silently too
            told = v[:, mid] if n % 2 else (v[:, mid - 1] + v[:, mid]) / 2
        found.update(zip(nodes, told.tolist(), strict=True))
    return {node: found[node] for node in by_node}
