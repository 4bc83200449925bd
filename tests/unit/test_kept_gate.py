"""Gate 4 of a re-test's kept decisions (acceptance/retest_kept.py `Kept.keeps`): the one definition the carried
nodes' loop (pytest/carried.py) asks, node by node, fail closed on a check no rule decides."""

from __future__ import annotations

from gpucert.acceptance.retest_kept import Kept
from gpucert.plan.checks import CheckKey

KEYS = [
    CheckKey("health.ecc", "n1", 0),  # local: the node's own evidence
    CheckKey("memory.bandwidth", "n1", 0),  # against its peers: decided by the rules
    CheckKey("inventory.gpus", "n1"),  # a GPU seen on another node too: not local, though `inventory` is
    CheckKey("no.such.check", "n1"),  # no rule decides it: the rules' error says so
    CheckKey("health.ecc", "n2", 0),  # another node's key in n1's list
]


def test_a_kept_node_keeps_its_local_checks_only() -> None:
    kept = Kept("run-1", frozenset({"n1"}))
    assert [kept.keeps(k) for k in KEYS] == [True, False, False, False, False]
    # a node's keys split by their check (pytest/carried.py): each keeps exactly where `keeps` says it does
    mine = [k for k in KEYS if k.node == "n1"]
    assert kept.kept_checks("n1", mine) == {"health.ecc"}
    assert [k.check in kept.kept_checks("n1", mine) for k in mine] == [kept.keeps(k) for k in mine]
    assert kept.kept_checks("n2", KEYS[4:]) == set()  # n2 keeps nothing
    assert not Kept("run-1", refused="why").keeps(KEYS[0])
