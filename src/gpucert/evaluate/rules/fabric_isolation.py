"""`fabric.rdma_bw`: RDMA write bandwidth per rail between pairs of nodes, and where a low figure comes from. Pure.

A slow pair says only that something between two nodes is slow. The cause is isolated by topology, per rail, from
the widest to the narrowest explanation that fits, so one fault is one finding:
1. a port that is down or trained down (`fabric.port` failed), or a node without GPUDirect RDMA (`fabric.gdr`:
   ib_write_bw --use_cuda cannot register GPU memory there), explains every pair it is in;
2. a link between two racks: most pairs across the two racks are slow (pairs touching a node of 1. aside);
3. a node's rail (its NIC, cable or switch port): most of its pairs are slow (those explained by 1. and 2. aside),
   taking the worst node first so that its peers' pairs with it are explained by it;
4. what is left is a link between two nodes: one finding on the pair's first node (in inventory order), naming
   the peer. Every pair explained by 1.-3. is covered by that finding and judged nowhere else.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["PairFigure", "RailIsolation", "isolate_rail"]


@dataclass(frozen=True, slots=True)
class PairFigure:
    """One pair on one rail: its median bandwidth (Gb/s), or why it has none."""

    rail: int
    a: str
    b: str
    gbps: float | None
    error: str | None = None

    def has(self, node: str) -> bool:
        return node in (self.a, self.b)

    def peer(self, node: str) -> str:
        return self.b if node == self.a else self.a

    @property
    def name(self) -> str:
        return f"{self.a} + {self.b}"


@dataclass
class RailIsolation:
    """What one rail's pairs say: the slow rack links, the slow node rails, the slow node-to-node links (by the
    node that reports them), and for every pair the cause that covers it (for the reports)."""

    rail: int
    limit: float
    pairs: list[PairFigure]
    racks: dict[tuple[str, str], list[PairFigure]] = field(default_factory=dict)
    nodes: dict[str, list[PairFigure]] = field(default_factory=dict)
    links: dict[str, list[PairFigure]] = field(default_factory=dict)
    cause: dict[tuple[str, str], str] = field(default_factory=dict)  # (a, b) -> "port"/"racks"/"node"/"link"
    _by_node: dict[str, list[PairFigure]] = field(default_factory=dict)
    _slow: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        for p in self.pairs:  # indexed once: a full round-robin of 1,024 nodes is 523,776 pairs per rail
            self._by_node.setdefault(p.a, []).append(p)
            self._by_node.setdefault(p.b, []).append(p)
            if p.gbps is None or p.gbps < self.limit:
                self._slow.add((p.a, p.b))

    def slow(self, p: PairFigure) -> bool:
        return (p.a, p.b) in self._slow

    @property
    def touched(self) -> set[str]:
        """The nodes of at least one slow pair: the only ones a cause can be found for."""
        return {n for pair in self._slow for n in pair}

    def of(self, node: str) -> list[PairFigure]:
        return self._by_node.get(node, [])


def _slow_share(pairs: Sequence[PairFigure], iso: RailIsolation) -> float:
    return sum(iso.slow(p) for p in pairs) / len(pairs) if pairs else 0.0


def _racks(iso: RailIsolation, racks: Mapping[str, str | None], open_: list[PairFigure]) -> None:
    if not iso.touched:
        return  # a clean rail (the common case) has no rack link to look for
    across: dict[tuple[str, str], list[PairFigure]] = {}
    for p in open_:
        ra, rb = racks.get(p.a), racks.get(p.b)
        if ra is not None and rb is not None and ra != rb:
            across.setdefault((min(ra, rb), max(ra, rb)), []).append(p)
    for link, pairs in sorted(across.items()):
        if len(pairs) >= 3 and _slow_share(pairs, iso) > 0.5:
            iso.racks[link] = [p for p in pairs if iso.slow(p)]
            for p in pairs:
                iso.cause[(p.a, p.b)] = "racks"


def _nodes(iso: RailIsolation, order: Sequence[str]) -> None:
    def unexplained(node: str) -> list[PairFigure]:
        return [p for p in iso.of(node) if (p.a, p.b) not in iso.cause]

    position = {n: i for i, n in enumerate(order)}
    touched = iso.touched  # a node in no slow pair is no node's fault
    candidates = [n for n in order if n in touched]
    ranked = sorted(candidates, key=lambda n: (-_slow_share(unexplained(n), iso), position[n]))
    for node in ranked:
        mine = unexplained(node)
        if len(mine) >= 2 and _slow_share(mine, iso) > 0.5:
            iso.nodes[node] = [p for p in mine if iso.slow(p)]
            for p in mine:
                iso.cause[(p.a, p.b)] = f"node {node}"


def isolate_rail(
    rail: int,
    pairs: Sequence[PairFigure],
    limit: float,
    order: Sequence[str],
    racks: Mapping[str, str | None] | None = None,
    down: Mapping[str, str] | None = None,
) -> RailIsolation:
    """Isolate the slow pairs of one rail. `order`: the pool's nodes in inventory order; `racks`: each node's rack
    (None: not labelled); `down`: the nodes whose own finding explains every pair they are in on this rail (their
    port failed `fabric.port`, their GPUDirect RDMA `fabric.gdr`), with that finding's key."""
    down = down or {}
    iso = RailIsolation(rail, limit, list(pairs))
    for p in iso.pairs:
        node = next((n for n in (p.a, p.b) if n in down), None)
        if node is not None:
            iso.cause[(p.a, p.b)] = down[node]
    _racks(iso, racks or {}, [p for p in iso.pairs if (p.a, p.b) not in iso.cause])
    _nodes(iso, [n for n in order if n not in down])
    rank = {n: i for i, n in enumerate(order)}
    for p in iso.pairs:
        if (p.a, p.b) not in iso.cause and iso.slow(p):
            owner = min((p.a, p.b), key=lambda n: rank.get(n, len(rank)))
            iso.links.setdefault(owner, []).append(p)
            iso.cause[(p.a, p.b)] = "link"
    return iso


def describe(pairs: Sequence[PairFigure]) -> str:
    """`a + b 182 Gb/s, c + d (did not run: ...)`, at most five, and the median of those with a figure."""
    rails = len({p.rail for p in pairs}) > 1  # name the rail where the pairs are of several

    def name(p: PairFigure) -> str:
        return f"{p.name} (rail {p.rail})" if rails else p.name

    said = [f"{name(p)} {p.gbps:.4g} Gb/s" if p.gbps is not None else f"{name(p)} ({p.error})" for p in pairs[:5]]
    more = f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
    figures = [p.gbps for p in pairs if p.gbps is not None]
    median = f"; median {statistics.median(figures):.4g} Gb/s" if figures else ""
    return ", ".join(said) + more + median
