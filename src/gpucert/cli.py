"""The `gpucert` command: a thin layer over plan, measure, the pytest suites and the run folder.

Exit codes: 0 pass, 1 certification failed, 2 usage or configuration error, 3 could not complete.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpucert import run as runner
from gpucert._version import __version__
from gpucert.baseline import GpuBaseline
from gpucert.errors import ConfigError, GpucertError, IncompleteRunError
from gpucert.evidence import NodeEvidence
from gpucert.fleet import SimulatedFleet
from gpucert.gate_inputs import GateInputs
from gpucert.inventory import Inventory
from gpucert.names import NameError_, check_node_name
from gpucert.report import attest
from gpucert.report.html import natural_key
from gpucert.resources import project_root
from gpucert.runfolder import RunFolder
from gpucert.spec import ClusterSpec, load_spec
from gpucert.targets import open_target

__all__ = ["main"]

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def _load(spec_path: str) -> tuple[ClusterSpec, dict[str, GpuBaseline]]:
    return runner.load_inputs(Path(spec_path))


def _prepare(
    spec: ClusterSpec, reports: str, mode: runner.Mode, evidence: str | None = None, gate: GateInputs | None = None
) -> RunFolder:
    """The run folder, through the one entry point the pytest plugin uses too, with a progress bar to watch."""
    if mode is not runner.Mode.MEASURE:
        return runner.prepare(spec, Path(reports), mode, evidence=Path(evidence) if evidence else None, gate=gate)
    with Progress(
        TextColumn("measuring"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("", total=None)

        def planned(inventory: Inventory, kind: str) -> None:
            console.print(f"planned [bold]{len(inventory.nodes)}[/] nodes ({kind})")
            progress.update(task, total=len(inventory.nodes))

        def done(ev: NodeEvidence) -> None:
            progress.update(task, advance=1, description=f"{ev.node}{'' if ev.collected else ' (not measured)'}")

        return runner.prepare(spec, Path(reports), mode, progress=done, planned=planned)


def _pytest(spec_path: str, folder: RunFolder, workers: int | None, quiet: bool, signer: str | None = None) -> int:
    root = project_root()
    args = [
        *(str(root / "suites" / s) for s in folder.suites),
        "--spec",
        str(Path(spec_path).resolve()),
        "--run-dir",
        str(folder.path),
        "--rootdir",
        str(root),
        "-c",
        str(root / "pyproject.toml"),
        "-p",
        "no:cacheprovider",
        "-W",
        "default",
        "--tb=no",
        "-o",
        "console_output_style=count",
    ]
    args += ["-qq"] if quiet else ["-q"]
    if workers:
        args += ["-n", str(workers)]
    if signer:
        args += ["--signer", signer]
    return int(pytest.main(args))


STYLES = {"pass": "green", "fail": "red", "incomplete": "yellow"}


def _print_verdict(folder: RunFolder) -> int:
    if not folder.verdict_path.exists():
        raise IncompleteRunError(f"the evaluation wrote no verdict.json in {folder.path}; see the output above")
    verdict = folder.read_verdict()
    pools = verdict.get("pools") or {}
    several = len(pools) > 1
    table = Table(title=f"gpucert verdict: {verdict['spec']} ({verdict['target']})")
    for col in ("node", *(("pool",) if several else ()), "result", "passed", "failed", "errors", "skipped"):
        table.add_column(col)
    table.add_column("failing checks")
    order = {p: i for i, p in enumerate(pools)}

    def by_pool(kv: tuple[str, dict[str, Any]]) -> tuple[int, list[int | str]]:
        return order.get(kv[1].get("pool") or "", len(order)), natural_key(kv[0])

    rows = [("(fleet)", verdict["fleet"])] if verdict.get("fleet") else []
    for node, s in [*rows, *sorted(verdict["nodes"].items(), key=by_pool)]:
        pool = [(s.get("pool") or ("-" if node == "(fleet)" else "(none)"))] if several else []
        table.add_row(
            node,
            *pool,
            f"[{STYLES.get(s['result'], 'red')}]{s['result'].upper()}[/]",
            str(s["passed"]),
            str(s["failed"]),
            str(s["errors"]),
            str(s["skipped"]),
            ", ".join(s["failing"]),
        )
    if "recertify" in verdict:
        console.print(f"[bold]{verdict['recertify']['summary']}[/]")
    console.print(table)
    if several:
        summary = Table(title="pools")
        for col in ("pool", "product", "GPUs/node", "nodes", "baseline", "result"):
            summary.add_column(col)
        for name, p in pools.items():
            summary.add_row(
                name,
                str(p.get("product")),
                str(p.get("gpusPerNode")),
                f"{p.get('found')} of {p.get('nodes')}",
                str(p.get("baseline")),
                f"[{STYLES.get(p['result'], 'red')}]{p['result'].upper()}[/]",
            )
        console.print(summary)
    if verdict["findings"]:
        findings = Table(title="findings", show_lines=False)
        for col in ("check", "where", "message"):
            findings.add_column(col, overflow="fold")
        for f in verdict["findings"]:
            where = f["node"] or "fleet"
            if f["gpu"] is not None:
                where += f"/gpu{f['gpu']}"
            findings.add_row(f["check"], where, f["message"])
        console.print(findings)
    s, c = verdict["summary"], verdict["coverage"]
    result = verdict["result"]
    console.print(
        f"[bold {STYLES.get(result, 'red')}]{result.upper()}[/]: {s['checks']} checks on "
        f"{s['nodes']} nodes / {s['gpus']} GPUs: {s['passed']} passed, {s['failed']} failed, "
        f"{s['errors']} errors, {s['skipped']} skipped because a check they depend on failed; "
        f"{c['ran']} of {c['required']} required checks ran"
    )
    if not c["complete"]:
        console.print(
            f"[yellow]INCOMPLETE[/]: {c['deselected']} required checks not collected, {c['notReached']} not "
            f"reached ({c.get('stopped') or 'the session ended early'}), {c['skippedWithoutCause']} skipped for a "
            "cause that did not run; a certification is PASS only when every required check ran"
        )
    for path in (folder.report_path, folder.allure_dir, folder.junit_path, folder.verdict_path):
        console.print(f"  {path.name:<15} {path}")
    return EXIT_PASS if verdict["result"] == "pass" else EXIT_FAIL


def _evaluate(spec_path: str, folder: RunFolder, *, workers: int | None, quiet: bool, signer: str | None) -> int:
    """Run the suites the folder calls for over it, and print its verdict (0 pass, 1 fail or incomplete)."""
    code = _pytest(spec_path, folder, workers, quiet, signer)
    if code == pytest.ExitCode.INTERRUPTED and folder.verdict_path.exists():
        _print_verdict(folder)
        raise IncompleteRunError(f"interrupted during evaluation: the verdict in {folder.path} says INCOMPLETE")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise IncompleteRunError(
            f"pytest stopped with exit code {code}; the run folder {folder.path} keeps the evidence measured so far"
        )
    return _print_verdict(folder)


def _run(
    spec_path: str,
    reports: str,
    mode: runner.Mode,
    *,
    workers: int | None = None,
    evidence: str | None = None,
    quiet: bool = False,
    sign_key: Path | None = None,
    signer: str | None = None,
    gate: GateInputs | None = None,
) -> tuple[int, RunFolder]:
    spec, _ = _load(spec_path)
    folder = _prepare(spec, reports, mode, evidence, gate)
    result = _evaluate(spec_path, folder, workers=workers, quiet=quiet, signer=signer)
    if sign_key is not None:
        path, fp = attest.sign_run(folder.path, sign_key)
        console.print(f"  {'certificate':<15} {path} (signed by {fp})")
    return result, folder


def cmd_demo(a: argparse.Namespace) -> int:
    return _run(
        str(project_root() / "examples" / "demo.yaml"),
        a.reports,
        runner.Mode.MEASURE,
        workers=a.workers,
        quiet=True,
    )[0]


def cmd_certify(a: argparse.Namespace) -> int:
    signer = _signer(a.sign_key)
    return _run(
        a.spec,
        a.reports,
        runner.Mode.MEASURE,
        workers=a.workers,
        quiet=a.quiet,
        sign_key=Path(a.sign_key) if a.sign_key else None,
        signer=signer,
    )[0]


def _signer(sign_key: str | None) -> str | None:
    """The key's fingerprint, read before anything is measured so a bad key fails first."""
    return attest.fingerprint(attest.load_private_key(Path(sign_key)).public_key()) if sign_key else None


