"""plan/pairs.py: the round-robin schedule's invariants at every fleet size from 2 to 65 nodes; a re-test's pairs."""

from __future__ import annotations

from itertools import combinations

import pytest

from gpucert.plan.pairs import RETEST_PEERS, pair_count, retest_bounded, retest_rounds, round_count, rounds


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


@pytest.mark.parametrize(("n", "again"), [(10, 1), (16, 3), (64, 3), (64, 32), (1024, 3), (17, 8)])
def test_a_retest_pairs_each_node_measured_again_with_eight_carried_peers_in_eight_rounds(n: int, again: int) -> None:
    """Issue 28: a re-test's fabric stage is RETEST_PEERS rounds, not n - 1, each node measured again meets as many
    distinct carried peers spread over the pool, and no node is in two pairs of a round."""
    nodes = [f"gpu-node-{i}" for i in range(1, n + 1)]
    repaired = set(nodes[1 :: max(1, n // again)][:again])
    carried = [x for x in nodes if x not in repaired]
    schedule = retest_rounds(nodes, frozenset(carried))
    assert len(schedule) == RETEST_PEERS < round_count(n)
    for rnd in schedule:
        busy = [node for pair in rnd for node in pair]
        assert len(busy) == len(set(busy))
    order = {node: i for i, node in enumerate(nodes)}
    pairs = [p for rnd in schedule for p in rnd]
    assert all(order[a] < order[b] and len(repaired & {a, b}) == 1 for a, b in pairs)  # never two carried
    for node in repaired:
        peers = {b if a == node else a for a, b in pairs if node in (a, b)}
        assert len(peers) == RETEST_PEERS
        if n >= 64:  # spread over the pool: the peers' positions span most of it (racks are runs of the order)
            spots = sorted(order[p] for p in peers)
            assert spots[-1] - spots[0] > n // 2


@pytest.mark.parametrize(("n", "again"), [(10, 3), (12, 7), (9, 9), (5, 1)])
def test_a_retest_with_few_carried_nodes_measures_every_pair_with_a_node_measured_again(n: int, again: int) -> None:
    """Fewer than RETEST_PEERS carried nodes, or more measured again than carried: the pool's tournament, less the
    pairs of two carried nodes (those are carried)."""
    nodes = [f"n{i:02d}" for i in range(n)]
    carried = frozenset(nodes[again:])
    assert not retest_bounded(again, len(carried))
    schedule = retest_rounds(nodes, carried)
    played = {frozenset(p) for rnd in schedule for p in rnd}
    assert played == {frozenset(p) for p in combinations(nodes, 2) if not set(p) <= carried}
    assert all(rnd for rnd in schedule)
    assert len(schedule) <= round_count(n)
    for rnd in schedule:
        busy = [node for pair in rnd for node in pair]
        assert len(busy) == len(set(busy))
    assert retest_rounds(nodes, frozenset(nodes)) == []  # nothing measured again: no pair
