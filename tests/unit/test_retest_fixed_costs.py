"""What a re-test pays per carried node outside the rules (issue 28): each cut keeps its behaviour, and the work
it removed does not come back (a count that grew with the fleet grows no more)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.spec.simulated_fleet import Nodes
from tests.unit.test_simulated_fabric import NODES, PLAN, target


def test_the_simulated_fleet_lists_its_node_names_once_not_per_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = target(tmp_path)
    calls: list[int] = []
    names = Nodes.names
    monkeypatch.setattr(Nodes, "names", lambda self: calls.append(1) or names(self))
    for node in NODES:  # each node's measurement asks for its group (its fabric, its rack) several times
        t.measure_node(node, PLAN)
        assert t.fleet.fabric_of(node) is t.fleet.fabric
    assert calls == []  # the fleet's map of nodes to groups was built when it was loaded, once
