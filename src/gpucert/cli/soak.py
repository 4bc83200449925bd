"""`gpucert soak SPEC [--duration 72h] [--round 1h]` and `gpucert soak --resume RUN [--rejoin NODE]`: the burn-in.

Exit codes: 0 every node passed the soak, 1 a node failed or has too few clean hours, 2 bad input (or another
controller holds the run), 3 could not complete (interrupted: `--resume RUN` continues it).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpucert.cli.args import existing_file, existing_folder, folder_to_write, node_name
from gpucert.errors import ConfigError
from gpucert.spec.durations import duration_seconds

__all__ = ["add_soak_command", "cmd_soak"]


def _duration(text: str) -> str:
    try:
        duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _table(result: Any) -> Table:
    table = Table(title=f"gpucert soak: {result.run.name}")
    for col in ("node", "pool", "result", "clean hours", "left at round", "why"):
        table.add_column(col, overflow="fold")
    for node, v in result.nodes.items():
        why = "; ".join(f["message"] for f in v["findings"][:2]) or v.get("notJudged", "")
        style = {"pass": "green", "fail": "bold red"}.get(v["result"], "yellow")
        table.add_row(
            node,
            str(v["pool"]),
            f"[{style}]{v['result'].upper()}[/]",
            f"{v['cleanHours']:g} / {v['requiredHours']:g}",
            "" if v["leftRound"] is None else str(v["leftRound"]),
            why,
        )
    return table


def cmd_soak(args: argparse.Namespace, console: Console) -> int:
    from gpucert.fleet.soak import resume_soak, start_soak
    from gpucert.fleet.soak.controller import Progress

    def progress(p: Progress) -> None:
        running = [v for v in p.nodes.values() if v["status"] == "running"]
        eta = next((v["eta"] for v in running if v["eta"]), None)
        console.print(
            f"round {p.round}/{p.rounds}: {len(running)} of {len(p.nodes)} nodes running, "
            f"{min((v['cleanHours'] for v in running), default=0):g} clean hours at least"
            + (f", ETA {eta}" if eta else ""),
            highlight=False,
        )

    key = Path(args.sign_key) if args.sign_key else None
    if key is not None:
        from gpucert.report.keys import load_private_key

        load_private_key(key)  # a bad key is said before hours of soak, not after
    if args.resume is not None:
        if args.spec is not None or args.duration is not None or args.round is not None:
            raise ConfigError("--resume continues a soak as it was started: give RUN alone (and --rejoin)")
        result = resume_soak(
            Path(args.resume), rejoin=args.rejoin, on_progress=None if args.quiet else progress, sign_key=key
        )
    else:
        if args.spec is None:
            raise ConfigError("give a SPEC to start a soak, or --resume RUN to continue one")
        if args.rejoin:
            raise ConfigError("--rejoin is for a resumed soak: gpucert soak --resume RUN --rejoin NODE")
        result = start_soak(
            Path(args.spec),
            Path(args.reports),
            duration=args.duration,
            round_=args.round,
            on_progress=None if args.quiet else progress,
            sign_key=key,
        )
    console.print(_table(result))
    console.print(f"soak {result.result.upper()}: {result.run}", highlight=False)
    if key is not None:
        console.print(f"signed: {result.run / 'certificate.intoto.json'}", highlight=False)
    return 0 if result.result == "pass" else 1


def add_soak_command(sub: Any, console: Console) -> None:
    s = sub.add_parser("soak", help="burn-in: rounds of sustained load for hours, each node judged every round")
    s.add_argument(
        "spec", type=existing_file, nargs="?", default=None, help="the spec (its `soak` section; defaults otherwise)"
    )
    s.add_argument("--duration", type=_duration, default=None, help="how long, e.g. 72h (over soak.duration)")
    s.add_argument("--round", type=_duration, default=None, help="how long each round, e.g. 1h (over soak.round)")
    s.add_argument(
        "--resume", type=existing_folder, metavar="RUN", default=None, help="continue the soak in this run folder"
    )
    s.add_argument(
        "--rejoin",
        type=node_name,
        action="append",
        default=[],
        metavar="NODE",
        help="with --resume: a repaired node restarts",
    )
    s.add_argument(
        "--reports", type=folder_to_write, default="reports", help="where the run folder is created (default ./reports)"
    )
    s.add_argument(
        "--sign-key", type=existing_file, default=None, help="sign the soak's verdict and files with this private key"
    )
    s.add_argument("-q", "--quiet", action="store_true", help="no line per round")
    s.set_defaults(func=lambda a: cmd_soak(a, console))
