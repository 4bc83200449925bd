"""The `gpucert` command: a thin layer over plan, measure, the pytest suites and the run folder.

Exit codes: 0 pass, 1 certification failed, 2 usage or configuration error, 3 could not complete.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpucert._version import __version__
from gpucert.cli.acceptance import add_acceptance_commands
from gpucert.cli.args import PATH_ERRNOS, Parser, count, handover_args, os_error, output_file, seconds, write_output
from gpucert.cli.fleet import RunHooks, add_fleet_commands
from gpucert.cli.history import add_history_command
from gpucert.cli.preflight import add_preflight_command, before_run
from gpucert.cli.soak import add_soak_command
from gpucert.errors import ConfigError, GpucertError, IncompleteRunError
from gpucert.fleet.history import record_run
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets import open_target
from gpucert.plan import run as runner
from gpucert.plan.inventory import Inventory
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.summary import summary_lines, summary_tables
from gpucert.report.terminal import WRITTEN
from gpucert.report.verdict_model import Verdict
from gpucert.resources import project_root
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec, load_spec
from gpucert.spec.names import NameError_, check_node_name
from gpucert.spec.simulated_fleet import SimulatedFleet
from gpucert.stack.gate_inputs import GateInputs

if TYPE_CHECKING:
    from gpucert.acceptance.retest import Source

__all__ = ["main"]

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
SKIP_HELP = "kubernetes: go ahead without `gpucert preflight`'s checks first (the verdict records it)"
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def _load(spec_path: str) -> tuple[ClusterSpec, dict[str, GpuBaseline]]:
    return runner.load_inputs(Path(spec_path))


def _prepare(
    spec: ClusterSpec,
    reports: str,
    mode: runner.Mode,
    evidence: str | None = None,
    source: Source | None = None,
    gate: GateInputs | None = None,
) -> RunFolder:
    """The run folder, through the one entry point the pytest plugin uses too, with a progress bar to watch."""
    if mode not in (runner.Mode.MEASURE, runner.Mode.RETEST):
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
            if mode is runner.Mode.RETEST:
                console.print(f"re-test: [bold]{len(inventory.nodes)}[/] nodes to measure again ({kind})")
            else:
                console.print(f"planned [bold]{len(inventory.nodes)}[/] nodes ({kind})")
            progress.update(task, total=len(inventory.nodes))

        def done(ev: NodeEvidence) -> None:
            progress.update(task, advance=1, description=f"{ev.node}{'' if ev.collected else ' (not measured)'}")

        return runner.prepare(spec, Path(reports), mode, progress=done, planned=planned, source=source)


def _pytest(
    spec_path: str,
    folder: RunFolder,
    workers: int | None,
    quiet: bool,
    signer: str | None = None,
    kept: _KeepVerdict | None = None,
) -> int:
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
    return int(pytest.main(args, plugins=[kept] if kept is not None else None))


STYLES = {"pass": "green", "fail": "red", "incomplete": "yellow", "waived": "magenta", "note": "yellow"}


class _KeepVerdict:
    """Takes the verdict the session wrote, as the session built it: what the command prints, never re-read."""

    verdict: Verdict | None = None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.verdict = config.stash.get(WRITTEN, None)


def _styled(text: str, style: str | None) -> str:
    return f"[{STYLES.get(style, 'red')}]{escape(text)}[/]" if style else escape(text)


def _print_verdict(verdict: Verdict | None, folder: RunFolder) -> int:
    """The verdict's tables and summary (report/summary.py, as pytest's terminal says it) and where the reports are;
    0 for a pass, 1 otherwise."""
    if verdict is None:
        raise IncompleteRunError(f"the evaluation wrote no verdict.json in {folder.path}; see the output above")
    if verdict.recertify is not None:
        console.print(f"[bold]{escape(verdict.recertify.summary)}[/]")
    for t in summary_tables(verdict):
        table = Table(title=t.title, show_lines=False)
        for col in t.columns:
            table.add_column(col, overflow="fold")
        for row in t.rows:
            table.add_row(*(_styled(text, style) for text, style in row))
        console.print(table)
    for line in summary_lines(verdict, shout=False, listed=False):
        said = _styled(line.text, line.style)
        console.print("  " * line.indent + (said if line.indent else f"[bold]{said}[/]"))
    for path in (folder.report_path, folder.allure_dir, folder.junit_path, folder.verdict_path):
        console.print(f"  {path.name:<15} {path}")
    return EXIT_PASS if verdict.passed else EXIT_FAIL


def _evaluate(spec_path: str, folder: RunFolder, *, workers: int | None, quiet: bool, signer: str | None) -> int:
    """Run the suites the folder calls for over it, and print its verdict (0 pass, 1 fail or incomplete)."""
    kept = _KeepVerdict()
    code = _pytest(spec_path, folder, workers, quiet, signer, kept)
    if code == pytest.ExitCode.INTERRUPTED and kept.verdict is not None:
        _print_verdict(kept.verdict, folder)
        raise IncompleteRunError(f"interrupted during evaluation: the verdict in {folder.path} says INCOMPLETE")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise IncompleteRunError(
            f"pytest stopped with exit code {code}; the run folder {folder.path} keeps the evidence measured so far"
        )
    return _print_verdict(kept.verdict, folder)


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
    retest: str | None = None,
    gate: GateInputs | None = None,
    skip_preflight: bool = False,
) -> tuple[int, RunFolder]:
    spec, _ = _load(spec_path)
    checked = before_run(spec, console, skip=skip_preflight) if mode is runner.Mode.MEASURE else None
    source = None
    if retest is not None:
        from gpucert.acceptance.retest import open_source

        keys = [attest.load_private_key(sign_key).public_key()] if sign_key is not None else []
        source = open_source(Path(retest), spec, keys)  # refused before anything is planned or measured
        mode = runner.Mode.RETEST
    folder = _prepare(spec, reports, mode, evidence, source, gate)
    if checked is not None:
        folder.write_preflight(checked)
    result = _evaluate(spec_path, folder, workers=workers, quiet=quiet, signer=signer)
    if sign_key is not None:
        path, fp = attest.sign_run(folder.path, sign_key)
        console.print(f"  {'certificate':<15} {path} (signed by {fp})")
        if mode is runner.Mode.MEASURE:
            record_run(folder, Path(reports))  # each node's history gains this run's figures
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
        retest=a.retest,
        skip_preflight=a.skip_preflight,
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
        record_run(folder, folder.path.parent)  # the node's history gains this run's figures
        return attest.certificate_digest(folder.path)

    return sign


def cmd_recertify(a: argparse.Namespace) -> int:
    from gpucert.fleet.handover_binding import handover_dir, trusted_keys
    from gpucert.fleet.recertify import RecertifyOptions, recertify

    signer = _signer(a.sign_key)
    try:
        check_node_name(a.node)
    except NameError_ as exc:
        raise ConfigError(str(exc), key="NODE") from None
    spec, _ = _load(a.spec)
    checked = before_run(spec, console, skip=a.skip_preflight, node=a.node, drain=a.drain)

    def evaluate(folder: RunFolder) -> int:
        if checked is not None:
            folder.write_preflight(checked)
        return _evaluate(a.spec, folder, workers=None, quiet=a.quiet, signer=signer)

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
        sign=_sign_with(a.sign_key),
        progress=console.print,
    )
    return code


def cmd_baseline_record(a: argparse.Namespace) -> int:
    from gpucert.fleet.handover_binding import spec_nodes_dir
    from gpucert.spec.handover import record_baselines

    if a.force and not a.reason:
        raise ConfigError(
            "--force needs --reason TEXT: why a failed node's figures may serve as its baseline", key="--reason"
        )
    run_dir = Path(a.run_dir)
    written, refused = record_baselines(
        run_dir,
        spec_nodes_dir(Path(a.out), RunFolder(run_dir).spec_name(), run_dir),
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
    if a.summary:
        output_file(Path(a.summary), "--summary")
    code, folder = _run(
        a.spec, a.reports, runner.Mode.STATIC if a.static else runner.Mode.PLAN, quiet=a.quiet, gate=gate
    )
    if a.summary and folder.summary_path.exists():
        try:
            Path(a.summary).parent.mkdir(parents=True, exist_ok=True)
            write_output(Path(a.summary), folder.summary_path.read_text(encoding="utf-8"))
        except OSError as exc:  # checked before the run, yet it failed: no verdict of this run stays to read PASS
            if not folder.holds_evidence:
                shutil.rmtree(folder.path, ignore_errors=True)
            raise ConfigError(f"cannot write the summary: {os_error(exc)}", key="--summary") from None
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
    from gpucert.report.allure import build_html, previous_allure_report, report_name
    from gpucert.report.verdict_model import read_verdict

    run_dir = Path(a.run_dir).resolve()
    folder = RunFolder(run_dir)
    # beside the run folder, not in it: the signed folder stays as it was signed
    out = Path(a.out) if a.out else run_dir.parent / f"{run_dir.name}-allure"
    verdict = read_verdict(folder) if folder.verdict_path.is_file() else None
    previous = previous_allure_report(run_dir, verdict.spec) if verdict else None
    index = build_html(folder.allure_dir, out, name=report_name(verdict) if verdict else None, previous=previous)
    console.print(f"Allure report: {index}")
    console.print(f"  one self-contained file: open it from disk in a browser ({index.as_uri()}); no server needed")
    if previous is not None:
        console.print(f"  trend carried on from {previous}")
    return EXIT_PASS


def cmd_schema(a: argparse.Namespace) -> int:
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder for the schemas: {exc.strerror}", path=out, key="--out") from None
    from gpucert.measure.evidence import FabricEvidence
    from gpucert.measure.evidence import NodeEvidence as Evidence
    from gpucert.spec.handover import NodeBaseline
    from gpucert.spec.waivers import Waivers

    for name, model in (
        ("clusterspec", ClusterSpec),
        ("simulatedfleet", SimulatedFleet),
        ("gpubaseline", GpuBaseline),
        ("nodebaseline", NodeBaseline),
        ("waivers", Waivers),
        ("evidence", Evidence),
        ("fabricevidence", FabricEvidence),
    ):
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(model.model_json_schema(by_alias=True), indent=1) + "\n", encoding="utf-8")
        console.print(f"wrote {path}")
    return EXIT_PASS


def _parser() -> argparse.ArgumentParser:  # noqa: PLR0915
    p = Parser(prog="gpucert", description="Certify a GPU Kubernetes cluster.")
    p.add_argument("--version", action="version", version=f"gpucert {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def runner_args(sp: argparse.ArgumentParser, workers: bool = True) -> None:
        sp.add_argument("--reports", default="reports", help="where the run folder is created (default ./reports)")
        sp.add_argument("-q", "--quiet", action="store_true", help="print less of pytest's progress")
        if workers:
            sp.add_argument(
                "-n", dest="workers", type=count(0), default=None, help="pytest-xdist workers for evaluation"
            )

    d = sub.add_parser("demo", help="certify the embedded simulated 4 x 8 H100 fleet with injected faults")
    runner_args(d)
    d.set_defaults(func=cmd_demo)
    c = sub.add_parser("certify", help="plan, measure, evaluate and report")
    c.add_argument("spec")
    c.add_argument("--sign-key", default=None)
    c.add_argument(
        "--retest",
        metavar="RUN_DIR",
        default=None,
        help="measure only the nodes that did not pass in RUN_DIR (or changed); carry the others' signed evidence",
    )
    c.add_argument("--skip-preflight", action="store_true", help=SKIP_HELP)
    runner_args(c)
    c.set_defaults(func=cmd_certify)
    add_preflight_command(sub, console)
    add_soak_command(sub, console)
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
    handover_args(rc)
    rc.add_argument("--no-cordon", action="store_true", help="measure without cordoning the node first")
    rc.add_argument("--drain", action="store_true", help="evict the GPU pods on the node instead of waiting for them")
    rc.add_argument("--wait-timeout", type=seconds, default=3600, help="seconds to wait for GPU pods (default 3600)")
    rc.add_argument("--sign-key", default=None)
    rc.add_argument("--skip-preflight", action="store_true", help=SKIP_HELP)
    runner_args(rc, workers=False)
    rc.set_defaults(func=cmd_recertify)
    bl = sub.add_parser("baseline", help="handover baselines per node")
    bsub = bl.add_subparsers(dest="baseline", required=True)
    br = bsub.add_parser(
        "record", help="write baselines/nodes/<spec>/<node>.yaml for every node that passed in RUN_DIR"
    )
    br.add_argument("run_dir")
    br.add_argument("--out", default="baselines/nodes", help="under which <spec>/ is written (default baselines/nodes)")
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
    add_acceptance_commands(sub)
    add_fleet_commands(sub, runner_args, RunHooks(_load, _evaluate, _signer, _sign_with))
    add_history_command(sub, console)
    cu = sub.add_parser("cleanup", help="delete the Jobs, Pods, Services and ConfigMaps earlier runs left behind")
    cu.add_argument("spec")
    cu.set_defaults(func=cmd_cleanup)
    rp = sub.add_parser("report", help="render reports from a run folder")
    rsub = rp.add_subparsers(dest="report", required=True)
    ra = rsub.add_parser("allure", help="the Allure HTML report as a single file (needs allure-commandline, Java 17)")
    ra.add_argument("run_dir")
    ra.add_argument("--out", default=None, help="output folder (default: RUN_DIR-allure beside the run folder)")
    ra.set_defaults(func=cmd_report_allure)
    s = sub.add_parser("schema", help="write the JSON Schemas of the spec, fleet, baseline and evidence")
    s.add_argument("--out", default="schemas")
    s.set_defaults(func=cmd_schema)
    return p


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: the measure phase deletes what it created


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse's one-line errors (2), --help and --version (0): returned, as any other
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code: int = args.func(args)
    except GpucertError as exc:
        print(f"gpucert: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a path the system refuses that no code path named: still one line, never a traceback
        print(f"gpucert: error: {os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE if exc.errno in PATH_ERRNOS else EXIT_INCOMPLETE
    except KeyboardInterrupt:
        print("gpucert: interrupted; the evidence measured so far is in the run folder", file=sys.stderr)
        return EXIT_INCOMPLETE
    return code


if __name__ == "__main__":
    sys.exit(main())
