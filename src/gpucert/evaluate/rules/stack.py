"""The `stack` and `baseline` families as a run decides them: the static gate's checks (stack.* and baseline.* of
the inputs beside the spec), the recipe's own (stack.* of the fleet), and each node's installed stack against its
pool's pins (stack.version, .skew, .compat, .ordering, .kubernetes, .runtime). The judging is gpucert.stack's.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from gpucert.evaluate.locate import because, skip
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.view import RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.spec.cluster import StackSpec
from gpucert.spec.versions import normalize
from gpucert.stack import gate_recipe
from gpucert.stack import rules as stack_rules
from gpucert.stack.observe import NodeStack

__all__ = ["decide_gate", "decide_stack", "node_stack"]

PASS, FAIL, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.SKIP


def node_stack(view: RunView, check: str, node: str) -> NodeStack | Finding:
    """The node's stack as the cluster reported it, or the skip that names node.reachable."""
    ns = view.stack.nodes.get(node)
    cause = because("node.reachable", node)
    if ns is None:
        return skip(check, node, None, f"{node} is not listed by the cluster (see node.reachable)", cause)
    if not ns.ready:
        return skip(check, node, None, f"{node} is not Ready (see node.reachable)", cause)
    return ns


def decide_gate(view: RunView, key: CheckKey) -> Finding:
    """A check of the static gate's inputs (the plan asks these only of a gate with inputs)."""
    if key.node is not None or key.detail is None or view.gate is None:
        raise no_rule(key)
    return view.gate.decide(key)


def _version(view: RunView, ns: NodeStack, stack: StackSpec, node: str, component: str | None) -> Finding:
    assert component is not None
    found = stack_rules.version(ns, stack, component)
    ev = view.measured_node(node) if component == "driver" else None
    pin = stack.component("driver")
    seen = ev.system.driver_version if ev is not None else None
    if found.status is PASS and pin is not None and seen and normalize(seen) != normalize(pin.version):
        message = f"{node}: the probe saw driver {seen} on the host (NVML), where the pin is {pin.version}"
        return dataclasses.replace(found, status=FAIL, message=message, observed=seen)
    return found


def _skew(view: RunView, ns: NodeStack, stack: StackSpec, node: str, component: str | None) -> Finding:
    """Against the node's pool: another pool may run another OS or kernel."""
    pool = view.pools.name_of(node)
    assert pool is not None

    def counted() -> dict[str, Counter[object]]:
        peers = {n: view.stack.nodes[n] for n in view.pools.members(pool) if n in view.stack.nodes}
        return stack_rules.skew_counts(peers)

    return stack_rules.skew(ns, {}, view.once(f"stack.skew/{pool}", counted))


def _compat(view: RunView, ns: NodeStack, stack: StackSpec, node: str, component: str | None) -> Finding:
    found = stack_rules.compat(ns, stack)
    if found.status is SKIP and "driver" in view.components():
        return dataclasses.replace(found, cause=because("stack.version", node, None, "driver"))
    return found


NodeRule = Callable[[RunView, NodeStack, StackSpec, str, "str | None"], Finding]
_BY_CHECK: dict[str, NodeRule] = {
    "stack.version": _version,
    "stack.skew": _skew,
    "stack.compat": _compat,
    "stack.ordering": lambda _v, ns, stack, _n, _c: stack_rules.ordering(ns, stack),
    "stack.kubernetes": lambda _v, ns, stack, _n, _c: stack_rules.kubernetes_version(ns, stack),
    "stack.runtime": lambda _v, ns, stack, _n, _c: stack_rules.runtime(ns, stack),
}


def decide_stack(view: RunView, key: CheckKey) -> Finding:
    """The gate's check (fleet-level with a detail), the recipe's (fleet-level), or the node's stack against its
    pool's pins."""
    if key.node is None:
        return decide_gate(view, key) if key.detail is not None else gate_recipe.decide(key.check, view.spec)
    judge = _BY_CHECK.get(key.check)
    if judge is None:
        raise no_rule(key)
    ns = node_stack(view, key.check, key.node)
    if isinstance(ns, Finding):
        return ns
    return judge(view, ns, view.spec.stack_for(view.pool_name(key.node)), key.node, key.detail)
