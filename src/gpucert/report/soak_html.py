"""The soak's report (`soak/report.html`, self-contained): per pool and metric the round medians of every GPU over
the soak's hours (each a faint line, the GPUs a finding about that chart's metric names drawn over them in red,
named in the chart's legend), the same for the load's
temperature and the clock-throttle fraction, the all-reduce across nodes round by round (red where it failed),
and each node's clean hours against the duration.

Pure: the rounds' summaries in (as `soak/rounds/<n>/summary.json` holds them), HTML out. Hand-written SVG, as the
certification's report (report/plots.py): no plotting library, small at fleet scale.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from typing import Any

__all__ = ["SoakSeries", "render_soak_report"]

W, H, L, R, T, B = 900, 220, 70, 20, 30, 36
ACROSS, MULTINODE = "all-reduce across nodes", "nccl.all_reduce.multinode"
FAINT, FLAGGED = "#2e86de", "#c0392b"

Key = tuple[str, int | None]  # (node, gpu)


@dataclass
class SoakSeries:
    """Every plotted series, gathered round by round: (pool, what) -> (node, gpu) -> [(hour, value)]."""

    series: dict[tuple[str, str], dict[Key, list[tuple[float, float]]]] = field(default_factory=dict)

    def _add(self, pool: str, what: str, key: Key, hour: float, value: float | None) -> None:
        if value is not None:
            self.series.setdefault((pool, what), {}).setdefault(key, []).append((hour, value))

    def add_round(self, summary: dict[str, Any], pools: dict[str, str | None]) -> None:
        for node, r in summary["nodes"].items():
            pool = pools.get(node) or "?"
            hour = float(r["endH"])
            for g in r["gpus"]:
                key = (node, int(g["index"]))
                for metric, value in g["medians"].items():
                    self._add(pool, metric, key, hour, float(value))
                self._add(pool, TEMPERATURE, key, hour, g["temperatureC"])
                loaded = float(g["loadedS"])
                held = sum(int(ns) for ns in g["throttleNs"].values()) / 1e9
                self._add(pool, THROTTLED, key, hour, held / loaded if loaded else None)
            for metric, value in r["nodeMedians"].items():
                self._add(pool, metric, (node, None), hour, float(value))
        fabric = summary.get("fabric")
        if fabric is not None:  # the all-reduce across nodes: one line (each pool's, where each has one)
            for ring, doc in _rings(fabric).items():
                f = doc["round"]
                self._add(ring or ACROSS, MULTINODE, (ACROSS, None), float(f["endH"]), f["median"])


def _rings(fabric: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The round's (or the result's) all-reduce across nodes by pool ("": the spec's one)."""
    rings: dict[str, dict[str, Any]] = fabric.get("pools", {"": fabric})
    return rings


TEMPERATURE, THROTTLED = "temperature (°C)", "throttled fraction of the loaded time"
# the charts a criterion's finding is about (soak.drift.<metric> and soak.baseline.<metric>: that metric's); the
# others (XID, ECC, row remapping, restarts, DCGM, a round not measured) are about no plotted value
CHART_OF = {"soak.temperature": TEMPERATURE, "soak.throttle": THROTTLED}


def _chart_of(check: str) -> str | None:
    for prefix in ("soak.drift.", "soak.baseline."):
        if check.startswith(prefix):
            return check[len(prefix) :]
    return CHART_OF.get(check)


def _name(key: Key) -> str:
    return key[0] + ("" if key[1] is None else f"/gpu{key[1]}")


def _legend(lines: dict[Key, list[tuple[float, float]]], flagged: set[Key]) -> str:
    """What red is on this chart, naming its flagged GPUs (text only: the lines are the chart's)."""
    red = sorted((k for k in lines if k in flagged), key=_name)
    named = ", ".join(_name(k) for k in red[:6]) + (f" and {len(red) - 6} more" if len(red) > 6 else "")
    faint = f'<tspan fill="{FAINT}">faint: {len(lines) - len(red)} clean</tspan>'
    flagged_text = (
        f'; <tspan fill="{FLAGGED}">red: a finding on this metric: {escape(named)}</tspan>'
        if red
        else "; no finding on this metric"
    )
    return f'<text x="{W - R}" y="18" text-anchor="end">{faint}{flagged_text}</text>'


