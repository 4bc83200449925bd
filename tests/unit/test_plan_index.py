"""The plan's indexes: what collection and the verdict ask of a fleet's plan, answered without a pass over every
required key each time (a re-test of 3 nodes of a 1,024 x 8 fleet has 189,000 of them)."""

from __future__ import annotations

from gpucert.plan.checks import CheckKey, key_grid
from gpucert.plan.required import Plan


def _plan(*keys: CheckKey) -> Plan:
    return Plan(("static", "certify"), frozenset(keys))


def test_a_fleet_check_is_parametrized_over_the_details_of_its_fleet_keys_sorted() -> None:
    plan = _plan(
        CheckKey("baseline.change", None, None, "pool-b"),
        CheckKey("baseline.change", None, None, "pool-a"),
        CheckKey("baseline.change"),  # no detail: not one to parametrize over
        CheckKey("stack.version", "n1", None, "driver"),  # a node's: never the fleet check's
        CheckKey("fabric.link", None, None, "r1|r2"),
    )
    assert plan.fleet_details("baseline.change") == ("pool-a", "pool-b")
    assert plan.fleet_details("fabric.link") == ("r1|r2",)
    assert plan.fleet_details("stack.version") == ()
    assert plan.fleet_details("not.planned") == ()


def test_a_key_grid_makes_the_keys_a_comprehension_would() -> None:
    made = list(key_grid(["health.ecc", "memory.bandwidth"], ["n1", "n2"], range(2)))
    assert sorted(made, key=CheckKey.sort_key) == sorted(
        (CheckKey(c, n, i) for n in ("n1", "n2") for i in range(2) for c in ("health.ecc", "memory.bandwidth")),
        key=CheckKey.sort_key,
    )
    assert all(type(k) is CheckKey for k in made)
    assert str(made[0]) == "health.ecc@n1/gpu0"
    assert set(key_grid(["stack.version"], ["n1"], details=["driver", "cuda"])) == {
        CheckKey("stack.version", "n1", None, "driver"),
        CheckKey("stack.version", "n1", None, "cuda"),
    }
    assert list(key_grid(["node.reachable"], [])) == []
