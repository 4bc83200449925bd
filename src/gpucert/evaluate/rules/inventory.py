"""The `inventory`, `node` and `pool` families as a run decides them: the nodes the cluster lists against the
spec's pools (inventory.nodes), each node's GPUs (inventory.gpus: count, a GPU reported twice, nameless, numbered
out of order) and product (inventory.product, by the cluster's labels and the probes' readings), whether the node
was reached and its evidence can be believed (node.reachable), and its pool (pool.membership). The judging is
gpucert.stack.rules'.
"""

from __future__ import annotations

import dataclasses

from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.stack import node_stack
from gpucert.evaluate.view import RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.spec.cluster import Pool
from gpucert.stack import rules as stack_rules
from gpucert.stack.observe import NodeStack

__all__ = ["decide_inventory", "decide_node_count", "decide_pool", "decide_reachable"]

PASS, FAIL, ERROR = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR
NODES = "inventory.nodes"


def decide_node_count(view: RunView, key: CheckKey) -> Finding:
    """inventory.nodes: the cluster's nodes against each pool's count, and no evidence of nodes it does not list."""
    unknown = view.unknown_evidence
    if unknown:
        return Finding(
            NODES,
            FAIL,
            None,
            None,
            f"evidence/ holds documents for nodes the inventory does not list: {', '.join(unknown)}; evidence "
            "that is not of this cluster's nodes cannot be part of its certification",
        )
    if view.recertification is not None:
        return Finding(NODES, PASS, None, None, f"recertification of {view.recertification.node}")
    found = {p.name: view.pools.members(p.name) for p in view.spec.pools}
    return stack_rules.node_count(found, view.spec, view.pools.stray)


def _duplicate_gpus(view: RunView) -> dict[str, list[str]]:
    """Per node, each GPU identity (UUID or serial) reported more than once in the fleet, with where."""
    return view.once(  # the inventory's names listed inside: every node's inventory.gpus asks (1,024 at 1,024 x 8)
        "inventory.duplicates",
        lambda: stack_rules.duplicate_gpus({n: ev.gpus for n in view.inventory.names if (ev := view.measured_node(n))}),
    )


def _gpus(view: RunView, ns: NodeStack, pool: Pool, node: str) -> Finding:
    ev = view.measured_node(node)
    found = stack_rules.gpu_count(ns, pool.expect, len(ev.gpus) if ev is not None else None)
    twice = _duplicate_gpus(view).get(node)
    if twice:
        message = f"{node}: the same GPU is reported more than once: {'; '.join(twice)}"
        return dataclasses.replace(found, status=FAIL, message=message)
    nameless = stack_rules.nameless_gpus(node, ev.gpus if ev is not None else [])
    if nameless:
        return dataclasses.replace(found, status=ERROR, message=nameless)
    indices = sorted(g.index for g in ev.gpus) if ev is not None else []
    if indices != list(range(len(indices))):
        message = f"{node}: the probe numbered its GPUs {indices}, not 0..{len(indices) - 1}"
        return dataclasses.replace(found, status=FAIL, message=message)
    return found


def _product(view: RunView, ns: NodeStack, pool: Pool, node: str) -> Finding:
    found = stack_rules.gpu_product(ns, pool.expect)
    ev = view.measured_node(node)
    b = view.baselines[pool.name]
    seen = stack_rules.probe_products(node, ev.gpus, pool.expect.gpu_product, b.memory_mib, b.sku) if ev else None
    return dataclasses.replace(found, status=FAIL, message=seen) if seen and found.status is PASS else found


def decide_inventory(view: RunView, key: CheckKey) -> Finding:
    """inventory.gpus and inventory.product of a node."""
    if key.node is None or key.check not in ("inventory.gpus", "inventory.product"):
        raise no_rule(key)
    ns = node_stack(view, key.check, key.node)
    if isinstance(ns, Finding):
        return ns
    judge = _gpus if key.check == "inventory.gpus" else _product
    return judge(view, ns, view.spec.pool(view.pool_name(key.node)), key.node)


def decide_reachable(view: RunView, key: CheckKey) -> Finding:
    """node.reachable: the cluster lists the node Ready and, where the run measured, its evidence can be used."""
    node = key.node
    if node is None or key.check != "node.reachable":
        raise no_rule(key)
    error = None
    if view.measured:
        problem = view.evidence_problem(node)
        ev = view.evidence(node) if problem is None else None
        if problem is not None:
            error = f"its evidence cannot be used: {problem}"
        elif ev is not None and ev.timing_problem():
            error = f"its evidence cannot be believed: {ev.timing_problem()}"
        elif ev is None:
            error = "no evidence was written for this node"
        elif not ev.collected and not view.preflight_failed(node):
            error = "; ".join(e.message for e in ev.errors) or "the probe did not run"
    return stack_rules.reachable(view.stack.nodes.get(node), node, error)


def decide_pool(view: RunView, key: CheckKey) -> Finding:
    """pool.membership: the node is in exactly one of the spec's pools."""
    if key.node is None:
        raise no_rule(key)
    return view.pools.judge(key.node)
