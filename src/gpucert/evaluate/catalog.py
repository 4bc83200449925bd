"""Every check family gpucert decides, and the rule that decides it: the one place a family is registered.

Adding a family (see docs/architecture.md, "Adding a check family"): write its module under evaluate/rules/ with a
rule `decide_<family>(view: RunView, key: CheckKey) -> Finding`, and register it here, one line.

`local=True` says a node's check of the family reads nothing but that node's own evidence, stack.json and
inventory.json entries and the run's spec and baselines, so a re-test's carried node keeps its signed decision
(acceptance/retest_kept.py): set it only after reading the rule for everything it asks of the RunView, and when
unsure, leave it out (decided by the rules). Local: the node's stack against its pool's pins (but stack.skew, which
counts the pool's nodes), inventory.product, node.reachable, probe.preflight, health, dcgm. Not local: stack.skew,
inventory.gpus (a GPU reported twice in the fleet), inventory.nodes, pool (a pool's own declaration and its members),
every performance metric (its straggler, stability and combined rules compare it with its pool's GPUs), straggler.*,
multinode and fabric (pairs, rings, racks), handover (a recertification: not carried), drift (history), waiver
(the time); tests/unit/test_registry_local.py names each family and why.
"""

from __future__ import annotations

from gpucert.evaluate.registry import Registry
from gpucert.evaluate.rules import (
    combined_checks,
    dcgm,
    drift_checks,
    fabric_checks,
    handover_checks,
    health,
    inventory,
    multinode,
    performance_checks,
    preflight,
    stack,
    waivers,
)

__all__ = ["REGISTRY"]

REGISTRY = Registry()
# configure: the stack and the inventory of each node, against its pool
REGISTRY.register("stack", stack.decide_stack, local=True)  # a node's entry against its pool's pins in the spec
REGISTRY.register("stack.skew", stack.decide_stack)  # counts the versions of the pool's nodes
REGISTRY.register("baseline", stack.decide_gate)
REGISTRY.register("inventory", inventory.decide_inventory, local=True)  # inventory.product
REGISTRY.register("inventory.gpus", inventory.decide_inventory)  # a GPU's serial or UUID seen on another node too
REGISTRY.register("inventory.nodes", inventory.decide_node_count)
REGISTRY.register("node", inventory.decide_reachable, local=True)
REGISTRY.register("pool", inventory.decide_pool, pooled=False)  # the pool itself: a node outside one is its finding
REGISTRY.register("pool.fabric", fabric_checks.decide_fabric, pooled=False)  # a pool's declaration
# certify: each node's probes
REGISTRY.register("probe", preflight.decide_preflight, local=True)
REGISTRY.register("health", health.decide_health, local=True)
REGISTRY.register("dcgm", dcgm.decide_dcgm, local=True)
for measured in ("memory", "compute.gemm", "pcie", "p2p", "nccl"):
    REGISTRY.register(measured, performance_checks.decide_metric)
REGISTRY.register("straggler", performance_checks.decide_node_straggler)
REGISTRY.register("straggler.combined", combined_checks.decide_combined)  # a GPU on every metric at once
# across nodes
REGISTRY.register(multinode.MULTINODE, multinode.decide_multinode)
REGISTRY.register(multinode.PAIRS_CHECK, multinode.decide_pairs)
REGISTRY.register("fabric", fabric_checks.decide_fabric)
# recertify: a node against its own handover
REGISTRY.register("handover", handover_checks.decide_against_handover)
REGISTRY.register("handover.identity", handover_checks.decide_identity)
# certify and recertify: each GPU against its own history
REGISTRY.register("drift", drift_checks.decide_drift)
REGISTRY.register("drift.combined", drift_checks.decide_drift_combined)  # a board on every metric at once
# the run's waivers
REGISTRY.register("waiver", waivers.decide_waiver)
