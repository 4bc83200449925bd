"""Cuts a full run and a re-test share at fleet scale (issue 28): the ring's neighbour pairs put in rounds in one
pass (the same rounds as the first-fit scan they replace), and the simulated fleet's node numbers looked up, not
searched for."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.plan.run import neighbour_pairs
from tests.unit.test_simulated_fabric import NODES, target


def first_fit(nodes: list[str]) -> list[list[list[str]]]:
    """The rounds as they were made before: each pair in the first round none of whose pairs holds its nodes."""
    pairs = [[nodes[i], nodes[(i + 1) % len(nodes)]] for i in range(len(nodes) if len(nodes) > 2 else 1)]
    rounds: list[list[list[str]]] = []
    for pair in pairs:
        free = next((r for r in rounds if not any(n in g for g in r for n in pair)), None)
        if free is None:
            rounds.append([pair])
        else:
            free.append(pair)
    return rounds


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6, 7, 64, 511, 1024])
def test_the_rounds_are_the_first_fit_ones(count: int) -> None:
    nodes = [f"gpu-node-{i}" for i in range(1, count + 1)]
    assert neighbour_pairs(nodes) == first_fit(nodes)


def test_a_fleets_node_number_is_its_place_in_the_fleet(tmp_path: Path) -> None:
    t = target(tmp_path)
    assert [t.number(n) for n in NODES] == [t.names.index(n) for n in NODES]
    with pytest.raises(ValueError, match="not a node of the fleet"):
        t.number("gpu-node-99")
