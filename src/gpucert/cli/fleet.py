"""The fleet commands of `gpucert`, for the cluster after handover: `recertify` (one node, on demand), `schedule`
(one round of recertification in the cluster), `metrics` (the fleet's certification state for Prometheus), `init`
(a spec drafted from what a cluster runs) and `cleanup` (what earlier runs left in the cluster). The work itself is in
fleet/ (recertify, schedule, metrics, draft, survey) and the targets.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from gpucert.cli.args import (
    SKIP_HELP,
    count,
    existing_file,
    existing_folder,
    file_to_write,
    folder_to_write,
    handover_args,
    node_name,
    run_args,
    seconds,
    share,
    spec_name,
)
from gpucert.cli.certify import evaluate_run, load_inputs, sign_with, signer_of
from gpucert.cli.preflight import before_run
from gpucert.errors import ConfigError, GpucertError
from gpucert.fleet.history import use_history
from gpucert.measure.targets import open_target
from gpucert.plan.runfolder import RunFolder
from gpucert.resources import project_root
from gpucert.spec.cluster import ClusterSpec, load_spec
from gpucert.spec.names import NameError_, check_node_name

__all__ = ["add_fleet_commands"]

EXIT_PASS = 0
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def cmd_recertify(a: argparse.Namespace) -> int:
    from gpucert.fleet.handover_binding import handover_dir, trusted_keys
    from gpucert.fleet.recertify import RecertifyOptions, recertify

    signer = signer_of(a.sign_key)
    try:
        check_node_name(a.node)
    except NameError_ as exc:
        raise ConfigError(str(exc), key="NODE") from None
    spec, _ = load_inputs(a.spec)
    checked = before_run(spec, console, skip=a.skip_preflight, node=a.node, drain=a.drain)

    def evaluate(folder: RunFolder) -> int:
        if checked is not None:
            folder.write_preflight(checked)
        use_history(folder, Path(a.reports), spec.metadata.name, list(opts.keys), console.print)
        return evaluate_run(folder, workers=None, quiet=a.quiet, signer=signer)

    opts = RecertifyOptions(
        node=a.node,
        reports=Path(a.reports),
        handover_dir=handover_dir(a.handover, spec.metadata.name),
        keys=trusted_keys(a.sign_key, a.key),
        without_handover=a.without_handover,
        cordon=not a.no_cordon,
        drain=a.drain,
        wait_timeout_s=a.wait_timeout,
    )
    code, _ = recertify(
        spec,
        opts,
        evaluate=evaluate,
        sign=sign_with(a.sign_key),
        progress=console.print,
    )
    return code


def cmd_schedule(a: argparse.Namespace) -> int:
    from gpucert.fleet.handover_binding import handover_dir, trusted_keys
    from gpucert.fleet.schedule import ScheduleOptions, run_schedule

    signer = signer_of(a.sign_key)
    spec, _ = load_inputs(a.spec)
    opts = ScheduleOptions(
        reports=Path(a.reports),
        handover_dir=handover_dir(a.handover, spec.metadata.name),
        keys=trusted_keys(a.sign_key, a.key),
        without_handover=a.without_handover,
        max_nodes=a.max_nodes,
        max_cordoned_share=a.max_cordoned_share,
        max_failure_share=a.max_failure_share,
        drain=a.drain,
        min_age_s=a.min_age_hours * 3600,
        wait_timeout_s=a.wait_timeout,
    )
    code, _ = run_schedule(
        spec,
        opts,
        evaluate=lambda folder: evaluate_run(folder, workers=None, quiet=True, signer=signer),
        sign=sign_with(a.sign_key),
        progress=console.print,
    )
    return code


def cmd_cleanup(a: argparse.Namespace) -> int:
    spec = load_spec(a.spec)
    target = open_target(spec)
    cleanup = getattr(target, "cleanup", None)
    if cleanup is None:
        raise ConfigError(f"a {target.kind} target creates nothing to clean up", path=spec.path, key="target.kind")
    console.print(f"deleted {cleanup()} objects left by earlier gpucert runs")
    return EXIT_PASS


def cmd_metrics(a: argparse.Namespace) -> int:
    from gpucert.fleet.metrics import FleetCollector, SpecWatch, serve, write_textfile
    from gpucert.measure.targets import open_target
    from gpucert.measure.targets.base import NodeControl, NodeTarget

    if a.textfile is None and a.serve is None:
        raise ConfigError("say where the series go: --textfile PATH.prom or --serve [HOST]:PORT", key="--textfile")

    def load(path: Path) -> tuple[ClusterSpec, NodeControl | None]:
        spec = load_spec(path)
        target = open_target(spec)
        return spec, target.node_control(Path(a.reports)) if isinstance(target, NodeTarget) else None

    # the spec (and so its target) is read again whenever its file changes
    watch = SpecWatch(Path(a.spec), load) if a.spec else None
    collector = FleetCollector(Path(a.reports), cluster_timeout_s=a.cluster_timeout, watch=watch)
    if a.textfile is not None:
        write_textfile(collector, Path(a.textfile))
        console.print(f"wrote {a.textfile}")
        return EXIT_PASS
    console.print(f"serving the fleet's certification state on {a.serve} (/metrics); Ctrl-C stops")
    serve(collector, a.serve)
    return EXIT_PASS


def _spec_name(text: str) -> str:
    """A spec name (metadata.name) from a context or fleet name: lower case, digits, '-' and '.'."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return name[:63].strip("-.") or "cluster"


