"""The pairing schedule of the fabric stage: every pair of nodes once, in rounds where no node is in two pairs.

A round-robin tournament by the circle method: the first node stays put, the others turn one place a round
around a circle, and each round pairs the nodes facing each other across it. With n nodes (n even) that is n - 1
rounds of n/2 pairs; an odd n gets a stand-in that sits out, so n rounds of (n - 1)/2 pairs with one node idle
each round. Every node is busy in at most one pair at a time, so the stage takes rounds x a round's time: it grows
with n, not with the n(n-1)/2 pairs. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Pair", "pair_count", "round_count", "rounds"]

Pair = tuple[str, str]


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
