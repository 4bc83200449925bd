"""`gpucert preflight SPEC`, and the same checks before `certify` and `recertify` on a kubernetes target.

Exit codes: 0 the run will go ahead, 1 something other than the hardware would make it fail (the table says what
and how to fix it), 2 bad input. Before a certification, a failed preflight stops it before anything is created
(a configuration error, exit 2); `--skip-preflight` goes ahead anyway and the verdict records that it did.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from gpucert.cli.args import existing_file, node_name
from gpucert.errors import ConfigError
from gpucert.spec.cluster import ClusterSpec, KubernetesTargetSpec, load_spec
from gpucert.spec.names import NameError_, check_node_name

__all__ = ["add_preflight_command", "before_run", "preflight"]

STYLE = {"ok": "green", "fail": "bold red", "warn": "yellow"}


class PreflightFailed(ConfigError):
    """The cluster is not ready for the run: the table above says what to fix."""


def preflight(spec: ClusterSpec, *, node: str | None = None, drain: bool = False) -> Any:
    """The checks of `spec`'s cluster (of `node` alone, as `recertify NODE` would run)."""
    from gpucert.measure.targets.kubernetes.api import KubeApi
    from gpucert.measure.targets.kubernetes.preflight import Preflight

    if not isinstance(spec.target, KubernetesTargetSpec):
        raise ConfigError(
            f"preflight checks a live cluster; this spec's target is {spec.target.kind!r}",
            path=spec.path,
            key="target.kind",
        )
    check = Preflight(spec, KubeApi.connect(spec.target.context, spec.path), recertify=node is not None, drain=drain)
    check.run([node] if node is not None else None)
    return check


def render(check: Any, console: Console, spec: ClusterSpec) -> None:
    """One table, a section per thing to fix (failures first within it); the passing rows of a section folded
    into one when it has many."""
    from gpucert.measure.targets.kubernetes.preflight import GROUPS

    table = Table(title=f"gpucert preflight: {spec.metadata.name}", show_lines=False)
    for col in ("", "check", "found", "fix"):
        table.add_column(col, overflow="fold")
    for group in GROUPS:
        rows = [c for c in check.checks if c.group == group]
        if not rows:
            continue
        table.add_section()
        table.add_row("", f"[bold]{group}[/]", "", "")
        bad = [c for c in rows if c.status != "ok"]
        good = [c for c in rows if c.status == "ok"]
        for c in bad:
            table.add_row(f"[{STYLE[c.status]}]{c.status.upper()}[/]", c.item, c.detail, c.fix)
        if len(good) > 6:
            table.add_row(
                f"[{STYLE['ok']}]OK[/]", f"{len(good)} passed", ", ".join(c.item for c in good[:3]) + ", ...", ""
            )
        else:
            for c in good:
                table.add_row(f"[{STYLE['ok']}]OK[/]", c.item, c.detail, "")
    console.print(table)
    failed = sum(c.status == "fail" for c in check.checks)
    if failed:
        console.print(f"[bold red]NOT READY[/]: {failed} problem(s) would stop the run; fix them and run again")
    else:
        console.print("[bold green]READY[/]: the run will go ahead")


def cmd_preflight(a: argparse.Namespace, console: Console) -> int:
    if a.node is not None:
        try:
            check_node_name(a.node)
        except NameError_ as exc:
            raise ConfigError(str(exc), key="--node") from None
    spec = load_spec(a.spec)
    check = preflight(spec, node=a.node, drain=a.drain)
    if a.format == "json":
        doc = {"spec": spec.metadata.name, "ready": check.ready, "checks": [c.to_json() for c in check.checks]}
        print(json.dumps(doc, indent=2))
    else:
        render(check, console, spec)
    return 0 if check.ready else 1


def before_run(
    spec: ClusterSpec, console: Console, *, skip: bool, node: str | None = None, drain: bool = False
) -> dict[str, Any] | None:
    """The preflight before a run on a kubernetes target: its record for the run folder, or PreflightFailed (with
    the table printed) before anything is created. None for targets that are not a live cluster."""
    if not isinstance(spec.target, KubernetesTargetSpec):
        return None
    if skip:
        return {"skipped": True}
    check = preflight(spec, node=node, drain=drain)
    if not check.ready:
        render(check, console, spec)
        failed = sum(c.status == "fail" for c in check.checks)
        raise PreflightFailed(
            f"not started: preflight found {failed} problem(s) with the cluster (the table above); fix them, or "
            "pass --skip-preflight to go ahead anyway (the verdict records it)",
            path=spec.path,
        )
    return {"skipped": False, "checks": len(check.checks), "warnings": sum(c.status == "warn" for c in check.checks)}


def add_preflight_command(sub: Any, console: Console) -> None:
    p = sub.add_parser("preflight", help="will a certification of this cluster run? (read-only; exit 0 ready, 1 not)")
    p.add_argument("spec", type=existing_file)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument(
        "--node", type=node_name, default=None, help="check one node as `gpucert recertify NODE` would (its verbs too)"
    )
    p.add_argument("--drain", action="store_true", help="with --node: as `recertify --drain` (eviction too)")
    p.set_defaults(func=lambda a: cmd_preflight(a, console))
