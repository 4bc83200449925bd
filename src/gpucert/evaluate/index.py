"""The fleet performance index: each GPU's figure over the figure it is held to, summarised per node and pool.
Pure (no I/O).

Per GPU and metric the index is the measured figure over the board's handover figure, or over the SKU baseline's
figure where there is no handover figure for this board (every figure gpucert measures is higher-is-better, so 1.0
is "as delivered" and 0.97 is 3 % short). A node's or pool's summary counts the GPUs within 2 % of their reference
on every metric, and the capacity lost in GPU-equivalents: each GPU contributes how far its worst metric is short
(a job bound by that metric runs at that rate), gains above the reference offset nothing, and a GPU expected but
without any figure counts as wholly lost (fail closed: capacity that cannot be shown is not counted as there).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpucert.plan.history_records import HistoryEntry
    from gpucert.spec.handover import NodeBaseline

__all__ = [
    "WITHIN",
    "Against",
    "GpuIndex",
    "IndexSummary",
    "entry_indices",
    "handover_figures",
    "index_of",
    "summarize",
    "summarize_by_node",
]

WITHIN = 0.02  # a GPU within 2 % of its reference on every metric counts as "as delivered"


class Against(StrEnum):
    HANDOVER = "handover"
    SKU = "sku"


@dataclass(frozen=True, slots=True)
class GpuIndex:
    node: str
    gpu: int
    metric: str
    value: float  # figure / reference
    against: Against


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def index_of(figure: float | None, handover: float | None, sku: float | None) -> tuple[float, Against] | None:
    """The figure over its handover figure, else over the SKU figure; None when there is no figure or reference."""
    if figure is None or not _positive(figure):
        return None
    if handover is not None and _positive(handover):
        return figure / handover, Against.HANDOVER
    if sku is not None and _positive(sku):
        return figure / sku, Against.SKU
    return None


@dataclass(frozen=True, slots=True)
class IndexSummary:
    gpus: int  # GPUs counted (those expected, and any with a figure)
    within: int  # GPUs within WITHIN of their reference on every metric they have a figure of
    capacity_lost: float  # GPU-equivalents
    worst: float | None  # the lowest index of any GPU and metric; None when no GPU has a figure

    @property
    def within_share(self) -> float:
        """The fraction of GPUs within 2 %; 0 when there are none to count (nothing shown is nothing delivered)."""
        return self.within / self.gpus if self.gpus else 0.0


def summarize(indices: Iterable[GpuIndex], expected: Iterable[tuple[str, int]] = ()) -> IndexSummary:
    """The summary over `indices`; `expected` names the (node, gpu) that should have figures (each without one
    counts as one GPU-equivalent lost and not within)."""
    worst: dict[tuple[str, int], float] = {}
    for i in indices:
        key = (i.node, i.gpu)
        worst[key] = min(worst.get(key, math.inf), i.value)
    missing = set(expected) - set(worst)
    lost = sum(max(0.0, 1.0 - v) for v in worst.values()) + len(missing)
    return IndexSummary(
        gpus=len(worst) + len(missing),
        within=sum(1 for v in worst.values() if v >= 1.0 - WITHIN),
        capacity_lost=lost,
        worst=min(worst.values()) if worst else None,
    )


def summarize_by_node(indices: Iterable[GpuIndex], expected: Iterable[tuple[str, int]] = ()) -> dict[str, IndexSummary]:
    """One summary per node (of the nodes in `indices` or `expected`), sorted by node name."""
    by_node: dict[str, list[GpuIndex]] = {}
    want: dict[str, list[tuple[str, int]]] = {}
    for i in indices:
        by_node.setdefault(i.node, []).append(i)
    for e in expected:
        want.setdefault(e[0], []).append(e)
    return {n: summarize(by_node.get(n, []), want.get(n, [])) for n in sorted(by_node.keys() | want.keys())}


def handover_figures(
    handover: NodeBaseline | None, node: str, serials: Mapping[int, str | None]
) -> dict[int, dict[str, float]]:
    """Per GPU slot, the handover medians of the board now in it (by serial): none for a swapped board, a board of
    unknown serial, or a handover of another node."""
    if handover is None or handover.node != node:
        return {}
    out = {}
    for gpu, serial in serials.items():
        then = handover.gpu(gpu)
        if then is not None and serial is not None and then.serial == serial:
            out[gpu] = {m: r.median for m, r in then.metrics.items()}
    return out


def entry_indices(
    entry: HistoryEntry, handover: Mapping[int, Mapping[str, float]], sku: Mapping[str, float]
) -> list[GpuIndex]:
    """The index of every GPU and metric of one history entry (`handover` from handover_figures)."""
    out = []
    for g in entry.gpus:
        then = handover.get(g.index, {})
        for metric, fig in sorted(g.metrics.items()):
            got = index_of(fig.median, then.get(metric), sku.get(metric))
            if got is not None:
                out.append(GpuIndex(entry.node, g.index, metric, got[0], got[1]))
    return out
