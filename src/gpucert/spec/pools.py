"""Which pool each node is in: the one partition of the fleet by the spec's pools. Pure.

A node is in a pool when it has every label of the pool's nodeSelector. Every node must be in exactly one pool
(`pool.membership`); a node in none or in several has no expectations, no baseline and no peers, so it is held to
that finding alone. Straggler detection, skew and the reports take a node's peers from here: the node's pool,
never another SKU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.cluster import ClusterSpec, Pool

__all__ = ["PoolMap", "membership_finding"]


@dataclass(frozen=True, slots=True)
class _Member:
    node: str
    pools: tuple[str, ...]  # every pool whose selector the node matches, in the spec's order


class PoolMap:
    """The pools of a spec over the nodes of a run (in inventory order), from the nodes' labels."""

    def __init__(self, spec: ClusterSpec, labels: Mapping[str, Mapping[str, str]], order: Iterable[str]) -> None:
        self.spec = spec
        self.order = list(order)
        self._labels = {n: dict(labels.get(n, {})) for n in self.order}
        self._members = {
            n: _Member(n, tuple(p.name for p in spec.pools if p.selects(self._labels[n]))) for n in self.order
        }
        self._by_pool: dict[str, list[str]] = {p.name: [] for p in spec.pools}
        for n in self.order:
            if len(self._members[n].pools) == 1:
                self._by_pool[self._members[n].pools[0]].append(n)

    def pools_of(self, node: str) -> tuple[str, ...]:
        member = self._members.get(node)
        return member.pools if member is not None else ()

    def name_of(self, node: str) -> str | None:
        """The node's pool, when it is in exactly one."""
        pools = self.pools_of(node)
        return pools[0] if len(pools) == 1 else None

    def pool_of(self, node: str) -> Pool | None:
        name = self.name_of(node)
        return self.spec.pool(name) if name is not None else None

    def members(self, pool: str) -> list[str]:
        """The nodes in `pool` and no other, in inventory order: the pool's peers."""
        return list(self._by_pool.get(pool, []))

    def matched(self, pool: str) -> list[str]:
        """Every node the pool's selector matches, also those another pool matches too."""
        return [n for n in self.order if pool in self.pools_of(n)]

    @property
    def placed(self) -> list[str]:
        """The nodes in exactly one pool (the ones with expectations to check)."""
        return [n for n in self.order if self.name_of(n) is not None]

    @property
    def stray(self) -> list[str]:
        """The nodes in no pool or in several."""
        return [n for n in self.order if self.name_of(n) is None]

    def label(self, node: str, key: str) -> str | None:
        """The value of one of the node's kept labels (selector and rack labels), None when it has none."""
        return self._labels.get(node, {}).get(key)

    def gpus_per_node(self, node: str) -> int:
        """How many GPUs the node's pool expects (0 for a node in no pool or several)."""
        pool = self.pool_of(node)
        return pool.expect.gpus_per_node if pool is not None else 0

    @property
    def required(self) -> bool:
        """Whether membership can fail: some pool selects on labels (one pool with no selector takes every node)."""
        return any(p.node_selector for p in self.spec.pools)

    def judge(self, node: str) -> Finding:
        return membership_finding(node, self.pools_of(node), self.spec, self._labels.get(node, {}))


def _selector(pool: Pool) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(pool.node_selector.items())) or "(every node)"


def membership_finding(node: str, pools: tuple[str, ...], spec: ClusterSpec, labels: Mapping[str, str]) -> Finding:
    """`pool.membership`: the node is in exactly one pool; in none or in several, the finding says which labels
    it has of those the pools select on."""
    ok = CheckStatus.PASS if len(pools) == 1 else CheckStatus.FAIL
    if len(pools) == 1:
        message = f"{node} is in pool {pools[0]} ({_selector(spec.pool(pools[0]))})"
    else:
        keys = sorted(spec.selector_labels())
        has = ", ".join(f"{k}={labels[k]}" for k in keys if k in labels) or "none of the labels the pools select on"
        if pools:
            message = f"{node} is in {len(pools)} pools ({', '.join(pools)}): their selectors overlap; it has {has}"
        else:
            wanted = "; ".join(f"{p.name}: {_selector(p)}" for p in spec.pools)
            message = f"{node} is in no pool: it has {has}; the pools select {wanted}"
    return Finding(
        "pool.membership",
        ok,
        node,
        None,
        message,
        observed=", ".join(pools) or None,
        expected="exactly one pool",
    )