def _sign_with(sign_key: str | None) -> Callable[[RunFolder], str | None]:
    """Sign a finished run folder with the key (when one is given); the certificate's digest, or None."""

    def sign(folder: RunFolder) -> str | None:
        if not sign_key:
            return None
        path, fp = attest.sign_run(folder.path, Path(sign_key))
        console.print(f"  {'certificate':<15} {path} (signed by {fp})")
        return attest.certificate_digest(folder.path)

    return sign


def cmd_recertify(a: argparse.Namespace) -> int:
    from gpucert.recertify import RecertifyOptions, recertify

    signer = _signer(a.sign_key)
    try:
        check_node_name(a.node)
    except NameError_ as exc:
        raise ConfigError(str(exc), key="NODE") from None
    spec, _ = _load(a.spec)
    opts = RecertifyOptions(
        node=a.node,
        reports=Path(a.reports),
        handover_dir=Path(a.handover),
        cordon=not a.no_cordon,
        drain=a.drain,
        wait_timeout_s=a.wait_timeout,
    )
    code, _ = recertify(
        spec,
        opts,
        evaluate=lambda folder: _evaluate(a.spec, folder, workers=None, quiet=a.quiet, signer=signer),
        sign=_sign_with(a.sign_key),
        progress=console.print,
    )
    return code


