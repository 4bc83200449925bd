"""Inline SVG plots for the HTML report: per-GPU values against the baseline, the P2P matrix, NCCL bus bandwidth.

Pure: numbers in, SVG text out. Hand-written SVG keeps report.html self-contained and small at fleet scale
(one short <circle> per GPU) with no plotting library in the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from html import escape
from typing import NamedTuple

__all__ = ["LABELLED", "Columns", "Point", "heatmap", "lines", "strip", "strip_columns"]

W, H, L, R, T, B = 900, 230, 70, 20, 30, 40  # size and margins
LABEL_CHAR_PX = 6.6  # the width of a character of the 11-unit sans-serif labels, in viewBox units (about 0.6 em)
COLORS = {"pass": "#2e86de", "straggler": "#e67e22", "unstable": "#d4ac0d", "fail": "#c0392b", "waived": "#8e44ad"}
LABELLED = 256  # a strip of at most this many points says each point's label on hover; a larger one the flagged only
PALETTE = ("#2e86de", "#8e44ad", "#16a085", "#d35400", "#7f8c8d", "#c0392b", "#27ae60", "#f39c12")


class Point(NamedTuple):
    """One GPU's figure in a strip. A named tuple, not a dataclass: a strip at 1,024 x 8 has 8,192 of them, a
    report a dozen strips, and a strip reads them by column (`zip(*points)`)."""

    label: str
    value: float
    status: str  # pass | straggler | unstable | fail | waived


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _svg(body: list[str], title: str, height: int = H, width: int = W, kind: str = "") -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gpucert-plot{kind}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img">'
        f"<title>{escape(title)}</title>"
        f'<text x="{L}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>' + "".join(body) + "</svg>"
    )


class Columns(NamedTuple):
    """A strip's points by column, as a report gathers them (a node's GPUs that all passed at once): each GPU's
    label, figure and status, in fleet order."""

    labels: Sequence[str]
    values: Sequence[float]
    statuses: Sequence[str]


def strip(
    title: str,
    unit: str,
    points: Sequence[Point],
    expected: float,
    limit: float,
    groups: Sequence[tuple[str, int]] = (),
) -> str:
    """Every GPU's value in fleet order, the baseline and its limit as lines; stragglers and failures coloured."""
    if not points:
        return ""
    labels: tuple[str, ...]
    values: tuple[float, ...]
    statuses: tuple[str, ...]
    labels, values, statuses = zip(*points, strict=True)
    return strip_columns(title, unit, Columns(labels, values, statuses), expected, limit, groups)


