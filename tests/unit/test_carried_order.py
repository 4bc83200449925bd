"""The order a re-test decides a carried node's checks in (pytest/carried.py `node_order`): CheckKey.sort_key's,
whether the keys' own tuples can be compared (sorted in C) or not (a check with keys of no GPU and of GPUs, or of no
detail and of details: sorted by sort_key's terms)."""

from __future__ import annotations

import random

import pytest

from gpucert.plan.checks import CheckKey
from gpucert.pytest.carried import node_order

PLAIN = [
    CheckKey("health.ecc", "n1", 0),
    CheckKey("health.ecc", "n1", 1),
    CheckKey("health.ecc", "n1", 10),
    CheckKey("inventory.gpus", "n1"),
    CheckKey("stack.version", "n1", None, "cuda"),
    CheckKey("stack.version", "n1", None, "driver"),
    CheckKey("straggler.memory.bandwidth", "n1"),
]
MIXED = [  # None beside a number or a string in one check: the tuples cannot be compared
    CheckKey("a.check", "n1", None),
    CheckKey("a.check", "n1", 0),
    CheckKey("a.check", "n1", 0, "x"),
    CheckKey("a.check", "n1", 1),
    CheckKey("b.check", "n1", None, ""),
    CheckKey("b.check", "n1", None, None),
]


@pytest.mark.parametrize("keys", [PLAIN, PLAIN + MIXED], ids=["tuples", "mixed"])
def test_a_nodes_keys_are_decided_in_sort_key_order(keys: list[CheckKey]) -> None:
    rng = random.Random(7)
    for _ in range(20):
        shuffled = rng.sample(keys, len(keys))
        assert node_order(shuffled) == sorted(shuffled, key=CheckKey.sort_key)
