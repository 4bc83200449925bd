"""The check registry: which rule decides a check id. Each check family registers its rule under the family's
prefix of the check id (`memory`, `compute.gemm`, `health`, `handover.identity`, ...); a check is decided by the
rule of the longest registered prefix of its id, counted in whole dotted parts (`straggler.nccl.all_reduce.multinode`
is the fabric's rule, `straggler.memory.bandwidth` the straggler family's). No if-chain on id strings.

A rule is a function of the run's read-only view and the check's key, returning its Finding. Registered `pooled`
(the default), its node-level checks are held to the node's pool: a node outside exactly one pool is skipped,
naming pool.membership, before the rule is asked. Registered `local`, a node's check reads nothing but that node's
own evidence, stack.json and inventory.json entries and the run's spec and baselines (never another node, a pool's
members, the fleet, history, pairs, waivers or the time): a re-test's carried node may then keep its signed decision
(acceptance/retest_kept.py). The default is not local: decided by the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpucert.evaluate.view import RunView
from gpucert.plan.checks import CheckKey, Finding

__all__ = ["Registry", "Rule", "RuleFn", "gpu_of", "no_rule"]

RuleFn = Callable[[RunView, CheckKey], Finding]


def no_rule(key: CheckKey) -> ValueError:
    """What a rule raises for a key of its family it has no decision for (a per-GPU check asked of a node)."""
    return ValueError(f"no rule decides {key}: not a check of gpucert's vocabulary")


def gpu_of(key: CheckKey, check: str) -> tuple[str, int]:
    """The node and GPU of a per-GPU key of `check`; no_rule for any other key."""
    if key.node is None or key.gpu is None or key.check != check:
        raise no_rule(key)
    return key.node, key.gpu


@dataclass(frozen=True, slots=True)
class Rule:
    family: str
    decide: RuleFn
    pooled: bool = True
    local: bool = False


class Registry:
    """Check families and their rules, looked up by the longest registered prefix of a check id."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] = {}
        self._found: dict[str, Rule] = {}  # rule_for's answers: a few dozen check ids, asked by every check

    def register(self, family: str, decide: RuleFn, *, pooled: bool = True, local: bool = False) -> None:
        """Register `decide` for every check id that is `family` or starts with `family.` (and has no longer
        registered prefix); `local` only after reading the rule for everything it asks of the RunView. A family
        registered twice is a programming error."""
        if not family or family != family.strip(".") or ".." in family:
            raise ValueError(f"{family!r} is not a check family: dotted parts of a check id, e.g. compute.gemm")
        if family in self._rules:
            raise ValueError(f"check family {family!r} is registered twice")
        self._rules[family] = Rule(family, decide, pooled, local)
        self._found.clear()  # a longer prefix may now decide an id found before

    def rule_for(self, check: str) -> Rule:
        """The rule that decides `check`; ValueError for an id no family covers."""
        rule = self._found.get(check)
        if rule is not None:
            return rule
        parts = check.split(".")
        for n in range(len(parts), 0, -1):
            rule = self._rules.get(".".join(parts[:n]))
            if rule is not None:
                self._found[check] = rule
                return rule
        raise ValueError(f"no rule decides {check!r}: not a check of gpucert's vocabulary")

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules.values())

    def __contains__(self, family: object) -> bool:
        return family in self._rules
