"""pytest-html additions: the run's summary (result, per-node verdict table) and compact rows at fleet scale."""

from __future__ import annotations

from html import escape
from typing import Any

from gpucert.checks import Finding
from gpucert.report.verdict import node_summaries

__all__ = ["PASSED_ROWS_LIMIT", "HtmlSummary"]

PASSED_ROWS_LIMIT = 2000  # above this many items, passed rows are counted in the summary, not listed one by one


class HtmlSummary:
    """A pytest plugin object, registered next to pytest-html by gpucert's plugin."""

    def __init__(self, title: str, run_id: str, outcomes: list[Finding], items: list[int]) -> None:
        self.title = title
        self.run_id = run_id
        self.outcomes = outcomes
        self.items = items  # [collected item count], filled at collection

    def pytest_html_report_title(self, report: Any) -> None:
        report.title = self.title

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells.insert(1, '<th class="sortable" data-column-type="check">Check</th>')

    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        if report.passed and self.items and self.items[0] > PASSED_ROWS_LIMIT:
            del cells[:]
            return
        check = getattr(report, "gpucert", {}).get("check", "")
        cells.insert(1, f'<td class="col-check">{escape(check)}</td>')

    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        rows = []
        summaries = node_summaries(self.outcomes)
        failed = any(s.result == "fail" for s in summaries)
        for s in summaries:
            color = "#c0392b" if s.result == "fail" else "#27ae60"
            rows.append(
                f"<tr><td>{escape(s.node)}</td><td style='color:{color};font-weight:bold'>{s.result.upper()}</td>"
                f"<td>{s.passed}</td><td>{s.failed}</td><td>{s.errors}</td><td>{s.skipped}</td>"
                f"<td>{escape(', '.join(s.failing_checks))}</td></tr>"
            )
        result = "FAIL" if failed else "PASS"
        note = ""
        if self.items and self.items[0] > PASSED_ROWS_LIMIT:
            note = (
                f"<p>{self.items[0]} checks: passed checks are counted in the table below and not listed "
                "one by one; every failure keeps its full detail in the results table.</p>"
            )
        prefix.append(
            f"<h2 id='gpucert-result'>Certification {result}</h2><p>run <code>{escape(self.run_id)}</code></p>{note}"
            "<table id='gpucert-nodes' border='1' cellpadding='4' style='border-collapse:collapse'>"
            "<thead><tr><th>node</th><th>result</th><th>passed</th><th>failed</th><th>errors</th><th>skipped</th>"
            "<th>failing checks</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
