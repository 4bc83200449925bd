"""`fabric.rdma_bw`'s evidence held to the schedule that made it: every pair of a pool's measured nodes once per
rail, on the rail's HCA at both ends (plan/pairs.py: a round-robin tournament of the pool's nodes). Pure.

A fabric stage that stopped after some rounds, or a pairs document edited after the run, still reads as figures:
a node with one fast pair on a rail would pass it. So before any figure is judged, each node's pairs on each rail
are counted against the schedule; a missing pair, one measured twice, one with a node of no pool of this fabric or
with itself, one on a rail the pool does not have or on another HCA than the rail's, makes that node's rail an
error naming the pair. Only the pairs that fit (each the first time it is seen) go on to be judged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from gpucert.measure.evidence_fabric import RdmaBandwidth

__all__ = ["Schedule", "check_schedule"]

SHOWN = 5  # pairs named in one message before "and N more"


@dataclass
class Schedule:
    """One pool's RDMA records against its schedule: the records that fit, by rail, and what is wrong, by node and
    rail (a node-rail with problems is an error, whatever its figures say)."""

    kept: dict[int, list[RdmaBandwidth]] = field(default_factory=dict)
    problems: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    def of(self, node: str, rail: int) -> list[str]:
        return self.problems.get((node, rail), [])

    def _add(self, nodes: Iterable[str], rails: Iterable[int], why: str) -> None:
        for rail in rails:
            for node in nodes:
                said = self.problems.setdefault((node, rail), [])
                if why not in said:
                    said.append(why)


def _listed(names: Sequence[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def _record_problem(
    doc: Sequence[str], r: RdmaBandwidth, pool: str, members: Collection[str], rails: int
) -> str | None:
    name = f"{r.client} + {r.server}"
    if r.client == r.server:
        return f"{r.client} is paired with itself on rail {r.rail}"
    if sorted((r.client, r.server)) != sorted(doc):
        return f"a record of {name} sits in the document of the pair {' + '.join(doc)}"
    strangers = [n for n in (r.client, r.server) if n not in members]
    if strangers:
        return f"{name} on rail {r.rail}: {', '.join(strangers)} is not in pool {pool}"
    if not 0 <= r.rail < rails:
        return f"{name}: rail {r.rail} is not one of pool {pool}'s {rails} rails (0 to {rails - 1})"
    return None


def _hca_problem(r: RdmaBandwidth, hca: Callable[[str, int], str | None]) -> str | None:
    for node, port in ((r.client, r.client_hca), (r.server, r.server_hca)):
        want = hca(node, r.rail)
        if want is not None and port != want:
            return f"{r.client} + {r.server} on rail {r.rail}: {node}'s end is {port}, not the rail's {want}"
    return None


def check_schedule(
    records: Iterable[tuple[Sequence[str], RdmaBandwidth]],
    pool: str,
    members: Sequence[str],
    measured: Collection[str],
    rails: int,
    hca: Callable[[str, int], str | None],
) -> Schedule:
    """Hold the RDMA records (each with the nodes of the pair document it came from) to the schedule of `pool`:
    every pair of its `measured` nodes once on each of its `rails`. `members`: every node of the pool (a pair with
    an unmeasured member is believed, not required); `hca(node, rail)`: the port key the rail uses on the node
    (None: not known, its fabric.port finding says why). Records naming no node of the pool are another pool's."""
    out = Schedule(kept={r: [] for r in range(rails)})
    inside = set(members)
    seen: dict[int, dict[str, set[str]]] = {r: {} for r in range(rails)}
    for doc, r in records:
        mine = [n for n in dict.fromkeys((r.client, r.server, *doc)) if n in inside]
        if not mine:
            continue
        why = _record_problem(doc, r, pool, inside, rails)
        if why is not None:
            out._add(mine, [r.rail] if 0 <= r.rail < rails else range(rails), why)
            continue
        why = _hca_problem(r, hca)
        if why is None and r.server in seen[r.rail].get(r.client, ()):
            why = f"{r.client} + {r.server} is measured more than once on rail {r.rail}"
        if why is not None:
            out._add(mine, [r.rail], why)
            continue
        seen[r.rail].setdefault(r.client, set()).add(r.server)
        seen[r.rail].setdefault(r.server, set()).add(r.client)
        out.kept[r.rail].append(r)
    order = [n for n in members if n in measured]
    scheduled = set(order)
    for rail in range(rails):
        for node in order:
            peers = seen[rail].get(node, set())
            if len(peers & scheduled) == len(order) - 1:  # the common case, in C: 1,024 nodes x 8 rails
                continue
            missing = [n for n in order if n != node and n not in peers]
            why = f"no pair with {_listed(missing)} ({len(missing)} of its {len(order) - 1} scheduled pairs)"
            out._add([node], [rail], why)
    return out
