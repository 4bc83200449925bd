"""The fabric part of report.html, for each pool that declares a fabric: a rail x node matrix coloured by the worst
status of the rail's checks, a pair-bandwidth heatmap per rail, and the error counters that grew, with their
deltas and rates. Reads the run through the Evaluation and the checks' outcomes, after every check has run.

Hand-written HTML and SVG, like report/plots.py: report.html stays self-contained. A pool of more than
MAX_HEATMAP_NODES nodes gets no heatmap (a 1,024 x 1,024 matrix per rail says nothing at a glance): its slow
pairs are in the findings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape
from typing import TYPE_CHECKING

from gpucert.evaluate.rules.fabric_checks import FabricView, fabric_view
from gpucert.evaluate.rules.fabric_ports import rail_port
from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.plan.fabric_checks import NODE_RAIL_CHECKS, rail_detail

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation
    from gpucert.report.verdict import Outcome

__all__ = ["MAX_HEATMAP_NODES", "fabric_section", "pair_matrix", "rail_matrix"]

MAX_HEATMAP_NODES = 64
STATUS_COLOURS = {"pass": "#27ae60", "fail": "#c0392b", "error": "#b9770e", "skip": "#95a5a6", "waived": "#8e44ad"}
WORST = ("fail", "error", "waived", "skip", "pass")
CELL = 12
LABEL = "color:#222;background:#f4f4f4;white-space:nowrap"  # a label cell: dark on light, on one line
ON_TOP, AT_LEFT = "position:sticky;top:0;z-index:1", "position:sticky;left:0;text-align:left"


def _natural(name: str) -> list[int | str]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _worst(statuses: list[str]) -> str | None:
    return min(statuses, key=WORST.index) if statuses else None


def rail_matrix(view: FabricView, outcomes: Mapping[CheckKey, Outcome], nodes: list[str]) -> str:
    """Rails across, nodes down. Its labels are dark on light (the cells' text is white on their colour), and
    at any number of nodes they stay in view: the table scrolls in its own box with the rail header and the node
    column fixed (sticky). Past MAX_HEATMAP_NODES nodes a cell holds its colour alone (its status is its title)."""
    rails = range(view.spec.rails.count)
    compact = len(nodes) > MAX_HEATMAP_NODES
    head = "".join(f"<th style='{LABEL};{ON_TOP}'>rail {r}</th>" for r in rails)
    rows = []
    for node in nodes:
        cells = []
        for r in rails:
            found = {
                c: o.finding
                for c in NODE_RAIL_CHECKS
                if (o := outcomes.get(CheckKey(c, node, None, rail_detail(r)))) is not None
            }
            worst = _worst([f.status.value for f in found.values()])
            tip = "; ".join(f"{c.removeprefix('fabric.')}: {f.status.value}" for c, f in found.items())
            bad = [f.message for f in found.values() if f.status in (CheckStatus.FAIL, CheckStatus.ERROR)]
            colour = STATUS_COLOURS.get(worst or "", "#ddd")
            title = escape(f"{node} rail {r}: " + tip + ("\n" + "\n".join(bad) if bad else ""))
            text = "" if compact else worst or "-"
            cells.append(f"<td title='{title}' style='background:{colour};min-width:2em'>{text}</td>")
        rows.append(f"<tr><th style='{LABEL};{AT_LEFT}'>{escape(node)}</th>{''.join(cells)}</tr>")
    corner = f"<th style='{LABEL};{ON_TOP};{AT_LEFT};z-index:2'>node</th>"
    return (
        "<div class='gpucert-rails-box' style='max-height:80vh;overflow:auto;display:inline-block'>"
        "<table class='gpucert-rails' border='1' cellpadding='3' style='border-collapse:collapse;color:#fff'>"
        f"<thead><tr>{corner}{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def pair_matrix(view: FabricView, rail: int, nodes: list[str]) -> list[list[float | None]]:
    """Each pair's median RDMA bandwidth on `rail` (Gb/s), symmetric, None where the pair has no figure."""
    index = {n: i for i, n in enumerate(nodes)}
    m: list[list[float | None]] = [[None] * len(nodes) for _ in nodes]
    for p in view.rail(rail).pairs:
        if p.a in index and p.b in index:
            m[index[p.a]][index[p.b]] = m[index[p.b]][index[p.a]] = p.gbps
    return m


def _heatmap(title: str, nodes: list[str], m: list[list[float | None]], limit: float) -> str:
    left, top = 110, 30
    size = left + CELL * len(nodes) + 10
    body = [f'<text x="4" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']
    for i, node in enumerate(nodes):
        body.append(f'<text x="{left - 4}" y="{top + i * CELL + CELL - 2}" text-anchor="end">{escape(node)}</text>')
        for j, v in enumerate(m[i]):
            x, y = left + j * CELL, top + i * CELL
            colour = "#eee" if v is None else "#c0392b" if v < limit else "#27ae60"
            tip = f"{nodes[i]} + {nodes[j]}: " + ("no figure" if v is None else f"{v:.4g} Gb/s")
            body.append(
                f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{colour}" stroke="#fff">'
                f"<title>{escape(tip)}</title></rect>"
            )
    height = top + CELL * len(nodes) + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gpucert-pairs" width="{size}" height="{height}" '
        f'font-family="sans-serif" font-size="9" role="img"><title>{escape(title)}</title>{"".join(body)}</svg>'
    )


