"""A short Markdown summary of a verdict, for a CI job to post on a pull request (`summary.md`). Pure."""

from __future__ import annotations

from typing import Any

from gpucert.report.verdict_model import Verdict

__all__ = ["MAX_MESSAGE", "MAX_ROWS", "summary_markdown"]

MAX_ROWS = 50  # findings listed; the count covers the rest
MAX_MESSAGE = 600  # characters of one finding's message
ICONS = {"pass": "✅", "fail": "❌", "incomplete": "⚠️", "error": "⛔", "skip": "⏭️"}


def _cell(text: object) -> str:
    s = str(text if text is not None else "").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    return s if len(s) <= MAX_MESSAGE else s[: MAX_MESSAGE - 1] + "…"


def summary_markdown(verdict: Verdict, gate: dict[str, Any] | None = None) -> str:
    """The result, what was checked, and every failing check with its message."""
    result = verdict.result
    s, c = verdict.summary, verdict.coverage
    kind = "static gate" if verdict.target == "static" else f"{verdict.target} certification"
    lines = [
        f"## {ICONS.get(result, '')} gpucert {kind}: {result.upper()}",
        "",
        f"Spec `{_cell(verdict.spec)}`, run `{_cell(verdict.run)}`: {c.ran} of {c.required} required "
        f"checks ran; {s.passed} passed, {s.failed} failed, {s.errors} errors.",
    ]
    if gate:
        files = ", ".join(f"`{_cell(i['name'])}`" for i in gate.get("inputs", []))
        if files:
            release = gate.get("operatorRelease")
            lines.append(f"Checked: {files}" + (f" (GPU Operator {_cell(release)})" if release else "") + ".")
        base = gate.get("baseRef")
        if base:
            names = ", ".join(f"`{_cell(n)}`" for n in gate.get("baselines", {}))
            lines.append(f"Baselines {names} against `{_cell(base['ref'])}` ({str(base['commit'])[:12]}).")
    if not c.complete:
        lines.append(f"Incomplete: {len(c.missing)} required checks did not run.")
    findings = verdict.findings
    if findings:
        lines += ["", "| | check | message |", "|---|---|---|"]
        for f in findings[:MAX_ROWS]:
            where = (f.node or "") + ("" if f.gpu is None else f"/gpu{f.gpu}")
            check = f"`{_cell(f.check)}`" + (f" {_cell(where)}" if where else "")
            lines.append(f"| {ICONS.get(f.status, '')} {f.status} | {check} | {_cell(f.message)} |")
        if len(findings) > MAX_ROWS:
            lines.append(f"| | | and {len(findings) - MAX_ROWS} more in verdict.json |")
    return "\n".join(lines) + "\n"