def _lines(title: str, lines: dict[Key, list[tuple[float, float]]], flagged: set[Key], hours: float) -> str:
    """One chart; `flagged`: the series a finding about this chart's metric names."""
    values = [v for pts in lines.values() for _, v in pts]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad

    def x(h: float) -> float:
        return L + (W - L - R) * h / (hours or 1.0)

    def y(v: float) -> float:
        return T + (H - T - B) * (1 - (v - lo) / (hi - lo))

    body = [
        f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H - B}" stroke="#999"/>',
        f'<line x1="{L}" x2="{W - R}" y1="{H - B}" y2="{H - B}" stroke="#999"/>',
        f'<text x="{L - 6}" y="{y(hi - pad):.1f}" text-anchor="end">{hi - pad:.4g}</text>',
        f'<text x="{L - 6}" y="{y(lo + pad):.1f}" text-anchor="end">{lo + pad:.4g}</text>',
        f'<text x="{W - R}" y="{H - 12}" text-anchor="end">{hours:g} h</text>',
        f'<text x="{L}" y="{H - 12}">0 h</text>',
    ]
    ordered = sorted(lines.items(), key=lambda kv: kv[0] in flagged)  # the flagged ones drawn last, over the rest
    for key, pts in ordered:
        path = " ".join(f"{x(h):.1f},{y(v):.1f}" for h, v in pts)
        if key in flagged:
            name = _name(key)
            body.append(
                f'<polyline points="{path}" fill="none" stroke="{FLAGGED}" stroke-width="2">'
                f"<title>{escape(name)}</title></polyline>"
            )
        else:
            body.append(f'<polyline points="{path}" fill="none" stroke="{FAINT}" stroke-opacity="0.15"/>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'font-family="sans-serif" font-size="11" role="img"><title>{escape(title)}</title>'
        f'<text x="{L}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>'
        + _legend(lines, flagged)
        + "".join(body)
        + "</svg>"
    )


def _clean_hours(nodes: dict[str, dict[str, Any]]) -> str:
    rows = []
    for node, v in nodes.items():
        need = float(v["requiredHours"]) or 1.0
        width = 300 * min(float(v["cleanHours"]) / need, 1.0)
        colour = {"pass": "#27ae60", "fail": FLAGGED}.get(v["result"], "#d4ac0d")
        rows.append(
            f"<tr><td>{escape(node)}</td><td>{escape(str(v['pool']))}</td><td>{escape(v['result'].upper())}</td>"
            f'<td><svg width="310" height="12"><rect width="{width:.1f}" height="12" fill="{colour}"/></svg> '
            f"{float(v['cleanHours']):g} / {need:g} h</td>"
            f"<td>{escape('; '.join(f['message'] for f in v['findings']))}</td></tr>"
        )
    return (
        "<h2>Clean hours per node</h2><table><tr><th>node</th><th>pool</th><th>result</th><th>clean hours</th>"
        "<th>why it left</th></tr>" + "".join(rows) + "</table>"
    )


def _fabric_table(fabric: dict[str, Any] | None) -> str:
    """The all-reduce across nodes: its result, rounds, and why it left the soak."""
    if fabric is None:
        return ""
    rows = "".join(
        f"<tr><td>{escape(ring or 'all nodes')}</td><td>{escape(str(doc['result']).upper())}</td>"
        f"<td>{doc['rounds']}</td><td>{'' if doc['leftRound'] is None else doc['leftRound']}</td>"
        f"<td>{escape('; '.join(f['message'] for f in doc['findings']))}</td></tr>"
        for ring, doc in _rings(fabric).items()
    )
    return (
        "<h2>All-reduce across nodes</h2><table><tr><th>pool</th><th>result</th><th>rounds</th><th>left at round"
        "</th><th>why it left</th></tr>" + rows + "</table>"
    )


def render_soak_report(
    *,
    run: str,
    spec: str,
    result: str,
    hours: float,
    nodes: dict[str, dict[str, Any]],
    series: SoakSeries,
    fabric: dict[str, Any] | None = None,
) -> str:
    """The report's HTML (`fabric`: the soak's all-reduce across nodes, FabricSoak.result's row)."""
    flagged: dict[str, set[Key]] = {}  # chart (metric) -> the series a finding about it names
    for n, v in nodes.items():
        for f in v["findings"]:
            chart = _chart_of(str(f.get("check", "")))
            if chart is not None:
                flagged.setdefault(chart, set()).add((n, f.get("gpu")))
    rings = _rings(fabric) if fabric is not None else {}
    failed = {ring or ACROSS for ring, doc in rings.items() if doc["leftRound"] is not None}

    def title(pool: str, what: str) -> str:
        return f"{what}, {ACROSS}" if pool == ACROSS else f"{what}, pool {pool}"

    plots: Iterable[str] = (
        _lines(
            title(pool, what), lines, flagged.get(what, set()) | ({(ACROSS, None)} if pool in failed else set()), hours
        )
        for (pool, what), lines in sorted(series.series.items())
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>gpucert soak {escape(run)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}</style>"
        f"</head><body><h1>Soak {escape(run)}: {escape(result.upper())}</h1>"
        f"<p>spec {escape(spec)}, {hours:g} hours; each GPU a faint line; red on a chart: the GPUs a finding "
        "about that chart's metric names (its drift or baseline, the temperature, the throttle), listed in the "
        "chart's legend. Findings about no plotted value (XID, ECC, row remapping, restarts, DCGM) are in the "
        "table.</p>"
        + _clean_hours(nodes)
        + _fabric_table(fabric)
        + "<h2>Round medians over the soak</h2>"
        + "".join(p for p in plots if p)
        + "</body></html>"
    )