def _counters(view: FabricView, nodes: list[str]) -> str:
    limits = view.spec.counter_limits()
    rows = []
    for node in nodes:
        nf = view.node(node)
        window = nf.counters if nf is not None else None
        seconds = window.seconds() if window is not None else None
        if nf is None or window is None or not seconds:
            continue
        for r in range(view.spec.rails.count):
            port = rail_port(nf, view.spec, r)
            deltas = window.deltas(port.key) if port is not None else {}
            for name, delta in deltas.items():
                if name in limits and delta:
                    rows.append(
                        f"<tr><td>{escape(node)}</td><td>{r}</td><td>{escape(port.key if port else '')}</td>"
                        f"<td>{escape(name)}</td><td>{delta}</td><td>{delta / seconds * 3600:.4g}</td>"
                        f"<td>{seconds:.0f}</td></tr>"
                    )
    if not rows:
        return "<p>No limited error counter grew on any rail while the fabric was loaded.</p>"
    return (
        "<table class='gpucert-counters' border='1' cellpadding='3' style='border-collapse:collapse'><thead><tr>"
        "<th>node</th><th>rail</th><th>port</th><th>counter</th><th>delta</th><th>per hour</th><th>window (s)</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def fabric_section(ev: Evaluation, outcomes: Mapping[CheckKey, Outcome]) -> str:
    """The fabric of every pool that declares one ('' when none does, or nothing was measured)."""
    if not ev.measured:
        return ""
    out = []
    for pool in ev.spec.pools:
        if pool.fabric is None:
            continue
        view = fabric_view(ev, pool)
        nodes = sorted(view.members, key=_natural)  # gpu-node-2 before gpu-node-10
        if not nodes:
            continue
        out.append(f"<h3>Fabric of pool {escape(pool.name)}: rails x nodes</h3>{rail_matrix(view, outcomes, nodes)}")
        if len(nodes) <= MAX_HEATMAP_NODES:
            limit = view.spec.rdma_expected().limit
            maps = [
                _heatmap(
                    f"RDMA write, rail {r} (red: below {limit:.4g} Gb/s)", nodes, pair_matrix(view, r, nodes), limit
                )
                for r in range(view.spec.rails.count)
            ]
            out.append("<div style='display:flex;flex-wrap:wrap;gap:8px'>" + "".join(maps) + "</div>")
        else:
            out.append(
                f"<p>{len(nodes)} nodes: no pair heatmap above {MAX_HEATMAP_NODES}; slow pairs are findings.</p>"
            )
        out.append(f"<h4>Error counters that grew under load</h4>{_counters(view, nodes)}")
    return f"<div id='gpucert-fabric'>{''.join(out)}</div>" if out else ""