def cmd_schedule(a: argparse.Namespace) -> int:
    from gpucert.schedule import ScheduleOptions, run_schedule

    signer = _signer(a.sign_key)
    spec, _ = _load(a.spec)
    opts = ScheduleOptions(
        reports=Path(a.reports),
        handover_dir=Path(a.handover),
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
        evaluate=lambda folder: _evaluate(a.spec, folder, workers=None, quiet=True, signer=signer),
        sign=_sign_with(a.sign_key),
        progress=console.print,
    )
    return code


def cmd_metrics(a: argparse.Namespace) -> int:
    from gpucert.report.metrics import FleetCollector, serve, write_textfile
    from gpucert.targets.base import NodeControl, NodeTarget

    if a.textfile is None and a.serve is None:
        raise ConfigError("say where the series go: --textfile PATH.prom or --serve [HOST]:PORT", key="--textfile")
    spec = load_spec(a.spec) if a.spec else None
    control: NodeControl | None = None
    if spec is not None:
        target = open_target(spec)
        control = target.node_control(Path(a.reports)) if isinstance(target, NodeTarget) else None
    collector = FleetCollector(Path(a.reports), spec, control)
    if a.textfile is not None:
        write_textfile(collector, Path(a.textfile))
        console.print(f"wrote {a.textfile}")
        return EXIT_PASS
    console.print(f"serving the fleet's certification state on {a.serve} (/metrics); Ctrl-C stops")
    serve(collector, a.serve)
    return EXIT_PASS


def cmd_baseline_record(a: argparse.Namespace) -> int:
    from gpucert.handover import record_baselines

    if a.force and not a.reason:
        raise ConfigError(
            "--force needs --reason TEXT: why a failed node's figures may serve as its baseline", key="--reason"
        )
    run_dir = Path(a.run_dir)
    written, refused = record_baselines(
        run_dir,
        Path(a.out),
        certificate=attest.certificate_digest(run_dir),
        force_reason=a.reason if a.force else None,
        allow_unsigned=a.allow_unsigned,
    )
    for path in written:
        console.print(f"wrote {path}")
    for why in refused:
        console.print(f"[red]refused[/] {why}", markup=True)
    return EXIT_PASS if not refused else EXIT_FAIL


def cmd_keygen(a: argparse.Namespace) -> int:
    priv, pub, fp = attest.generate_key(Path(a.dir))
    console.print(f"private key {priv} (mode 0600: keep it out of run folders and repositories)")
    console.print(f"public key  {pub} (give this to whoever verifies)")
    console.print(f"fingerprint {fp}")
    return EXIT_PASS


def cmd_sign(a: argparse.Namespace) -> int:
    path, fp = attest.sign_run(Path(a.run_dir), Path(a.key))
    console.print(f"signed {a.run_dir} with {fp}: {path}")
    return EXIT_PASS


