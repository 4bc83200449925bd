"""The acceptance report (`acceptance/<id>/report.html`): one self-contained page a buyer reads before countersigning.

The cluster's verdict, the nodes by status (failed, waived, repaired and passed, passed) with the run and certificate
that cover each, the waivers with their expiry, each node's burn-in (soak run, clean hours held of those required,
its result, its boards), each node's history across the runs, and the runs themselves.
Pure: acceptance.json in, HTML out (no script, no external resource).
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from gpucert.evaluate.index import WITHIN, IndexSummary
from gpucert.report.html import natural_key
from gpucert.report.verdict import node_passed

__all__ = ["render_acceptance"]

COLOURS = {"pass": "#27ae60", "fail": "#c0392b", "incomplete": "#b9770e", "waived": "#8e44ad"}
STATUS_TITLES = (
    ("failed", "Failed", "#c0392b"),
    ("waived", "Passed with a waiver", "#8e44ad"),
    ("repaired", "Repaired and passed", "#2e86de"),
    ("passed", "Passed", "#27ae60"),
)
CSS = """
body{font-family:sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px}
td,th{border:1px solid #bbb;padding:3px 7px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f0f0f0}
code{font-size:12px}
.badge{display:inline-block;padding:4px 14px;border-radius:4px;color:#fff;font-weight:bold;font-size:22px}
.cell-pass{background:#e8f6ee}.cell-fail,.cell-incomplete{background:#fbe9e7}.cell-waived{background:#f3e9f7}
.muted{color:#777}
"""


def _short(digest: str | None) -> str:
    return f"{digest[:19]}..." if digest else "unsigned"


def _evidence(n: dict[str, Any]) -> str:
    carried = n.get("carriedFrom")
    if carried:
        age = carried.get("ageSeconds")
        days = f", {age / 86400:.1f} days old" if isinstance(age, int | float) else ""
        return f"carried from {carried['run']} (measured {carried.get('measured')}{days})"
    return f"measured {n.get('measured') or '?'}"


def _nodes_by_status(record: dict[str, Any]) -> str:
    out = []
    nodes = record["nodes"]
    for status, title, colour in STATUS_TITLES:
        names = sorted((n for n, v in nodes.items() if v["status"] == status), key=natural_key)
        out.append(f"<h3 id='status-{status}' style='color:{colour}'>{title}: {len(names)}</h3>")
        if not names:
            continue
        rows = []
        for name in names:
            v = nodes[name]
            detail = v.get("why") or ", ".join(
                f"{w['check']}" + ("" if w["gpu"] is None else f" gpu{w['gpu']}") + f" ({w['waiver']})"
                for w in v["waived"]
            )
            if status == "repaired":
                detail = "; ".join(
                    f"{h['result']} in {h['run']}: {', '.join(h['failing']) or 'incomplete'}"
                    for h in v["history"][:-1]
                    if not node_passed(h["result"])
                )
            rows.append(
                f"<tr><td>{escape(name)}</td><td>{escape(v['run'])}</td><td><code>{escape(_short(v['certificate']))}"
                f"</code></td><td>{escape(_evidence(v))}</td><td>{escape(detail)}</td></tr>"
            )
        out.append(
            f"<table class='status-{status}'><tr><th>node</th><th>covered by run</th><th>certificate</th>"
            "<th>evidence</th><th>waived, failing, or repaired</th></tr>" + "".join(rows) + "</table>"
        )
    return "".join(out)


def _waivers(record: dict[str, Any]) -> str:
    if not record["waivers"]:
        return "<p>No waiver is in force: every node passed as measured.</p>"
    rows = []
    for w in record["waivers"]:
        sel = w.get("select", {})
        where = (
            f"serial {sel['serial']}"
            if "serial" in sel
            else sel.get("node", "?") + (f"/gpu{sel['gpu']}" if "gpu" in sel else "")
        )
        accepted = w.get("accept")
        accepted = "as is" if accepted == "as-is" else ", ".join(f"{k} {v}" for k, v in (accepted or {}).items())
        state = "in force" if w.get("inForce") else "EXPIRED"
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{escape(str(x))}</td>"
                for x in (
                    f"{w.get('id')} ({w['run']})",
                    w.get("check"),
                    where,
                    accepted,
                    w.get("reason"),
                    w.get("approvedBy"),
                    w.get("expires"),
                    state,
                    ", ".join(w["covers"]),
                )
            )
            + "</tr>"
        )
    return (
        "<table id='waivers'><tr><th>waiver</th><th>check</th><th>where</th><th>accepted</th><th>reason</th>"
        "<th>approved by</th><th>expires</th><th>state</th><th>covers</th></tr>" + "".join(rows) + "</table>"
    )


def _soak(record: dict[str, Any]) -> str:
    """Per node the soak that counts for it: its run, clean hours held of those required, its result, and
    whether it burned in the certified boards."""
    soak = record.get("soak")
    if not soak:
        return "<p id='soak'>No soak was given, and the spec requires none (acceptance.soakHours).</p>"
    required = soak.get("requiredHours")
    need = f"{required:g}" if required is not None else "none required"
    rows = []
    for node in sorted(record["nodes"].keys() | soak["nodes"].keys(), key=natural_key):
        s = soak["nodes"].get(node)
        why = record["nodes"].get(node, {}).get("soak")
        cls = "cell-fail" if why else "cell-pass" if s and s["result"] == "pass" else ""
        cells = (
            (node, s["run"], f"{s['heldHours']:g} of {need}", s["result"], s.get("boardsDiffer") or "the certified")
            if s
            else (node, "none given", f"0 of {need}", "-", "-")
        )
        rows.append(
            f"<tr class='{cls}'>"
            + "".join(f"<td>{escape(str(x))}</td>" for x in cells)
            + f"<td>{escape(why or ('counts' if required is not None else 'not required'))}</td></tr>"
        )
    runs = ", ".join(soak["runs"]) or "none"
    return (
        f"<p>Soak runs given: {escape(runs)}. Clean hours count only on the boards the certification measured.</p>"
        "<table id='soak'><tr><th>node</th><th>soak run</th><th>clean hours held</th><th>soak result</th>"
        "<th>boards</th><th>for acceptance</th></tr>" + "".join(rows) + "</table>"
    )


def _history(record: dict[str, Any]) -> str:
    runs = [r["run"] for r in record["runs"]]
    head = "".join(f"<th>{escape(r)}</th>" for r in runs)
    rows = []
    for name in sorted(record["nodes"], key=natural_key):
        by_run = {h["run"]: h for h in record["nodes"][name]["history"]}
        cells = []
        for r in runs:
            h = by_run.get(r)
            if h is None:
                cells.append("<td class='muted'>-</td>")
                continue
            word = "waived" if h["result"] == "pass" and h["waived"] else h["result"]
            note = " (carried)" if h["carried"] else ""
            why = ", ".join(h["failing"] or h["waived"])
            cells.append(
                f"<td class='cell-{escape(word)}' title='{escape(why)}'>{escape(word.upper())}{note}"
                + (f"<br><span class='muted'>{escape(why)}</span>" if why else "")
                + "</td>"
            )
        rows.append(f"<tr><td>{escape(name)}</td>{''.join(cells)}</tr>")
    return f"<table id='history'><tr><th>node</th>{head}</tr>" + "".join(rows) + "</table>"


def _runs(record: dict[str, Any]) -> str:
    rows = []
    for r in record["runs"]:
        retest = r.get("retest")
        what = r["kind"] + (
            f" of {retest['source']}: {len(retest['measured'])} measured, {len(retest['carried'])} carried"
            if retest
            else ""
        )
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{x}</td>"
                for x in (
                    escape(r["run"]),
                    escape(what),
                    escape(r.get("started") or "?"),
                    escape(str(r.get("target"))),
                    escape(r["result"].upper()),
                    f"<code>{escape(r['certificate'])}</code>",
                    escape(", ".join(r["signers"])),
                )
            )
            + "</tr>"
        )
    return (
        "<table id='runs'><tr><th>run</th><th>kind</th><th>started</th><th>target</th><th>result</th>"
        "<th>certificate</th><th>verified signer</th></tr>" + "".join(rows) + "</table>"
    )


def _index(index: Mapping[str, IndexSummary]) -> str:
    rows = "".join(
        f"<tr><td>{escape(pool)}</td><td>{s.gpus}</td><td>{s.within_share:.1%}</td><td>{s.capacity_lost:.3f}</td>"
        f"<td>{'' if s.worst is None else f'{s.worst:.4f}'}</td></tr>"
        for pool, s in index.items()
    )
    return (
        "<p>Each GPU's figure over the SKU baseline's (over its handover figure where the run that covers the node "
        "held it to one); a GPU is as short as its worst metric, and one the spec expects without figures counts "
        "as lost.</p><table id='acceptance-index'><tr><th>pool</th><th>GPUs</th>"
        f"<th>within {WITHIN:.0%}</th><th>capacity lost (GPUs)</th><th>worst index</th></tr>{rows}</table>"
    )


def render_acceptance(record: dict[str, Any], index: Mapping[str, IndexSummary] | None = None) -> str:
    result = record["result"]
    t = record["totals"]
    simulated = any(r.get("target") == "simulated" for r in record["runs"])
    problems = "".join(f"<li>{escape(p)}</li>" for p in record["problems"])
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>Handover acceptance: {escape(record['spec'])}</title><style>{CSS}</style></head><body>"
        f"<h1>Handover acceptance of {escape(record['spec'])}</h1>"
        f"<p><span id='acceptance-result' class='badge' style='background:{COLOURS.get(result, '#c0392b')}'>"
        f"{escape(result.upper())}</span></p>"
        + (
            "<p style='color:#b9770e;font-weight:bold'>These runs are of a SIMULATED fleet, not real hardware.</p>"
            if simulated
            else ""
        )
        + f"<p id='acceptance-totals'>{t['nodes']} of {t['expected']} nodes covered: {t['passed']} passed, "
        f"{t['repaired']} repaired and passed, {t['waived']} passed with a waiver, {t['failed']} failed.</p>"
        + (f"<ul id='acceptance-problems'>{problems}</ul>" if problems else "")
        + f"<p>Record <code>{escape(record['id'])}</code>, created {escape(record['created'])}. This page and "
        "acceptance.json are signed together (certificate.intoto.json) by the vendor; the buyer countersigns with "
        "<code>gpucert countersign DIR --key BUYER_KEY</code>, and anyone checks both with "
        "<code>gpucert verify DIR --key vendor.pub --key buyer.pub</code>.</p>"
        "<h2>Nodes by status</h2>"
        + _nodes_by_status(record)
        + "<h2>Waivers</h2>"
        + _waivers(record)
        + "<h2>Burn-in (soak)</h2>"
        + _soak(record)
        + ("<h2>Performance index at handover</h2>" + _index(index) if index else "")
        + "<h2>History of each node across the runs</h2>"
        + _history(record)
        + "<h2>Runs</h2>"
        + _runs(record)
        + "</body></html>\n"
    )