def cmd_init(a: argparse.Namespace) -> int:
    from gpucert.fleet import draft, survey

    out = Path(a.out) if a.out else None
    if out is not None and out.exists() and not a.force:
        raise ConfigError("exists; choose another --out, or pass --force to replace it", path=out, key="--out")
    spec_dir = (out.parent if out is not None else Path.cwd()).resolve()
    here = Path("baselines") / "gpus"  # the baselines of the repository you work in, else gpucert's own
    baselines = Path(a.baselines) if a.baselines else here if here.is_dir() else project_root() / here
    if a.simulated:
        fleet_path = Path(a.simulated)
        stack, fleet = survey.survey_simulated(fleet_path, baselines)
        target: dict[str, Any] = {"kind": "simulated", "fleet": os.path.relpath(fleet_path.resolve(), spec_dir)}
        made_by, name = f"gpucert init --simulated {a.simulated}", fleet.metadata.name
    else:
        selector = {"nvidia.com/gpu.present": "true"}
        stack = survey.survey_kubernetes(a.context, selector)
        target = {"kind": "kubernetes", **({"context": a.context} if a.context else {}), "nodeSelector": selector}
        made_by = f"gpucert init --context {a.context}" if a.context else "gpucert init (current context)"
        name = a.context or "cluster"
    drafted = draft.draft_spec(
        stack,
        name=_spec_name(a.name or name),
        target=target,
        made_by=made_by,
        baselines=draft.known_baselines(baselines),
        spec_dir=spec_dir,
        when=datetime.now(UTC),
    )
    _check_draft(drafted.text)
    if out is None:
        sys.stdout.write(drafted.text)
    else:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(drafted.text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot write the spec here ({exc.strerror}); name a file in a folder you can write",
                path=out,
                key="--out",
            ) from None
        console.print(f"wrote {out}: {len(stack.nodes)} GPU nodes; check it with `gpucert configure {out}`")
    for todo in drafted.todos:
        print(f"TODO: {todo}", file=sys.stderr)
    return EXIT_PASS


def _check_draft(text: str) -> None:
    """The draft is a spec gpucert reads (its baseline TODOs aside, which are meant to stop it until done)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            load_spec(path)
        except ConfigError as exc:
            if "TODO left by `gpucert init`" not in str(exc):
                raise GpucertError(f"gpucert init drafted a spec it cannot read ({exc}); please report it") from None


def _flag(text: str) -> bool:
    """A yes/no option's value, as a manifest passes it (`--drain=$(DRAIN)`)."""
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: say true or false")


def add_fleet_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """Register `recertify`, `schedule`, `metrics`, `init` and `cleanup`."""
    _add_recertify(sub)
    _add_schedule(sub)
    _add_metrics(sub)
    _add_init(sub)
    cu = sub.add_parser("cleanup", help="delete the Jobs, Pods, Services and ConfigMaps earlier runs left behind")
    cu.add_argument("spec", type=existing_file)
    cu.set_defaults(func=cmd_cleanup)


