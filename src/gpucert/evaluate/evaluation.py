"""Everything a suite test asks of a run, in one call shape: `Evaluation.decide(key) -> Finding`.

The Evaluation is the run's read-only view (view.RunView: spec, baselines, inventory, evidence, pools, plan) that
looks up the rule of each check in the registry (catalog.py: one rule per check family, in evaluate/rules/) and
holds every skip to its cause (skips.py): a check that cannot run because something it depends on failed is skipped
with that cause (one root cause, one finding); one whose cause did not fail is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from gpucert.evaluate.catalog import REGISTRY
from gpucert.evaluate.locate import outside_pools
from gpucert.evaluate.registry import Rule
from gpucert.evaluate.rules.inventory import decide_node_count, decide_reachable
from gpucert.evaluate.rules.multinode import fabric_straggler, multinode
from gpucert.evaluate.rules.performance_checks import decide_metric, quiet_passes
from gpucert.evaluate.rules.waivers import WaiverBook, book_of, serial_of
from gpucert.evaluate.skips import skip_stands
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.fabric_checks import rail_of

__all__ = ["Evaluation", "GpuSlot", "counted", "counted_node", "settled"]


class Evaluation(RunView):
    """The run folder's inventory, stack observation and evidence, with the decision of every check."""

    def decide(self, key: CheckKey) -> Finding:
        """The Finding of one check: what the suites turn into a test outcome. A skip stands only when the check it
        follows from fails; when that check passes, the skip is an error (the evidence contradicts itself)."""
        found = self._decide(key)
        if found.status is CheckStatus.SKIP and found.cause is not None:
            return skip_stands(found, self._decide(CheckKey.parse(found.cause)))
        return found

    def _decide(self, key: CheckKey) -> Finding:
        """The registered rule's finding; a node outside exactly one pool has no expectations to be held to, so a
        pooled rule is not asked about it (its checks follow from pool.membership)."""
        rule = REGISTRY.rule_for(key.check)
        if rule.pooled and key.node is not None:
            outside = outside_pools(self, key.check, key.node, key.gpu)
            if outside is not None:
                return outside
        return rule.decide(self, key)

    # ---- what the pytest layer and the reports ask besides decisions ------------------------------------------

    @cached_property
    def waiver_book(self) -> WaiverBook | None:
        """The run's waivers judged at the run's time; None for a run prepared without waivers."""
        return book_of(self)

    def waive(self, finding: Finding, key: CheckKey | None = None) -> Finding:
        """The finding (the decision of `key`: its detail names a fabric check's rail) `waived` when a waiver in
        force covers its failure (WaiverBook.waive), else as it was."""
        book = self.waiver_book
        rail = rail_of(key.detail) if key is not None else None
        return book.waive(finding, serial_of(self), rail) if book is not None else finding

    def node_count(self) -> Finding:
        return decide_node_count(self, CheckKey("inventory.nodes"))

    def reachable(self, node: str) -> Finding:
        return decide_reachable(self, CheckKey("node.reachable", node))

    def multinode(self) -> Finding:
        """The all-reduce across nodes against the baseline's multi-node figure (one finding for the set)."""
        return multinode(self)

    def fabric_straggler(self, node: str) -> Finding:
        """The node behind the ring: every pair of neighbours it is in is behind the pairs' median."""
        return fabric_straggler(self, node)


def counted(ev: Evaluation, key: CheckKey) -> Finding:
    """The check's finding as the session counts it, the one test item's outcome of it: the decision, an exception
    in its rule the check's error, then `settled`. The session (pytest/gpus.py) and the re-derivation of a signed
    verdict (report/derivation.py) both ask this, so they cannot decide otherwise."""
    try:
        found = ev.decide(key)
    except Exception as exc:  # a test item reports any exception in its rule as the check's error
        text = f"the check could not run: {type(exc).__name__}: {exc}"
        return Finding(key.check, CheckStatus.ERROR, key.node, key.gpu, text)
    return settled(ev, found, key)


def settled(ev: Evaluation, finding: Finding, key: CheckKey) -> Finding:
    """A finding (the decision of `key`) as the controller counts it: a skip without a failing cause is an error (it
    has not passed), a failure a waiver in force accepts is waived."""
    if finding.status is CheckStatus.SKIP and finding.cause is None:
        return skip_stands(finding, None)
    return ev.waive(finding, key) if finding.status is CheckStatus.FAIL else finding


def counted_node(ev: Evaluation, node: str, keys: Sequence[CheckKey]) -> list[Finding]:
    """`counted` of each of one node's `keys`, in their order, with what every check of the node asks asked once
    (issue 28: a re-test decides its carried nodes' checks node by node, pytest/carried.py): whether the node is in
    exactly one pool, and of a measured metric's GPUs their baseline, peers and node-level finding
    (`quiet_passes`). A key whose rule's finding is a plain pass has that pass (what `counted` makes of one: no
    skip to hold to its cause, no failure to offer the waivers); every other key, and any key whose rule raised,
    is decided again by `counted` itself (fail closed: the one path that words the rest)."""
    if not _plain(ev):  # an evaluation that decides otherwise (a stand-in, a subclass): asked key by key
        return [counted(ev, key) for key in keys]
    found: list[Finding | None] = [None] * len(keys)
    placed = ev.pool_name_of(node) is not None
    by_check: dict[str, list[int]] = {}  # each check's keys (their places): its rule looked up once
    for i, key in enumerate(keys):
        by_check.setdefault(key.check, []).append(i)
    metrics: list[tuple[str, list[int], list[int]]] = []  # a measured metric's keys of the node's GPUs, their GPUs
    for check, at in by_check.items():
        rule = _rule(check)
        if rule is None or (rule.pooled and not placed):
            continue
        mine = [i for i in at if keys[i].node == node]
        if rule.decide is decide_metric:
            gpus = [(i, gpu) for i in mine if (gpu := keys[i].gpu) is not None]
            if gpus:
                metrics.append((check, [i for i, _ in gpus], [gpu for _, gpu in gpus]))
            mine = [i for i in mine if keys[i].gpu is None]
        _plain_passes(ev, rule, [keys[i] for i in mine], mine, found)
    for metric, at, of in metrics:
        try:
            told = quiet_passes(ev, metric, node, of)
        except Exception:  # counted's to word, key by key
            continue
        for i, quiet in zip(at, told, strict=True):
            found[i] = quiet
    return [f if f is not None else counted(ev, key) for f, key in zip(found, keys, strict=True)]


def _plain_passes(ev: Evaluation, rule: Rule, keys: list[CheckKey], at: list[int], found: list[Finding | None]) -> None:
    """Into `found` at each key's place (`at`), the rule's finding of the key where it is a plain pass."""
    for i, key in zip(at, keys, strict=True):
        try:
            finding = rule.decide(ev, key)
        except Exception:  # counted's to word
            continue
        if finding.status is CheckStatus.PASS:
            found[i] = finding


def _rule(check: str) -> Rule | None:
    """The rule of the check; None where none decides it (counted's error to word)."""
    try:
        return REGISTRY.rule_for(check)
    except ValueError:
        return None


def _plain(ev: object) -> bool:
    """Whether `ev` decides as the Evaluation does (`counted_node` asks its rules directly)."""
    if not isinstance(ev, Evaluation):
        return False
    kind = type(ev)
    return kind.decide is Evaluation.decide and kind._decide is Evaluation._decide