SCOPES = {
    "measure": "certification: every node measured and judged (configure + certify)",
    "recertify": "recertification of one node (configure + certify + recertify)",
    "plan": "configure only: the cluster's configuration, NOTHING MEASURED (not a certification of the hardware)",
    "static": "static gate: the spec's recipe alone, NO CLUSTER (not a certification)",
}


def cmd_verify(a: argparse.Namespace) -> int:
    v = attest.verify_run(Path(a.run_dir), Path(a.key))
    if v.signature_ok:  # nothing of a payload is shown before its signature is known to be good
        pred = v.statement.get("predicate", {})
        target = pred.get("target", "?")
        if target == "simulated":
            console.print("[bold yellow]TARGET: SIMULATED[/] this certificate is of a simulated fleet, not hardware")
        else:
            console.print(f"target: {target}")
        console.print(
            f"spec {pred.get('spec', {}).get('name')}, run {pred.get('run', {}).get('id')}, "
            f"result {str(pred.get('result', '?')).upper()}, {len(v.statement.get('subject', []))} files"
        )
        mode = str((pred.get("scope") or {}).get("mode"))
        console.print(f"scope: {SCOPES.get(mode, f'{mode}: unknown (signed by another gpucert?)')}", markup=False)
    if v.ok:
        console.print(f"[green]VALID[/]: signed by {v.fingerprint}; every file matches its digest")
        return EXIT_PASS
    console.print("[red]INVALID[/]:")
    for problem in v.problems():
        console.print(f"  {problem}", markup=False, soft_wrap=True)
    return EXIT_FAIL


