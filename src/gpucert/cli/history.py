"""`gpucert history NODE --spec-name NAME [--metric M] [--key PUB]`: a node's figures over time, per GPU (by
serial), from its history (fleet/history.py); with keys, each entry is checked against its signed run and a
refused one is shown with the reason.

Exit codes: 0 printed, 2 bad input (no history, a history line that is not an entry).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpucert.errors import ConfigError
from gpucert.fleet.history import history_path, load_history, verify_entry
from gpucert.report import attest

__all__ = ["add_history_command", "cmd_history"]


def cmd_history(a: argparse.Namespace, console: Console) -> int:
    reports = Path(a.reports)
    path = history_path(reports, a.spec_name, a.node)
    entries = load_history(path)
    if not entries:
        raise ConfigError(
            f"no history of {a.node} under spec {a.spec_name}: a node's history starts with its first signed "
            "certification (`gpucert certify SPEC --sign-key KEY`); check --reports and --spec-name",
            path=path,
            key="NODE",
        )
    keys = [attest.load_public_key(Path(k)) for k in a.key or []]
    trust = {e.run: (verify_entry(e, reports, keys) if keys else None) for e in entries}
    metrics = sorted({m for e in entries for g in e.gpus for m in g.metrics})
    shown = [a.metric] if a.metric else metrics
    unknown = [m for m in shown if m not in metrics]
    if unknown:
        raise ConfigError(f"{a.node}'s history has no {unknown[0]}; it has {', '.join(metrics)}", key="--metric")
    for metric in shown:
        table = Table(title=f"{a.node} {metric} over time ({path})")
        for col in ("run", "time", "driver", *(f"gpu{g.index}" for g in entries[-1].gpus), "trust"):
            table.add_column(col, overflow="fold")
        first: dict[tuple[int, str | None], float] = {}
        for e in entries:
            cells = []
            for g in e.gpus:
                fig = g.metrics.get(metric)
                if fig is None:
                    cells.append("")
                    continue
                ref = first.setdefault((g.index, g.serial), fig.median)
                cells.append(f"{fig.median:.5g} ({fig.median / ref - 1:+.1%})")
            why = trust[e.run]
            verdict = "not checked (no --key)" if not keys else ("verified" if why is None else f"REFUSED: {why}")
            table.add_row(e.run, e.time, e.driver or "", *cells, verdict)
        console.print(table)
    console.print("(each figure: the run's median, and in brackets its change since the board's first run)")
    return 0


def add_history_command(sub: Any, console: Console) -> None:
    h = sub.add_parser("history", help="a node's figures over time, per GPU, from its signed runs")
    h.add_argument("node")
    h.add_argument("--spec-name", required=True, help="the spec's metadata.name the node was certified under")
    h.add_argument("--metric", default=None, help="one metric only (default: every metric in the history)")
    h.add_argument("--reports", default="reports", help="where the run folders are (default ./reports)")
    h.add_argument("--key", action="append", metavar="PUB", help="check each entry against its run's signature")
    h.set_defaults(func=lambda a: cmd_history(a, console))
