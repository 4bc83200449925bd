"""`gpucert history NODE --spec-name NAME [--metric M] [--key PUB]`: a node's figures over time, per GPU (by
serial), from its history (fleet/history.py); with keys, each entry is checked against its signed run and a
refused one is shown with the reason. `gpucert history --pool POOL --spec-name NAME [--handover DIR]`: the pool's
performance index over time (fleet/pool_index.py).

Exit codes: 0 printed, 2 bad input (no history, a history line that is not an entry).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpucert.cli.args import existing_file, existing_folder, folder_to_write, node_name, pool_name, spec_name
from gpucert.errors import ConfigError
from gpucert.evaluate.index import WITHIN
from gpucert.fleet.history import HISTORY_DIR, history_path, load_history, verify_entry
from gpucert.report import attest

__all__ = ["add_history_command", "cmd_history"]


def cmd_history(a: argparse.Namespace, console: Console) -> int:
    if (a.node is None) == (a.pool is None):
        raise ConfigError("name a NODE or --pool POOL (one of them): whose history to print", key="NODE")
    if a.pool is not None:
        return cmd_pool_history(a, console)
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


def cmd_pool_history(a: argparse.Namespace, console: Console) -> int:
    from gpucert.fleet.handover_binding import handover_dir
    from gpucert.fleet.pool_index import pool_history

    reports = Path(a.reports)
    rows = pool_history(reports, a.spec_name, a.pool, handover_dir(a.handover, a.spec_name))
    if not rows:
        raise ConfigError(
            f"no history of pool {a.pool} under spec {a.spec_name}: a node's history starts with its first signed "
            "certification (`gpucert certify SPEC --sign-key KEY`); check --reports, --spec-name and --pool",
            path=reports / HISTORY_DIR / a.spec_name,
            key="--pool",
        )
    table = Table(title=f"pool {a.pool} performance index over time (spec {a.spec_name})")
    for col in ("run", "time", "nodes", "gpus", f"within {WITHIN:.0%}", "capacity lost (GPUs)", "worst index"):
        table.add_column(col, overflow="fold")
    for r in rows:
        s = r.summary
        table.add_row(
            r.run,
            r.time,
            str(r.nodes),
            str(s.gpus),
            f"{s.within_share:.1%}",
            f"{s.capacity_lost:.3f}",
            "" if s.worst is None else f"{s.worst:.4f}",
        )
    console.print(table)
    console.print(
        "(each row: the pool as its nodes' newest runs up to then stand; each GPU's figure over its handover figure, "
        "else the SKU's; a GPU is as short as its worst metric, and one without figures counts as lost)"
    )
    return 0


def add_history_command(sub: Any, console: Console) -> None:
    h = sub.add_parser(
        "history", help="a node's figures, or a pool's performance index, over time, from its signed runs"
    )
    h.add_argument("node", type=node_name, metavar="NODE", nargs="?", default=None)
    h.add_argument(
        "--pool",
        type=pool_name,
        default=None,
        help="the pool's performance index over time instead of one node's figures",
    )
    h.add_argument(
        "--handover",
        type=existing_folder,
        default=None,
        metavar="DIR",
        help="where `gpucert baseline record --out` wrote (default baselines/nodes)",
    )
    h.add_argument(
        "--spec-name", type=spec_name, required=True, help="the spec's metadata.name the node was certified under"
    )
    h.add_argument("--metric", default=None, help="one metric only (default: every metric in the history)")
    h.add_argument(
        "--reports", type=folder_to_write, default="reports", help="where the run folders are (default ./reports)"
    )
    h.add_argument(
        "--key", type=existing_file, action="append", metavar="PUB", help="check each entry against its run's signature"
    )
    h.set_defaults(func=lambda a: cmd_history(a, console))