def strip_columns(
    title: str,
    unit: str,
    points: Columns,
    expected: float,
    limit: float,
    groups: Sequence[tuple[str, int]] = (),
) -> str:
    """`strip` of the points by column."""
    labels, values, statuses = points
    if not values:
        return ""
    lo, hi = min([*values, limit]) * 0.97, max([*values, expected]) * 1.02
    span = hi - lo or 1.0

    def y(v: float) -> float:
        return T + (H - T - B) * (1 - (v - lo) / span)

    step = (W - L - R) / max(len(values), 1)
    body = [f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H - B}" stroke="#999"/>']
    for v in (lo, (lo + hi) / 2, hi):
        body.append(f'<text x="{L - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    body.append(
        f'<text x="12" y="{(T + H - B) / 2:.0f}" transform="rotate(-90 12 {(T + H - B) / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    start, free = 0, float(L)  # a node's name is written only where it does not run into the last one written
    if len(groups) <= 64:
        for name, count in groups:
            x = L + start * step
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{T}" y2="{H - B}" stroke="#eee"/>')
            if x + 2 >= free:
                body.append(f'<text x="{x + 2:.1f}" y="{H - B + 14}" fill="#666">{escape(name)}</text>')
                free = x + 2 + LABEL_CHAR_PX * len(name) + 6
            start += count
    for v, label, color in ((expected, "baseline", "#555"), (limit, "limit", "#c0392b")):
        body.append(
            f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="{color}" '
            f'stroke-dasharray="5,4"/><text x="{W - R}" y="{y(v) - 3:.1f}" text-anchor="end" '
            f'fill="{color}">{label} {_fmt(v)}</text>'
        )
    body += _circles(labels, values, statuses, lo, span, escape(unit))
    n_bad = len(statuses) - statuses.count("pass")
    body.append(
        f'<text x="{L}" y="{H - 8}" fill="#444">{len(values)} GPUs; {n_bad} flagged '
        "(orange: straggler, yellow: unstable, red: below the baseline limit, purple: waived; hover a point for "
        "its GPU)</text>"
    )
    return _svg(body, title, kind=" gpucert-strip")


@lru_cache(maxsize=4)  # a report has a strip size per pool; a strip of 4,096 x 8 holds 32,768 of them
def _centres(n: int) -> tuple[str, ...]:
    """The x of each of n points of a strip, as written: every strip of a fleet's GPUs has as many points."""
    step = (W - L - R) / max(n, 1)
    return tuple([f"{L + (i + 0.5) * step:.1f}" for i in range(n)])


def _circles(
    labels: Sequence[str], values: Sequence[float], statuses: Sequence[str], lo: float, span: float, unit: str
) -> list[str]:
    """A strip's points: each status's radius, colour and class once, y(v) written out, the GPU and figure said on
    hover for every point of a strip of at most LABELLED points, else for the flagged only."""
    radius = 3.5 if len(values) <= LABELLED else 1.6
    tail = {
        s: f'" r="{radius * (1.6 if s != "pass" else 1):.1f}" fill="{c}" class="pt-{s}">' for s, c in COLORS.items()
    }
    height, centres = H - T - B, _centres(len(values))
    if len(values) <= LABELLED:
        return [
            f'<circle cx="{cx}" cy="{T + height * (1 - (v - lo) / span):.1f}{tail[s]}'
            f"<title>{escape(label)}: {_fmt(v)} {unit}</title></circle>"
            for cx, label, v, s in zip(centres, labels, values, statuses, strict=True)
        ]
    circles = [
        f'<circle cx="{cx}" cy="{T + height * (1 - (v - lo) / span):.1f}{tail[s]}</circle>'
        for cx, v, s in zip(centres, values, statuses, strict=True)
    ]
    for i in [i for i, s in enumerate(statuses) if s != "pass"]:  # the flagged: a few of a fleet's points
        said = f"<title>{escape(labels[i])}: {_fmt(values[i])} {unit}</title>"
        circles[i] = circles[i].removesuffix("</circle>") + f"{said}</circle>"
    return circles


def heatmap(title: str, unit: str, matrix: Sequence[Sequence[float | None]], expected: float) -> str:
    """A GPU x GPU matrix (rows: source, columns: destination); colour by the fraction of the baseline."""
    n = len(matrix)
    cell = min(44, 300 // max(n, 1))
    size = L + n * cell + 160
    height = T + 20 + n * cell + 30
    body = []
    for i, row in enumerate(matrix):
        body.append(f'<text x="{L - 6}" y="{T + 20 + i * cell + cell / 2 + 4:.0f}" text-anchor="end">gpu{i}</text>')
        body.append(f'<text x="{L + i * cell + cell / 2:.0f}" y="{T + 14}" text-anchor="middle">{i}</text>')
        for j, v in enumerate(row):
            x, yy = L + j * cell, T + 20 + i * cell
            if v is None:
                body.append(f'<rect x="{x}" y="{yy}" width="{cell}" height="{cell}" fill="#ddd"/>')
                continue
            frac = max(0.0, min(1.0, v / expected))
            red = int(255 * (1 - frac) * 2) if frac < 1 else 0
            color = f"rgb({min(255, 40 + red)},{int(80 + 120 * frac)},{int(90 + 60 * frac)})"
            body.append(
                f'<rect x="{x}" y="{yy}" width="{cell}" height="{cell}" fill="{color}" stroke="#fff">'
                f"<title>gpu{i} to gpu{j}: {_fmt(v)} {escape(unit)}</title></rect>"
            )
            if cell >= 30:
                body.append(
                    f'<text x="{x + cell / 2:.0f}" y="{yy + cell / 2 + 4:.0f}" text-anchor="middle" '
                    f'fill="#fff" font-size="9">{v:.0f}</text>'
                )
    body.append(f'<text x="{L + n * cell + 10}" y="{T + 34}">{escape(unit)}, median per pair</text>')
    body.append(f'<text x="{L + n * cell + 10}" y="{T + 50}">baseline {_fmt(expected)}</text>')
    return _svg(body, title, height=height, width=size)


def lines(
    title: str, unit: str, series: Sequence[tuple[str, Sequence[tuple[int, float]]]], expected: float | None = None
) -> str:
    """Bus bandwidth against message size (log2 x axis), one line per series."""
    pts = [p for _, s in series for p in s]
    if not pts:
        return ""
    xs = sorted({x for x, _ in pts})
    ymax = max([v for _, v in pts] + ([expected] if expected else [])) * 1.08
    lo_x, hi_x = xs[0].bit_length(), xs[-1].bit_length()

    def px(size: int) -> float:
        return L + (W - L - 170) * ((size.bit_length() - lo_x) / max(hi_x - lo_x, 1))

    def py(v: float) -> float:
        return T + (H - T - B) * (1 - v / ymax)

    body = [
        f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H - B}" stroke="#999"/>',
        f'<line x1="{L}" x2="{W - 170}" y1="{H - B}" y2="{H - B}" stroke="#999"/>',
    ]
    for v in (0.0, ymax / 2, ymax):
        body.append(f'<text x="{L - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    for size in xs:
        label = f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} B"
        body.append(f'<text x="{px(size):.1f}" y="{H - B + 14}" text-anchor="middle">{label}</text>')
    if expected:
        body.append(
            f'<line x1="{L}" x2="{W - 170}" y1="{py(expected):.1f}" y2="{py(expected):.1f}" stroke="#555" '
            f'stroke-dasharray="5,4"/><text x="{W - 172}" y="{py(expected) - 3:.1f}" text-anchor="end">'
            f"baseline {_fmt(expected)} {escape(unit)}</text>"
        )
    for k, (name, s) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        path = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in sorted(s))
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        body.append(f'<text x="{W - 160}" y="{T + 14 + 14 * k}" fill="{color}">{escape(name)}</text>')
    return _svg(body, title)
