"""The fabric checks a pool with a `fabric` section requires. Pure (the spec and the pools of the inventory).

Per pool: `pool.fabric` (configure). Per node of the pool and rail: `fabric.port`, `fabric.counters`,
`fabric.affinity`, `fabric.rdma_bw` (the node's rail against every peer it was paired with); per node: `fabric.gdr`,
`fabric.firmware` (the rail HCAs' firmware against the stack's `hca-firmware` pin, or the pool's majority);
per pool of two nodes or more: `fabric.nccl_transport` (NCCL's channels in every collective across its nodes). Per pair
of racks the pool's nodes are in (when the fabric names a rack label): `fabric.rdma_bw` of the link between them.
A pair of nodes is not a check of its own: a full round-robin of 1,024 nodes has 523,776 pairs per rail, so a
pair's bandwidth is judged inside its nodes' rail checks (and a rack pair's), and shown in the per-rail heatmap.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpucert.plan.checks import CheckKey
from gpucert.spec.cluster import ClusterSpec, Pool
from gpucert.spec.pools import PoolMap

__all__ = [
    "NODE_CHECKS",
    "NODE_RAIL_CHECKS",
    "fabric_certify_keys",
    "fabric_configure_keys",
    "rack_detail",
    "rack_pairs",
    "rail_detail",
    "rail_of",
]

NODE_RAIL_CHECKS = ("fabric.port", "fabric.counters", "fabric.affinity", "fabric.rdma_bw")
NODE_CHECKS = ("fabric.gdr", "fabric.firmware")


def rail_detail(rail: int) -> str:
    return f"rail{rail}"


def rail_of(detail: str | None) -> int | None:
    """The rail index a key's detail names (`rail3` -> 3), None for any other detail."""
    if detail is None or not detail.startswith("rail") or not detail[4:].isdigit():
        return None
    return int(detail[4:])


def rack_detail(pool: str, a: str, b: str) -> str:
    return f"{pool} racks {a}+{b}"


def rack_pairs(pool: Pool, pools: PoolMap) -> list[tuple[str, str]]:
    """Every pair of the racks the pool's nodes are in (by the fabric's rack label), each once, sorted."""
    label = pool.fabric.rack_label if pool.fabric else None
    if label is None:
        return []
    racks = sorted({r for n in pools.members(pool.name) if (r := pools.label(n, label)) is not None})
    return [(a, b) for i, a in enumerate(racks) for b in racks[i + 1 :]]


def fabric_configure_keys(spec: ClusterSpec) -> Iterator[CheckKey]:
    for pool in spec.pools:
        if pool.fabric is not None:
            yield CheckKey("pool.fabric", None, None, pool.name)


def fabric_certify_keys(spec: ClusterSpec, pools: PoolMap) -> tuple[list[CheckKey], dict[str, str]]:
    """The fabric checks of every pool with a fabric section, and the ones left out with why."""
    keys: list[CheckKey] = []
    left_out: dict[str, str] = {}
    fabrics = [p for p in spec.pools if p.fabric is not None]
    if not fabrics:
        left_out["fabric.*"] = "no pool declares a fabric section"
    for pool in fabrics:
        assert pool.fabric is not None
        members = pools.members(pool.name)
        rails = [rail_detail(r) for r in range(pool.fabric.rails.count)]
        # the counters are read around the pairs' traffic: a pool of one node here (a recertified node alone) has
        # neither pairs nor a loaded window
        loaded = ("fabric.counters", "fabric.rdma_bw")
        checks = [c for c in NODE_RAIL_CHECKS if c not in loaded or len(members) >= 2]
        if len(members) < 2:
            for check in loaded:
                left_out[check] = f"pool {pool.name} has {len(members)} node(s) in this run: no pair loads the fabric"
        keys += [CheckKey(c, n, None, r) for n in members for r in rails for c in checks]
        keys += [CheckKey(c, n) for n in members for c in NODE_CHECKS]
        if len(members) >= 2:  # NCCL's transport, read off every collective across the pool's nodes: one finding
            keys.append(CheckKey("fabric.nccl_transport", None, None, pool.name))
        else:
            left_out["fabric.nccl_transport"] = f"pool {pool.name} has {len(members)} node(s): no NCCL across nodes"
        pairs = rack_pairs(pool, pools)
        keys += [CheckKey("fabric.rdma_bw", None, None, rack_detail(pool.name, a, b)) for a, b in pairs]
        if pool.fabric.rack_label is None:
            left_out["fabric.rdma_bw between racks"] = f"pool {pool.name}'s fabric names no rackLabel"
    return keys, left_out
