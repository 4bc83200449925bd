"""The fabric checks' decisions: find a pool's fabric declaration and its evidence, or say why there is none, and
hand them to the pure rules (evaluate/rules/fabric_*.py). Reads through the Evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpucert.evaluate.rules.fabric_config import POOL_FABRIC, judge_pool_fabric
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation

__all__ = ["decide_fabric"]

SKIP, ERROR = CheckStatus.SKIP, CheckStatus.ERROR


def pool_fabric(ev: Evaluation, pool_name: str) -> Finding:
    """`pool.fabric` of one pool: its declaration against the link layer and the nodes the cluster lists."""
    pool = ev.spec.pool(pool_name)
    members = ev.pools.members(pool_name)
    stacks = {n: ns for n in members if (ns := ev.stack.nodes.get(n)) is not None}
    found = judge_pool_fabric(pool, stacks)
    if found.status is ERROR and not members:
        why = f"pool {pool_name} has no nodes, so its fabric cannot be judged (see inventory.nodes)"
        return Finding(POOL_FABRIC, SKIP, None, None, why, cause=str(CheckKey("inventory.nodes")))
    return found


def decide_fabric(ev: Evaluation, key: CheckKey) -> Finding:
    if key.check == POOL_FABRIC and key.detail is not None:
        return pool_fabric(ev, key.detail)
    return Finding(key.check, ERROR, key.node, None, f"{key}: no fabric evidence to judge")
