"""`fabric.rdma_bw`'s evidence held to the schedule that made it: every pair of a pool's measured nodes once per
rail, on the rail's HCA at both ends (plan/pairs.py: a round-robin tournament of the pool's nodes). Pure.

A fabric stage that stopped after some rounds, or a pairs document edited after the run, still reads as figures:
a node with one fast pair on a rail would pass it. So before any figure is judged, each node's pairs on each rail
are counted against the schedule; a missing pair, one measured twice, one with a node of no pool of this fabric or
with itself, one on a rail the pool does not have or on another HCA than the rail's, makes that node's rail an
error naming the pair. Only the pairs that fit (each the first time it is seen) go on to be judged.

A re-test that carried its source's pairs (plan/carried_pairs.py) is held to its own schedule (plan/pairs.py
`retest_rounds`): each carried node to a pair with every other carried node (the source's), each node measured
again to a pair with RETEST_PEERS carried nodes where the pool has them, else with every other node. A pair neither
carried nor measured is missing there as here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from gpucert.plan.pairs import RETEST_PEERS, retest_bounded

__all__ = ["RdmaRecord", "Schedule", "check_schedule"]


class RdmaRecord(Protocol):
    """What the schedule reads of an RDMA record: evidence_fabric.RdmaBandwidth, or the pairs index's row."""

    @property
    def rail(self) -> int: ...
    @property
    def client(self) -> str: ...
    @property
    def server(self) -> str: ...
    @property
    def client_hca(self) -> str: ...
    @property
    def server_hca(self) -> str: ...


R = TypeVar("R", bound=RdmaRecord)

SHOWN = 5  # pairs named in one message before "and N more"


@dataclass
class Schedule(Generic[R]):
    """One pool's RDMA records against its schedule: the records that fit, by rail, and what is wrong, by node and
    rail (a node-rail with problems is an error, whatever its figures say)."""

    kept: dict[int, list[R]] = field(default_factory=dict)
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


def _record_problem(doc: Sequence[str], r: RdmaRecord, pool: str, members: Collection[str], rails: int) -> str | None:
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


def _hca_problem(r: RdmaRecord, hca: Callable[[str, int], str | None]) -> str | None:
    for node, port in ((r.client, r.client_hca), (r.server, r.server_hca)):
        want = hca(node, r.rail)
        if port != want and want is not None:
            return f"{r.client} + {r.server} on rail {r.rail}: {node}'s end is {port}, not the rail's {want}"
    return None


def _inside(client: str, server: str, doc: Sequence[str], inside: Collection[str]) -> list[str]:
    return [n for n in dict.fromkeys((client, server, *doc)) if n in inside]


def check_schedule(
    records: Iterable[tuple[Sequence[str], R]],
    pool: str,
    members: Sequence[str],
    measured: Collection[str],
    rails: int,
    hca: Callable[[str, int], str | None],
    carried: Collection[str] = (),
) -> Schedule[R]:
    """Hold the RDMA records (each with the nodes of the pair document it came from) to the schedule of `pool`:
    every pair of its `measured` nodes once on each of its `rails`. `members`: every node of the pool (a pair with
    an unmeasured member is believed, not required); `hca(node, rail)`: the port key the rail uses on the node
    (None: not known, its fabric.port finding says why). Records naming no node of the pool are another pool's.
    `carried`: a re-test's nodes whose pairs with each other came from its source (its schedule, above)."""
    out: Schedule[R] = Schedule(kept={r: [] for r in range(rails)})
    known: dict[tuple[str, int], str | None] = {}

    def port_of(node: str, rail: int) -> str | None:  # asked twice a record: 8 million times at 1,024 x 8
        key = (node, rail)
        if key not in known:
            known[key] = hca(node, rail)
        return known[key]

    inside = set(members)
    seen: dict[int, dict[str, set[str]]] = {r: {} for r in range(rails)}
    for doc, r in records:
        client, server, rail = r.client, r.server, r.rail
        if client not in inside and server not in inside and not any(n in inside for n in doc):
            continue  # another pool's pair
        fits = client != server and client in inside and server in inside and 0 <= rail < rails
        why = None if fits and {client, server} == set(doc) else _record_problem(doc, r, pool, inside, rails)
        if why is not None:
            out._add(_inside(client, server, doc, inside), [rail] if 0 <= rail < rails else range(rails), why)
            continue
        peers = seen[rail].setdefault(client, set())
        if r.client_hca != port_of(client, rail) or r.server_hca != port_of(server, rail):
            why = _hca_problem(r, port_of)
        if why is None and server in peers:
            why = f"{client} + {server} is measured more than once on rail {rail}"
        if why is not None:
            out._add(_inside(client, server, doc, inside), [rail], why)
            continue
        peers.add(server)
        seen[rail].setdefault(server, set()).add(client)
        out.kept[rail].append(r)
    order = [n for n in members if n in measured]
    kept = [n for n in order if n in carried]
    if retest_bounded(len(order) - len(kept), len(kept)):
        _missing(out, seen, kept)  # the carried nodes among themselves (their pairs with the others: below)
        _too_few(out, seen, [n for n in order if n not in carried], set(kept))
    else:
        _missing(out, seen, order)
    return out


def _missing(out: Schedule[R], seen: dict[int, dict[str, set[str]]], order: list[str]) -> None:
    """Each of the `order` nodes' pairs with each other that are not there, by rail."""
    scheduled = set(order)
    for rail in seen:
        for node in order:
            peers = seen[rail].get(node, set())
            if len(peers & scheduled) == len(order) - 1:  # the common case, in C: 1,024 nodes x 8 rails
                continue
            missing = [n for n in order if n != node and n not in peers]
            why = f"no pair with {_listed(missing)} ({len(missing)} of its {len(order) - 1} scheduled pairs)"
            out._add([node], [rail], why)


def _too_few(out: Schedule[R], seen: dict[int, dict[str, set[str]]], again: list[str], kept: set[str]) -> None:
    """A re-test's nodes measured again with fewer than RETEST_PEERS carried peers on a rail."""
    for rail in seen:
        for node in again:
            have = len(seen[rail].get(node, set()) & kept)
            if have < RETEST_PEERS:
                why = (
                    f"pairs with {have} carried nodes: a re-test pairs each node measured again with "
                    f"{RETEST_PEERS} of them"
                )
                out._add([node], [rail], why)
