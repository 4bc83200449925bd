"""The comparisons a PeerIndex (rules/stragglers.py) cannot make for too few peers, as the verdict's `undecided`
names them: a pass must never be silent on a comparison that was not made. Pure: the index in, Undecided out."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpucert.evaluate.rules.stragglers_told import MIN_PEERS

__all__ = ["COMPARISONS", "NODE_LEVEL", "NODE_PEERS", "STABILITY", "WITH_FLEET", "Undecided", "undecided_of"]

# the comparisons a peer rule makes, as the verdict's `undecided` names them
NODE_PEERS, WITH_FLEET, NODE_LEVEL, STABILITY = (
    "against its node's peers",
    "against the fleet",
    "node as a whole",
    "stability",
)
COMPARISONS = (NODE_PEERS, WITH_FLEET, NODE_LEVEL, STABILITY)


class _Index(Protocol):
    """What of a PeerIndex the undecided comparisons read."""

    @property
    def metric(self) -> str: ...
    @property
    def per_gpu(self) -> bool: ...
    @property
    def pools(self) -> Mapping[str, Sequence[tuple[str, int | None]]]: ...
    @property
    def by_node(self) -> Mapping[str, Sequence[tuple[str, int | None]]]: ...


@dataclass(frozen=True, slots=True)
class Undecided:
    """A comparison that was not made: too few peers for its rule."""

    metric: str
    comparison: str  # one of COMPARISONS
    where: tuple[str, ...]
    why: str

    def to_json(self) -> dict[str, object]:
        return {"metric": self.metric, "comparison": self.comparison, "where": list(self.where), "why": self.why}


def undecided_of(index: _Index, *, stability: bool) -> list[Undecided]:
    """The comparisons `index` cannot make for too few peers, grouped by reason."""
    out: list[Undecided] = []
    few: dict[int, list[str]] = defaultdict(list)
    for node, keys in index.by_node.items():
        if index.per_gpu and len(keys) - 1 < MIN_PEERS:
            few[len(keys) - 1].append(node)
    for n, nodes in sorted(few.items()):
        out.append(
            Undecided(
                index.metric,
                NODE_PEERS,
                tuple(sorted(nodes)),
                f"{n} other GPU(s) on the node: a GPU is compared with its node's peers from {MIN_PEERS}",
            )
        )
    for pool, keys in sorted(index.pools.items()):
        what = "GPUs" if index.per_gpu else "nodes"
        if len(keys) - 1 < MIN_PEERS:
            why = f"{len(keys)} {what} in the {pool}: a figure is compared with the {pool}'s from {MIN_PEERS + 1}"
            out.append(Undecided(index.metric, WITH_FLEET, (pool,), why))
            if stability:
                out.append(Undecided(index.metric, STABILITY, (pool,), why))
        nodes = sorted({k[0] for k in keys})
        if index.per_gpu and len(nodes) - 1 < MIN_PEERS:
            why = f"{len(nodes)} node(s) in the {pool}: a node is compared with the others from {MIN_PEERS + 1}"
            out.append(Undecided(index.metric, NODE_LEVEL, (pool,), why))
    return out
