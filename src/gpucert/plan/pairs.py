"""The pairing schedule of the fabric stage: every pair of nodes once, in rounds where no node is in two pairs.

A round-robin tournament by the circle method: the first node stays put, the others turn one place a round
around a circle, and each round pairs the nodes facing each other across it. With n nodes (n even) that is n - 1
rounds of n/2 pairs; an odd n gets a stand-in that sits out, so n rounds of (n - 1)/2 pairs with one node idle
each round. Every node is busy in at most one pair at a time, so the stage takes rounds x a round's time: it grows
with n, not with the n(n-1)/2 pairs.

A re-test (`retest_rounds`) carries the pairs of two carried nodes from its source run and measures only pairs with
a node measured again: each of those against RETEST_PEERS carried peers spread over the pool, in RETEST_PEERS
rounds, however large the pool. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["RETEST_PEERS", "Pair", "pair_count", "retest_bounded", "retest_rounds", "round_count", "rounds"]

Pair = tuple[str, str]

# The carried peers a re-test pairs each node measured again with, on every rail. A node's rail is found at fault
# when most of at least two of its pairs are slow (evaluate/rules/fabric_isolation.py): with eight peers a bad NIC,
# cable or switch port shows on eight pairs and still outvotes three peers that went bad since the source run, and
# the peers, spread over the pool's order, reach into several racks. Eight rounds, not n - 1.
RETEST_PEERS = 8


def round_count(n: int) -> int:
    """How many rounds `rounds` makes of n nodes: n - 1 for even n, n for odd n (a bye each round), none below 2."""
    if n < 2:
        return 0
    return n - 1 if n % 2 == 0 else n


def pair_count(n: int) -> int:
    return n * (n - 1) // 2 if n >= 2 else 0


def rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every pair of `nodes` once, in rounds in which each node is in at most one pair (order of `nodes` kept
    inside each pair: the earlier node first). A node named twice is refused: it cannot pair with itself."""
    if len(set(nodes)) != len(nodes):
        raise ValueError("a node is named twice: each node is paired once with every other")
    order = {n: i for i, n in enumerate(nodes)}
    circle: list[str | None] = [*nodes, None] if len(nodes) % 2 else list(nodes)  # None: the bye
    half = len(circle) // 2
    schedule: list[list[Pair]] = []
    for _ in range(round_count(len(nodes))):
        facing = zip(circle[:half], reversed(circle[half:]), strict=True)
        pairs = [(a, b) if order[a] < order[b] else (b, a) for a, b in facing if a is not None and b is not None]
        schedule.append(pairs)
        circle = [circle[0], circle[-1], *circle[1:-1]]  # the first stays, the rest turn one place
    return schedule


def retest_bounded(again: int, carried: int, peers: int = RETEST_PEERS) -> bool:
    """Whether a re-test pairs its `again` nodes (measured again) of a pool with `peers` carried nodes each (True),
    or measures every pair with a node measured again, as the pool's tournament has them (False: fewer carried
    nodes than `peers`, or more nodes measured again than carried, where a carried node would be in several
    pairs a round)."""
    return 0 < again <= carried and carried >= peers


def retest_rounds(nodes: Sequence[str], carried: Collection[str], peers: int = RETEST_PEERS) -> list[list[Pair]]:
    """The pairs a re-test measures among a pool's `nodes` (in inventory order) when the pairs of two `carried`
    nodes come from its source run: every pair with a node measured again, in rounds where no node is in two pairs.
    Bounded (`retest_bounded`): round j pairs the i-th node measured again with carried node i + j * stride
    (stride: the carried count // peers), so each meets `peers` distinct carried nodes spread over the pool and no
    carried node is in two pairs a round. Otherwise the pool's tournament, less the pairs of two carried nodes."""
    again = [n for n in nodes if n not in carried]
    kept = [n for n in nodes if n in carried]
    if not retest_bounded(len(again), len(kept), peers):
        whole = [[p for p in r if p[0] not in carried or p[1] not in carried] for r in rounds(nodes)]
        return [r for r in whole if r]
    order = {n: i for i, n in enumerate(nodes)}
    stride = len(kept) // peers

    def pair(a: str, b: str) -> Pair:
        return (a, b) if order[a] < order[b] else (b, a)

    return [[pair(a, kept[(i + j * stride) % len(kept)]) for i, a in enumerate(again)] for j in range(peers)]