def cmd_configure(a: argparse.Namespace) -> int:
    gate = GateInputs(
        operator_values=[Path(p) for p in a.operator_values],
        cluster_policies=[Path(p) for p in a.cluster_policy],
        operator_release=a.operator_release,
        base_ref=a.base_ref,
    )
    if not a.static and (gate.given or a.operator_release or a.summary):
        raise ConfigError(
            "--operator-values, --cluster-policy, --operator-release, --base-ref and --summary are for the static "
            "gate: add --static",
            key="--static",
        )
    if a.operator_release and not (gate.operator_values or gate.cluster_policies):
        raise ConfigError("--operator-release needs --operator-values or --cluster-policy", key="--operator-release")
    code, folder = _run(
        a.spec, a.reports, runner.Mode.STATIC if a.static else runner.Mode.PLAN, quiet=a.quiet, gate=gate
    )
    if a.summary and folder.summary_path.exists():
        try:
            Path(a.summary).parent.mkdir(parents=True, exist_ok=True)
            Path(a.summary).write_text(folder.summary_path.read_text(encoding="utf-8"), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write the summary: {exc}", path=Path(a.summary), key="--summary") from None
        console.print(f"  {'summary':<15} {a.summary}")
    return code


def cmd_evaluate(a: argparse.Namespace) -> int:
    return _run(a.spec, a.reports, runner.Mode.EVIDENCE, workers=a.workers, evidence=a.evidence, quiet=a.quiet)[0]


def cmd_cleanup(a: argparse.Namespace) -> int:
    spec = load_spec(a.spec)
    target = open_target(spec)
    cleanup = getattr(target, "cleanup", None)
    if cleanup is None:
        raise ConfigError(f"a {target.kind} target creates nothing to clean up", path=spec.path, key="target.kind")
    console.print(f"deleted {cleanup()} objects left by earlier gpucert runs")
    return EXIT_PASS


def cmd_report_allure(a: argparse.Namespace) -> int:
    from gpucert.report.allure import build_html

    run_dir = Path(a.run_dir).resolve()
    # beside the run folder, not in it: the signed folder stays as it was signed
    out = Path(a.out) if a.out else run_dir.parent / f"{run_dir.name}-allure"
    index = build_html(RunFolder(run_dir).allure_dir, out)
    console.print(f"Allure report: {index}")
    return EXIT_PASS


def _spec_name(text: str) -> str:
    """A spec name (metadata.name) from a context or fleet name: lower case, digits, '-' and '.'."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return name[:63].strip("-.") or "cluster"


def cmd_init(a: argparse.Namespace) -> int:
    from gpucert import draft, survey

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
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(drafted.text, encoding="utf-8")
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


def cmd_schema(a: argparse.Namespace) -> int:
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder for the schemas: {exc.strerror}", path=out, key="--out") from None
    from gpucert.evidence import FabricEvidence
    from gpucert.evidence import NodeEvidence as Evidence
    from gpucert.handover import NodeBaseline

    for name, model in (
        ("clusterspec", ClusterSpec),
        ("simulatedfleet", SimulatedFleet),
        ("gpubaseline", GpuBaseline),
        ("nodebaseline", NodeBaseline),
        ("evidence", Evidence),
        ("fabricevidence", FabricEvidence),
    ):
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(model.model_json_schema(by_alias=True), indent=1) + "\n", encoding="utf-8")
        console.print(f"wrote {path}")
    return EXIT_PASS


def _flag(text: str) -> bool:
    """A yes/no option's value, as a manifest passes it (`--drain=$(DRAIN)`)."""
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: say true or false")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpucert", description="Certify a GPU Kubernetes cluster.")
    p.add_argument("--version", action="version", version=f"gpucert {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def runner_args(sp: argparse.ArgumentParser, workers: bool = True) -> None:
        sp.add_argument("--reports", default="reports", help="where the run folder is created (default ./reports)")
        sp.add_argument("-q", "--quiet", action="store_true", help="print less of pytest's progress")
        if workers:
            sp.add_argument("-n", dest="workers", type=int, default=None, help="pytest-xdist workers for evaluation")

    d = sub.add_parser("demo", help="certify the embedded simulated 4 x 8 H100 fleet with injected faults")
    runner_args(d)
    d.set_defaults(func=cmd_demo)
    c = sub.add_parser("certify", help="plan, measure, evaluate and report")
    c.add_argument("spec")
    c.add_argument("--sign-key", default=None)
    runner_args(c)
    c.set_defaults(func=cmd_certify)
    k = sub.add_parser("configure", help="the configure suite only (stack, versions, ordering, inventory)")
    k.add_argument("spec")
    k.add_argument("--static", action="store_true", help="check the recipe without a cluster")
    k.add_argument(
        "--operator-values",
        action="append",
        default=[],
        metavar="FILE",
        help="--static: the gpu-operator chart's values a change edits (several: merged in order, as helm -f)",
    )
    k.add_argument(
        "--cluster-policy", action="append", default=[], metavar="FILE", help="--static: a ClusterPolicy manifest"
    )
    k.add_argument("--operator-release", default=None, help="--static: the GPU Operator release (the chart's version)")
    k.add_argument("--base-ref", default=None, help="--static: check baseline changes against this git ref")
    k.add_argument("--summary", default=None, metavar="FILE", help="--static: also write the Markdown summary here")
    runner_args(k, workers=False)
    k.set_defaults(func=cmd_configure)
    e = sub.add_parser("evaluate", help="re-evaluate recorded evidence against a spec and its baselines")
    e.add_argument("spec")
    e.add_argument("--evidence", required=True, help="a run folder or its evidence/ folder")
    runner_args(e)
    e.set_defaults(func=cmd_evaluate)
    rc = sub.add_parser("recertify", help="one node, on demand, against its handover baseline, the SKU and the fleet")
    rc.add_argument("node")
    rc.add_argument("--spec", required=True)
    rc.add_argument("--handover", default="baselines/nodes", help="folder of handover baselines (<node>.yaml)")
    rc.add_argument("--no-cordon", action="store_true", help="measure without cordoning the node first")
    rc.add_argument("--drain", action="store_true", help="evict the GPU pods on the node instead of waiting for them")
    rc.add_argument("--wait-timeout", type=float, default=3600, help="seconds to wait for GPU pods (default 3600)")
    rc.add_argument("--sign-key", default=None)
    runner_args(rc, workers=False)
    rc.set_defaults(func=cmd_recertify)
    sc = sub.add_parser(
        "schedule", help="one round of recertification: the nodes certified longest ago, idle, with a circuit breaker"
    )
    sc.add_argument("spec")
    sc.add_argument("--max-nodes", type=int, required=True, help="recertify at most this many nodes this round")
    sc.add_argument(
        "--max-cordoned-share",
        type=float,
        default=0.25,
        help="never have more than this share of a pool cordoned at once, counting every cordon (default 0.25)",
    )
    sc.add_argument(
        "--max-failure-share",
        type=float,
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
    sc.add_argument("--min-age-hours", type=float, default=0, help="skip nodes certified more recently than this")
    sc.add_argument(
        "--wait-timeout", type=float, default=600, help="seconds to wait for GPU pods that arrive after the choice"
    )
    sc.add_argument("--handover", default="baselines/nodes", help="folder of handover baselines (<node>.yaml)")
    sc.add_argument("--sign-key", default=None)
    runner_args(sc, workers=False)
    sc.set_defaults(func=cmd_schedule)
    me = sub.add_parser("metrics", help="the fleet's certification state for Prometheus (textfile or HTTP)")
    out = me.add_mutually_exclusive_group()
    out.add_argument("--textfile", default=None, help="write once to PATH.prom (node-exporter's textfile collector)")
    out.add_argument("--serve", default=None, metavar="[HOST]:PORT", help="serve /metrics, e.g. :9400")
    me.add_argument("--spec", default=None, help="export this spec's runs, and read its target's nodes")
    me.add_argument("--reports", default="reports", help="the folder of run folders (default ./reports)")
    me.set_defaults(func=cmd_metrics)
    bl = sub.add_parser("baseline", help="handover baselines per node")
    bsub = bl.add_subparsers(dest="baseline", required=True)
    br = bsub.add_parser("record", help="write baselines/nodes/<node>.yaml for every node that passed in RUN_DIR")
    br.add_argument("run_dir")
    br.add_argument("--out", default="baselines/nodes", help="where to write (default baselines/nodes)")
    br.add_argument("--force", action="store_true", help="record failed nodes too (needs --reason)")
    br.add_argument("--reason", default=None, help="why: written into each forced file")
    br.add_argument(
        "--allow-unsigned", action="store_true", help="record from a run that was not signed (said in each file)"
    )
    br.set_defaults(func=cmd_baseline_record)
    g = sub.add_parser("keygen", help="create an Ed25519 signing key pair in DIR")
    g.add_argument("dir")
    g.set_defaults(func=cmd_keygen)
    sg = sub.add_parser("sign", help="sign a completed run folder (certificate.intoto.json)")
    sg.add_argument("run_dir")
    sg.add_argument("--key", required=True, help="the private key from `gpucert keygen`")
    sg.set_defaults(func=cmd_sign)
    v = sub.add_parser("verify", help="check a run folder's signature and every file's digest")
    v.add_argument("run_dir")
    v.add_argument("--key", required=True, help="the signer's public key")
    v.set_defaults(func=cmd_verify)
    cu = sub.add_parser("cleanup", help="delete the Jobs, Pods, Services and ConfigMaps earlier runs left behind")
    cu.add_argument("spec")
    cu.set_defaults(func=cmd_cleanup)
    rp = sub.add_parser("report", help="render reports from a run folder")
    rsub = rp.add_subparsers(dest="report", required=True)
    ra = rsub.add_parser("allure", help="the Allure HTML report as a single file (needs allure-commandline, Java 17)")
    ra.add_argument("run_dir")
    ra.add_argument("--out", default=None, help="output folder (default: RUN_DIR-allure beside the run folder)")
    ra.set_defaults(func=cmd_report_allure)
    i = sub.add_parser("init", help="draft a spec from what a cluster (or a simulated fleet) runs, read only")
    where = i.add_mutually_exclusive_group()
    where.add_argument("--context", default=None, help="kubeconfig context of the cluster (default: the current one)")
    where.add_argument("--simulated", metavar="FLEET", default=None, help="a SimulatedFleet file instead of a cluster")
    i.add_argument("--out", default=None, help="write the spec here (default: print it)")
    i.add_argument("--name", default=None, help="metadata.name (default: the context or fleet name)")
    i.add_argument(
        "--baselines", default=None, help="the SKU baselines to match products with (default: baselines/gpus)"
    )
    i.add_argument("--force", action="store_true", help="replace --out if it exists")
    i.set_defaults(func=cmd_init)
    s = sub.add_parser("schema", help="write the JSON Schemas of the spec, fleet, baseline and evidence")
    s.add_argument("--out", default="schemas")
    s.set_defaults(func=cmd_schema)
    return p


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: the measure phase deletes what it created


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code: int = args.func(args)
    except GpucertError as exc:
        print(f"gpucert: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpucert: interrupted; the evidence measured so far is in the run folder", file=sys.stderr)
        return EXIT_INCOMPLETE
    return code


if __name__ == "__main__":
    sys.exit(main())
