"""`pool.fabric`: a pool's fabric declaration is one its nodes can be held to. Pure (the spec and stack.json).

Checked at configure time, before anything is measured, once per pool (one root cause, one finding): the rated
speed is one a port of the declared link layer can run at; the pool's nodes offer an RDMA device plugin resource
(the one `rails.resource` names, or any `*rdma*` resource when the rails name their HCAs), without which no fabric
pod can open the HCAs; and, when the fabric names a rack label, every node carries it (the isolation of a slow link
to a rack needs it). Once the pool is measured, every rail port at one rate below the rated one says the same of
the HCAs: one finding here, not one per port.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.cluster import Pool
from gpucert.stack.observe import NodeStack

__all__ = ["POOL_FABRIC", "judge_pool_fabric", "rdma_resources"]

POOL_FABRIC = "pool.fabric"


def rdma_resources(pool: Pool, ns: NodeStack) -> dict[str, int]:
    """The RDMA device plugin resources the node offers the pool's fabric pods (allocatable > 0)."""
    assert pool.fabric is not None
    named = pool.fabric.rails.resource
    if named is not None:
        return {named: ns.resources[named]} if ns.resources.get(named, 0) > 0 else {}
    return {k: v for k, v in ns.resources.items() if "rdma" in k.lower() and v > 0}


def _short(nodes: list[str]) -> str:
    return ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")


def judge_pool_fabric(pool: Pool, stacks: Mapping[str, NodeStack], uniform_rate: float | None = None) -> Finding:
    """The pool's fabric section against the link layer's speeds and its nodes (`stacks`: the pool's members that
    the cluster lists). `uniform_rate`: where the pool was measured, the one rate below ratedGbps every rail port
    of its nodes runs at (the HCAs cannot run at the rated speed). The finding names the pool in its message and
    in nothing else (node None)."""
    fabric = pool.fabric
    assert fabric is not None
    problems: list[str] = []
    rated = fabric.rated_problem()
    if rated:
        problems.append(f"{rated}: correct pools[{pool.name}].fabric.ratedGbps")
    elif uniform_rate is not None:
        problems.append(
            f"every rail port of its nodes runs at {uniform_rate:g} Gb/s: ratedGbps {fabric.rated_gbps:g} is not a "
            "speed these HCAs run at; correct ratedGbps (or the HCAs)"
        )
    what = f"resource {fabric.rails.resource}" if fabric.rails.resource else "RDMA resource (`*rdma*`)"
    without = sorted(n for n, ns in stacks.items() if not rdma_resources(pool, ns))
    if stacks and len(without) == len(stacks):
        problems.append(
            f"no node of the pool offers an RDMA device plugin {what}: install the RDMA shared device plugin (or "
            "the SR-IOV/host-device plugin) on its nodes, or name the resource they offer in fabric.rails.resource"
        )
    elif without:
        problems.append(f"{len(without)} nodes offer no {what}: {_short(without)}")
    if fabric.rack_label:
        unlabelled = sorted(n for n, ns in stacks.items() if fabric.rack_label not in ns.labels)
        if unlabelled:
            problems.append(
                f"{len(unlabelled)} nodes lack the rack label {fabric.rack_label}: {_short(unlabelled)}; label them "
                "or change fabric.rackLabel"
            )
    if problems:
        return Finding(POOL_FABRIC, CheckStatus.FAIL, None, None, f"pool {pool.name}: {'; '.join(problems)}")
    if not stacks:
        message = f"pool {pool.name}: the cluster lists none of its nodes, so its fabric cannot be judged"
        return Finding(POOL_FABRIC, CheckStatus.ERROR, None, None, message)
    message = (
        f"pool {pool.name}: {fabric.rails.count} rails of {fabric.rated_gbps:g} Gb/s {fabric.link_layer.value}, "
        f"RDMA resource on all {len(stacks)} nodes"
    )
    return Finding(POOL_FABRIC, CheckStatus.PASS, None, None, message, observed=fabric.rated_gbps, unit="Gb/s")
