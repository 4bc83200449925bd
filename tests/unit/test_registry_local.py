"""Which check families are local (evaluate/catalog.py `local=True`): a node's check reads nothing but that node's
own evidence, stack.json and inventory.json entries and the run's spec and baselines, so a re-test's carried node
keeps its signed decision of it (acceptance/retest_kept.py). Every family is named here with why, read from its rule:
a family added, or one made local, fails this test until someone has read its rule for what it asks of the RunView.
"""

from __future__ import annotations

from gpucert.evaluate.catalog import REGISTRY
from gpucert.evaluate.registry import Registry
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

LOCAL = {
    "stack": "the node's stack.json entry against its pool's pins in the spec (version, compat, ordering, kubernetes, "
    "runtime; the driver NVML saw in its evidence)",
    "inventory": "inventory.product: the node's labels, its evidence's GPU names and memory, its pool's baseline",
    "node": "node.reachable: the node's stack.json entry (Ready) and whether its own evidence can be used",
    "probe": "probe.preflight: the node's own evidence",
    "health": "each GPU's NVML readings in the node's evidence against its pool's baseline",
    "dcgm": "each GPU's dcgmi diag result in the node's evidence, at the spec's level",
}
NOT_LOCAL = {
    "stack.skew": "counts the versions on every node of the pool",
    "baseline": "the static gate's inputs, of no node",
    "inventory.gpus": "a GPU's UUID or serial reported by another node too fails both",
    "inventory.nodes": "the fleet's node count against the pools",
    "pool": "which pool a node is in, judged with the spec's pools: the lead's list, when unsure not local",
    "pool.fabric": "a pool's fabric declaration",
    "memory": "straggler, stability and combined rules compare the GPU with its pool's GPUs",
    "compute.gemm": "as memory",
    "pcie": "as memory",
    "p2p": "as memory",
    "nccl": "as memory (the node's all-reduce against its pool's nodes)",
    "straggler": "the node against its pool's nodes",
    "straggler.combined": "a GPU on every metric against the pool's GPUs",
    "nccl.all_reduce.multinode": "the all-reduce across nodes",
    "straggler.nccl.all_reduce.multinode": "the node's pairs of neighbours against the pairs' median",
    "fabric": "pairs, rails, racks: other nodes",
    "handover": "a recertification against its handover figure and fleet peers",
    "handover.identity": "a recertification",
    "drift": "each GPU's history",
    "drift.combined": "each GPU's history",
    "waiver": "the run's waivers at the run's time",
}


def test_every_family_is_named_local_or_not_with_why() -> None:
    assert not LOCAL.keys() & NOT_LOCAL.keys()
    assert {r.family: r.local for r in REGISTRY} == {**dict.fromkeys(LOCAL, True), **dict.fromkeys(NOT_LOCAL, False)}


def test_a_check_is_local_by_its_longest_family() -> None:
    local = {c: REGISTRY.rule_for(c).local for c in ("stack.version", "stack.skew", "inventory.product")}
    local |= {c: REGISTRY.rule_for(c).local for c in ("inventory.gpus", "health.ecc", "straggler.memory.bandwidth")}
    assert local == {
        "stack.version": True,
        "stack.skew": False,
        "inventory.product": True,
        "inventory.gpus": False,
        "health.ecc": True,
        "straggler.memory.bandwidth": False,
    }


def test_a_family_is_not_local_unless_registered_so() -> None:
    def rule(_view: object, key: CheckKey) -> Finding:
        return Finding(key.check, CheckStatus.PASS)

    registry = Registry()
    registry.register("a", rule)
    registry.register("a.b", rule, local=True)
    assert (registry.rule_for("a.c").local, registry.rule_for("a.b.c").local) == (False, True)
