"""The plan's indexes: what collection and the verdict ask of a fleet's plan, answered without a pass over every
required key each time (a re-test of 3 nodes of a 1,024 x 8 fleet has 189,000 of them)."""

from __future__ import annotations

import inspect
from dataclasses import MISSING, FrozenInstanceError, fields, make_dataclass, replace

import pytest

from gpucert.plan.checks import CheckKey, CheckStatus, Finding, key_grid
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


def test_a_finding_is_made_as_the_dataclass_would_make_it() -> None:
    # Finding's __init__ is written out (each slot set by its descriptor): it takes the fields the dataclass
    # declares, in their order, with their defaults, and sets each of them
    spec = [(f.name, f.type) if f.default is MISSING else (f.name, f.type, f.default) for f in fields(Finding)]
    declared = make_dataclass("Declared", spec)
    ours, theirs = inspect.signature(Finding.__init__), inspect.signature(declared.__init__)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
    values = ["c", CheckStatus.FAIL, "n1", 3, "slow", 1.5, 2.0, "GB/s", 1.8, "probe.preflight@n1", "waivers[0]"]
    made = Finding(*values)
    assert [getattr(made, f.name) for f in fields(Finding)] == values
    assert Finding(**{f.name: v for f, v in zip(fields(Finding), values, strict=True)}) == made
    assert replace(made, gpu=4).gpu == 4
    with pytest.raises(FrozenInstanceError):
        made.check = "other"  # type: ignore[misc]
