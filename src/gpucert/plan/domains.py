"""Topology domains of the all-reduce across nodes (target.gang.topologyKey): each pool's nodes grouped by the value
of that node label, one ring per domain, and how a ring's `nccl.all_reduce.multinode` key and finding name it. Pure.

A ring's key detail: the pool with several pools (as before), `domain <value>` for a domain's ring (`<pool> domain
<value>` with several pools), and `no domain` (`<pool> no domain`) for the pool's nodes without the label, which no
ring measured. A pool name is a DNS label and a label value has no space, so a detail reads back one way only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["UNLABELLED", "by_domain", "parse_ring", "ring_detail", "ring_prefix"]

UNLABELLED = "no domain"


def ring_detail(pool: str | None, domain: str | None, *, unlabelled: bool = False) -> str | None:
    """The detail of a ring's key: `pool` (None: the spec's one pool) and the domain, or the unlabelled nodes."""
    ring = UNLABELLED if unlabelled else f"domain {domain}" if domain is not None else None
    if ring is None:
        return pool
    return ring if pool is None else f"{pool} {ring}"


def parse_ring(detail: str | None) -> tuple[str | None, str | None, bool]:
    """(pool, domain, unlabelled) of a ring's key detail, as `ring_detail` wrote it (word by word: neither a pool
    name nor a label value has a space)."""
    words = detail.split(" ") if detail is not None else []
    pool = words.pop(0) if len(words) in (1, 3) else None
    if words == ["no", "domain"]:
        return pool, None, True
    if len(words) == 2 and words[0] == "domain":
        return pool, words[1], False
    return (pool, None, False) if not words else (detail, None, False)  # no ring of ours: the rule says so


def by_domain(nodes: Sequence[str], value_of: Callable[[str], str | None]) -> tuple[dict[str, list[str]], list[str]]:
    """`nodes` by their value of the topology label (domains sorted, each its nodes in the order given), and the
    nodes without it (or with an empty value: no domain)."""
    domains: dict[str, list[str]] = {}
    unlabelled: list[str] = []
    for n in nodes:
        value = value_of(n)
        if value:
            domains.setdefault(value, []).append(n)
        else:
            unlabelled.append(n)
    return dict(sorted(domains.items())), unlabelled


def ring_prefix(pool: str | None, domain: str | None, key: str | None) -> str:
    """How a ring's finding begins: its pool (with several pools) and its domain (`pool train, example.com/rack=r1:
    `); "" for the one pool's one ring."""
    parts = ([f"pool {pool}"] if pool else []) + ([f"{key}={domain}"] if domain is not None and key else [])
    return ", ".join(parts) + ": " if parts else ""
