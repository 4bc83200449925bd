"""plan/pairs.py: the round-robin schedule's invariants at every fleet size from 2 to 65 nodes."""

from __future__ import annotations

from itertools import combinations

import pytest

from gpucert.plan.pairs import pair_count, round_count, rounds


@pytest.mark.parametrize("n", range(2, 66))
def test_every_pair_once_and_no_node_twice_in_a_round(n: int) -> None:
    nodes = [f"gpu-node-{i}" for i in range(1, n + 1)]
    schedule = rounds(nodes)
    assert len(schedule) == round_count(n) == (n - 1 if n % 2 == 0 else n)
    for rnd in schedule:
        busy = [node for pair in rnd for node in pair]
        assert len(busy) == len(set(busy))  # each node in at most one pair of the round
        assert len(rnd) == n // 2  # everyone plays, but the one with the bye
    played = [frozenset(p) for rnd in schedule for p in rnd]
    assert len(played) == len(set(played)) == pair_count(n)  # each pair once
    assert set(played) == {frozenset(p) for p in combinations(nodes, 2)}  # and every pair
    order = {node: i for i, node in enumerate(nodes)}
    assert all(order[a] < order[b] for rnd in schedule for a, b in rnd)


def test_an_odd_fleet_gives_each_node_exactly_one_bye() -> None:
    nodes = [str(i) for i in range(7)]
    idle = [next(n for n in nodes if all(n not in p for p in rnd)) for rnd in rounds(nodes)]
    assert sorted(idle) == nodes


def test_fewer_than_two_nodes_make_no_round() -> None:
    assert rounds([]) == []
    assert rounds(["a"]) == []
    assert rounds(["a", "b"]) == [[("a", "b")]]


def test_a_node_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="named twice"):
        rounds(["a", "b", "a"])
