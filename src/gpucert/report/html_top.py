"""The top of report.html, what a buyer reads in ten seconds: which nodes and GPUs failed, which check, and why
(the verdict's findings, each GPU with its serial), and the layout that puts the verdict above pytest-html's
environment block. Pure: verdict and evidence in, HTML out."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from gpucert.report.attest import PRIVATE_KEY, PUBLIC_KEY
from gpucert.report.verdict_model import Verdict, VerdictFinding

__all__ = ["LAYOUT", "failures_table", "measurement_window", "signature_hint"]

FAILURES_LISTED = 200  # the rest are in pytest-html's results table below

# pytest-html (4.x index.jinja2) puts its Environment table above the summary, where this report's verdict belongs:
# the page becomes a flex column and the environment moves below the results table (the order property moves
# boxes only: the DOM, and so pytest-html's JavaScript, is untouched)
LAYOUT = (
    "<style>body{display:flex;flex-direction:column}body>*{order:1}"
    "#environment-header,#environment{order:3}#results-table{order:2}footer{order:4}"
    ".summary__data{flex:1 1 auto}#gpucert-plots svg.gpucert-strip{width:100%;height:auto}</style>"
)

STATUS_COLOURS = {"fail": "#c0392b", "error": "#c0392b", "waived": "#8e44ad"}


def failures_table(verdict: Verdict, serial: Callable[[str, int], str | None], order: Any) -> str:
    """Every failed and errored finding (waived ones after them): node, GPU and its serial, check, why."""
    findings, waived = verdict.failures(), verdict.waived()
    if not findings and not waived:
        return ""

    def key(f: VerdictFinding) -> tuple[Any, int, str]:
        return order(f.node or ""), -1 if f.gpu is None else f.gpu, f.check

    rows = []
    listed = sorted(findings, key=key) + sorted(waived, key=key)
    for f in listed[:FAILURES_LISTED]:
        board = ""
        if f.gpu is not None:
            s = serial(str(f.node), f.gpu)
            board = f"gpu{f.gpu}" + (f" (serial {s})" if s else "")
        colour = STATUS_COLOURS.get(f.status, "#c0392b")
        rows.append(
            f"<tr><td style='white-space:nowrap'>{escape(f.node or 'the fleet')}</td>"
            f"<td>{escape(board or 'the node')}</td>"
            f"<td><code>{escape(f.check)}</code></td>"
            f"<td style='color:{colour};font-weight:bold'>{escape(f.status.upper())}</td>"
            f"<td>{escape(f.message or '')}</td></tr>"
        )
    more = len(listed) - FAILURES_LISTED
    tail = f"<p>{more} more in the results table below.</p>" if more > 0 else ""
    return (
        f"<h3>What failed: {len(findings)} finding{'s' if len(findings) != 1 else ''}"
        + (f", {len(waived)} waived" if waived else "")
        + "</h3><table id='gpucert-failures' border='1' cellpadding='4' style='border-collapse:collapse;"
        "color:#222'><thead><tr><th>node</th><th>GPU</th><th>check</th><th>result</th><th>why</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>{tail}"
    )


def signature_hint(run: str, signer: str | None) -> str:
    """How to sign and verify, naming the files `gpucert keygen DIR` writes."""
    verify = f"gpucert verify {run} --key KEYS/{PUBLIC_KEY}"
    if signer:
        return (
            f"<p id='gpucert-signer'>Signed with key <code>{escape(signer)}</code>. Verify: <code>{escape(verify)}"
            f"</code> (KEYS: the folder <code>gpucert keygen</code> wrote the key pair into).</p>"
        )
    return (
        f"<p id='gpucert-signer'>Not signed by this run. Sign: <code>gpucert keygen KEYS</code> (writes "
        f"<code>KEYS/{PRIVATE_KEY}</code> and <code>KEYS/{PUBLIC_KEY}</code>), then <code>gpucert sign "
        f"{escape(run)} --key KEYS/{PRIVATE_KEY}</code>; verify: <code>{escape(verify)}</code></p>"
    )


def measurement_window(times: list[tuple[str, str]]) -> str:
    """The run's measurement time, from the evidence's own start and finish times (ISO 8601, UTC)."""
    from datetime import datetime

    if not times:
        return "nothing measured"
    start, end = min(t[0] for t in times), max(t[1] for t in times)
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return f"measured from {start} to {end}"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    took = f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
    return f"measured in {took} ({start} to {end})"