def _add_recertify(sub: argparse._SubParsersAction[Any]) -> None:
    rc = sub.add_parser("recertify", help="one node, on demand, against its handover baseline, the SKU and the fleet")
    rc.add_argument("node", type=node_name, metavar="NODE")
    rc.add_argument("--spec", type=existing_file, required=True)
    handover_args(rc)
    rc.add_argument("--no-cordon", action="store_true", help="measure without cordoning the node first")
    rc.add_argument("--drain", action="store_true", help="evict the GPU pods on the node instead of waiting for them")
    rc.add_argument("--wait-timeout", type=seconds, default=3600, help="seconds to wait for GPU pods (default 3600)")
    rc.add_argument("--sign-key", type=existing_file, default=None)
    rc.add_argument("--skip-preflight", action="store_true", help=SKIP_HELP)
    run_args(rc, workers=False)
    rc.set_defaults(func=cmd_recertify)


def _add_schedule(sub: argparse._SubParsersAction[Any]) -> None:
    sc = sub.add_parser(
        "schedule", help="one round of recertification: the nodes certified longest ago, idle, with a circuit breaker"
    )
    sc.add_argument("spec", type=existing_file)
    sc.add_argument("--max-nodes", type=count(1), required=True, help="recertify at most this many nodes this round")
    sc.add_argument(
        "--max-cordoned-share",
        type=share,
        default=0.25,
        help="never have more than this share of a pool cordoned at once, counting every cordon (default 0.25)",
    )
    sc.add_argument(
        "--max-failure-share",
        type=share,
        default=0.5,
        help="stop, and leave the node unmarked, when more than this share of the round fails (default 0.5)",
    )
    sc.add_argument(
        "--drain",
        type=_flag,
        nargs="?",
        const=True,
        default=False,
        help="evict the GPU pods of the nodes taken (--drain or --drain=true); without it busy nodes are skipped",
    )
    sc.add_argument("--min-age-hours", type=seconds, default=0, help="skip nodes certified more recently than this")
    sc.add_argument(
        "--wait-timeout", type=seconds, default=600, help="seconds to wait for GPU pods that arrive after the choice"
    )
    handover_args(sc)
    sc.add_argument("--sign-key", type=existing_file, default=None)
    run_args(sc, workers=False)
    sc.set_defaults(func=cmd_schedule)


def _add_metrics(sub: argparse._SubParsersAction[Any]) -> None:
    me = sub.add_parser("metrics", help="the fleet's certification state for Prometheus (textfile or HTTP)")
    out = me.add_mutually_exclusive_group()
    out.add_argument(
        "--textfile",
        type=file_to_write,
        default=None,
        help="write once to PATH.prom (node-exporter's textfile collector)",
    )
    out.add_argument("--serve", default=None, metavar="[HOST]:PORT", help="serve /metrics, e.g. :9400")
    me.add_argument(
        "--spec", type=existing_file, default=None, help="export this spec's runs, and read its target's nodes"
    )
    me.add_argument(
        "--reports", type=folder_to_write, default="reports", help="the folder of run folders (default ./reports)"
    )
    me.add_argument(
        "--cluster-timeout",
        type=seconds,
        default=8.0,
        help="seconds a scrape may wait for the cluster's nodes, retries included (default 8)",
    )
    me.set_defaults(func=cmd_metrics)


def _add_init(sub: argparse._SubParsersAction[Any]) -> None:
    i = sub.add_parser("init", help="draft a spec from what a cluster (or a simulated fleet) runs, read only")
    where = i.add_mutually_exclusive_group()
    where.add_argument("--context", default=None, help="kubeconfig context of the cluster (default: the current one)")
    where.add_argument(
        "--simulated",
        type=existing_file,
        metavar="FLEET",
        default=None,
        help="a SimulatedFleet file instead of a cluster",
    )
    i.add_argument("--out", type=file_to_write, default=None, help="write the spec here (default: print it)")
    i.add_argument("--name", type=spec_name, default=None, help="metadata.name (default: the context or fleet name)")
    i.add_argument(
        "--baselines",
        type=existing_folder,
        default=None,
        help="the SKU baselines to match products with (default: baselines/gpus)",
    )
    i.add_argument("--force", action="store_true", help="replace --out if it exists")
    i.set_defaults(func=cmd_init)
