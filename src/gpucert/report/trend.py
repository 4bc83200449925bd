"""The node's trend in a recertification's report.html: its performance index (evaluate/index.py) at each earlier
signed run the recertification was given (inputs/history.json, verified when the run was prepared and signed with
it) and in this run, each board held to its handover figure (else the SKU's)."""

from __future__ import annotations

from html import escape

from gpucert.errors import GpucertError
from gpucert.evaluate.index import WITHIN, IndexSummary, entry_indices, handover_figures, summarize
from gpucert.evaluate.view import RunView
from gpucert.fleet.index_metrics import node_index
from gpucert.plan.checks import GPU_METRICS

__all__ = ["node_trend"]


def _rows(ev: RunView, node: str) -> list[tuple[str, str, IndexSummary]]:
    sku = {m: x for m in GPU_METRICS if (x := ev.expected(node, m)) is not None}
    snap = ev.history
    earlier = snap.nodes[node].entries if snap is not None and node in snap.nodes else []
    rows = []
    for e in earlier:
        handover = handover_figures(ev.handover, node, {g.index: g.serial for g in e.gpus})
        rows.append((e.run, e.time, summarize(entry_indices(e, handover, sku), [(node, g.index) for g in e.gpus])))
    now = ev.measured_node(node)
    if now is not None:
        expected = [(node, g) for g in range(ev.pools.gpus_per_node(node))] + [(node, g.index) for g in now.gpus]
        rows.append((f"{ev.folder.id} (this run)", "", summarize(node_index(ev, node, now), set(expected))))
    return rows


def node_trend(ev: RunView) -> str:
    """The HTML section (empty for a run that is not a recertification)."""
    recert = ev.recertification
    if recert is None:
        return ""
    node = recert.node
    try:
        rows = _rows(ev, node)
    except (GpucertError, OSError, ValueError) as exc:
        return f"<h2>Trend of {escape(node)}</h2><p id='gpucert-trend'>cannot be shown: {escape(str(exc))}</p>"
    against = "its handover figure" if ev.handover is not None else "the SKU figure (no handover baseline)"
    cells = "".join(
        f"<tr><td>{escape(run)}</td><td>{escape(time)}</td><td>{s.gpus}</td><td>{s.within_share:.1%}</td>"
        f"<td>{s.capacity_lost:.3f}</td><td>{'' if s.worst is None else f'{s.worst:.4f}'}</td></tr>"
        for run, time, s in rows
    )
    return (
        f"<h2>Trend of {escape(node)}</h2><p>Each GPU's figure over {against}; a GPU is as short as its worst "
        "metric and one without figures counts as lost. Earlier runs: the node's signed history given to this "
        "recertification.</p>"
        f"<table id='gpucert-trend'><tr><th>run</th><th>time</th><th>GPUs</th><th>within {WITHIN:.0%}</th>"
        f"<th>capacity lost (GPUs)</th><th>worst index</th></tr>{cells}</table>"
    )
