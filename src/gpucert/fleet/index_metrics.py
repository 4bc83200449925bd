"""The performance index in the exporter (fleet/metrics.py): per GPU and metric the figure of the node's newest run
as the evaluation believes it (RunView.sampled) over the board's handover figure, where that run was held to one
(a recertification's inputs/ copy, same board by serial), else over the SKU figure; and per pool the capacity lost
in GPU-equivalents and the share of GPUs within 2 % (evaluate/index.py).

A GPU the spec expects of a node but without any figure (missing, unmeasured, a node never certified or whose run
cannot be read) counts as lost: the pool's figures never show capacity that nothing measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucert.evaluate.index import WITHIN, GpuIndex, handover_figures, index_of, summarize
from gpucert.evaluate.view import RunView
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import GPU_METRICS

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

__all__ = ["NodeIndex", "index_families", "node_index"]


@dataclass(frozen=True, slots=True)
class NodeIndex:
    node: str
    pool: str
    indices: list[GpuIndex]
    gpus: list[int]  # the GPUs that should have figures


def node_index(view: RunView, node: str, ev: NodeEvidence) -> list[GpuIndex]:
    """Every GPU and metric of the node's evidence in the run with a figure and a reference."""
    handover = handover_figures(view.handover, node, {g.index: g.serial for g in ev.gpus})
    out = []
    for g in ev.gpus:
        for metric in GPU_METRICS:
            sampled = view.sampled(metric, node, g.index)
            got = index_of(
                sampled.value if sampled is not None else None,
                handover.get(g.index, {}).get(metric),
                view.expected(node, metric),
            )
            if got is not None:
                out.append(GpuIndex(node, g.index, metric, got[0], got[1]))
    return out


def index_families(nodes: Iterable[NodeIndex]) -> list[GaugeMetricFamily]:
    # here, not at the top: report.html's trend imports this module for node_index, and every certify paid 45 ms
    from prometheus_client.core import GaugeMetricFamily

    index = GaugeMetricFamily(
        "gpucert_performance_index",
        "The GPU's figure for the metric in the node's newest certification over the board's handover figure, or "
        "over the SKU baseline's figure where that run had no handover figure for this board (1 is as delivered).",
        labels=["node", "gpu", "metric"],
    )
    lost = GaugeMetricFamily(
        "gpucert_pool_capacity_lost_gpus",
        "The pool's capacity lost in GPU-equivalents, by each node's newest certification: each GPU as far short of "
        "its reference as its worst metric (gains offset nothing); a GPU expected without any figure counts as 1.",
        labels=["pool"],
    )
    within = GaugeMetricFamily(
        "gpucert_pool_gpus_within_reference_ratio",
        f"The share of the pool's GPUs within {WITHIN:.0%} of their handover (else SKU) figure on every metric, by "
        "each node's newest certification; a GPU expected without any figure counts as not within.",
        labels=["pool"],
    )
    pools: dict[str, tuple[list[GpuIndex], list[tuple[str, int]]]] = {}
    for n in nodes:
        for i in n.indices:
            index.add_metric([i.node, str(i.gpu), i.metric], i.value)
        got, expected = pools.setdefault(n.pool, ([], []))
        got.extend(n.indices)
        expected.extend((n.node, g) for g in n.gpus)
    for pool, (got, expected) in sorted(pools.items()):
        s = summarize(got, expected)
        lost.add_metric([pool], s.capacity_lost)
        within.add_metric([pool], s.within_share)
    return [index, lost, within]
