"""The commands that run the suites over a new run folder: `demo`, `certify`, `configure` and `evaluate`; and the
one way every command (recertify and schedule too) prepares a run folder, runs pytest over it and prints its verdict.

Exit codes: 0 pass, 1 certification failed, 2 usage or configuration error, 3 could not complete.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpucert.cli.args import (
    SKIP_HELP,
    existing_file,
    existing_folder,
    file_to_write,
    os_error,
    output_file,
    run_args,
    write_output,
)
from gpucert.cli.preflight import before_run
from gpucert.cli.process import stop_collecting
from gpucert.cli.suites import KeepVerdict, run_pytest, run_suites
from gpucert.errors import ConfigError, IncompleteRunError, RunInterrupted
from gpucert.fleet.history import record_run, use_history
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan import run as runner
from gpucert.plan.inventory import Inventory
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.summary import summary_lines, summary_tables
from gpucert.report.verdict_model import Verdict
from gpucert.resources import project_root
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec
from gpucert.stack.gate_inputs import GateInputs

if TYPE_CHECKING:
    from gpucert.acceptance.retest import Source

__all__ = [
    "EXIT_FAIL",
    "EXIT_PASS",
    "add_run_commands",
    "console",
    "evaluate_run",
    "load_inputs",
    "run_pytest",
    "sign_with",
    "signer_of",
]

EXIT_PASS, EXIT_FAIL = 0, 1
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def load_inputs(spec_path: str) -> tuple[ClusterSpec, dict[str, GpuBaseline]]:
    """The spec and each pool's SKU baseline, validated (ConfigError, exit 2)."""
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


STYLES = {"pass": "green", "fail": "red", "incomplete": "yellow", "waived": "magenta", "note": "yellow"}


def _styled(text: str, style: str | None) -> str:
    return f"[{STYLES.get(style, 'red')}]{escape(text)}[/]" if style else escape(text)


def _print_verdict(verdict: Verdict | None, folder: RunFolder, kept: str | None = None) -> int:
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
    if kept is not None:
        console.print(f"  {escape(kept)}")
    for path in (folder.report_path, folder.allure_dir, folder.junit_path, folder.verdict_path):
        console.print(f"  {path.name:<15} {path}")
    return EXIT_PASS if verdict.passed else EXIT_FAIL


def evaluate_run(folder: RunFolder, *, workers: int | None, quiet: bool, signer: str | None) -> int:
    """Run the suites the folder calls for over it, and print its verdict (0 pass, 1 fail or incomplete)."""
    kept = KeepVerdict()
    code = run_suites(folder, workers, quiet, signer, kept)
    if code == pytest.ExitCode.INTERRUPTED and kept.verdict is not None:
        _print_verdict(kept.verdict, folder, kept.kept)
        raise IncompleteRunError(f"interrupted during evaluation: the verdict in {folder.path} says INCOMPLETE")
    if code == pytest.ExitCode.INTERRUPTED:  # before the session had a verdict (pytest still starting): no word
        raise RunInterrupted(folder.path)  # of its exit code 2, the folder with the evidence instead
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise IncompleteRunError(
            f"pytest stopped with exit code {code}; the run folder {folder.path} keeps the evidence measured so far"
        )
    return _print_verdict(kept.verdict, folder, kept.kept)


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
    spec, _ = load_inputs(spec_path)
    folder: RunFolder | None = None
    try:
        checked = before_run(spec, console, skip=skip_preflight) if mode is runner.Mode.MEASURE else None
        source = None
        if retest is not None:
            source = _source(retest, reports, spec, sign_key)  # refused before anything is planned or measured
            mode = runner.Mode.RETEST
        folder = _prepare(spec, reports, mode, evidence, source, gate)
        if checked is not None:
            folder.write_preflight(checked)
        if mode is runner.Mode.MEASURE:
            keys = [attest.load_private_key(sign_key).public_key()] if sign_key is not None else []
            use_history(folder, Path(reports), spec.metadata.name, keys, console.print)
        stop_collecting()  # what is left of the command: its evaluation and signature (cli/process.py)
        result = evaluate_run(folder, workers=workers, quiet=quiet, signer=signer)
        if sign_key is not None:
            path, fp = attest.sign_run(folder.path, sign_key, rederive=False)  # its verdict was built just now
            console.print(f"  {'certificate':<15} {path} (signed by {fp})")
            if mode is runner.Mode.MEASURE:
                record_run(folder, Path(reports))  # each node's history gains this run's figures
    except KeyboardInterrupt as exc:
        # the CLI says which run folder the interrupt left, or that none was kept (new_run says it of its own)
        if isinstance(exc, RunInterrupted):
            raise
        raise RunInterrupted(folder.path if folder is not None else None) from None
    return result, folder


def _source(retest: str, reports: str, spec: ClusterSpec, sign_key: Path | None) -> Source:
    """The re-test's source run, opened and verified; a --reports inside it is refused: the new run would be
    written into the signed folder, whose certificate would then no longer verify."""
    from gpucert.acceptance.retest import open_source

    keys = [attest.load_private_key(sign_key).public_key()] if sign_key is not None else []
    source = open_source(Path(retest), spec, keys)
    into = Path(reports).resolve()
    if into.is_relative_to(source.folder.path.resolve()):
        raise ConfigError(
            f"{reports} is inside the re-test's source run {source.folder.path}: the new run would be "
            "written into a signed folder and break its certificate; name a folder outside it (e.g. reports)",
            key="--reports",
        )
    return source


def cmd_demo(a: argparse.Namespace) -> int:
    return _run(
        str(project_root() / "examples" / "demo.yaml"),
        a.reports,
        runner.Mode.MEASURE,
        workers=a.workers,
        quiet=True,
    )[0]


def cmd_certify(a: argparse.Namespace) -> int:
    signer = signer_of(a.sign_key)
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


def signer_of(sign_key: str | None) -> str | None:
    """The key's fingerprint, read before anything is measured so a bad key fails first."""
    return attest.fingerprint(attest.load_private_key(Path(sign_key)).public_key()) if sign_key else None


def sign_with(sign_key: str | None) -> Callable[[RunFolder], str | None]:
    """Sign a finished run folder with the key (when one is given); the certificate's digest, or None."""

    def sign(folder: RunFolder) -> str | None:
        if not sign_key:
            return None
        path, fp = attest.sign_run(folder.path, Path(sign_key), rederive=False)
        console.print(f"  {'certificate':<15} {path} (signed by {fp})")
        record_run(folder, folder.path.parent)  # the node's history gains this run's figures
        return attest.certificate_digest(folder.path)

    return sign


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


def add_run_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """Register `demo`, `certify`, `configure` and `evaluate`."""
    d = sub.add_parser("demo", help="certify the embedded simulated 4 x 8 H100 fleet with injected faults")
    run_args(d)
    d.set_defaults(func=cmd_demo)
    c = sub.add_parser("certify", help="plan, measure, evaluate and report")
    c.add_argument("spec", type=existing_file)
    c.add_argument("--sign-key", type=existing_file, default=None)
    c.add_argument(
        "--retest",
        type=existing_folder,
        metavar="RUN_DIR",
        default=None,
        help="measure only the nodes that did not pass in RUN_DIR (or changed); carry the others' signed evidence",
    )
    c.add_argument("--skip-preflight", action="store_true", help=SKIP_HELP)
    run_args(c)
    c.set_defaults(func=cmd_certify)
    k = sub.add_parser("configure", help="the configure suite only (stack, versions, ordering, inventory)")
    k.add_argument("spec", type=existing_file)
    k.add_argument("--static", action="store_true", help="check the recipe without a cluster")
    k.add_argument(
        "--operator-values",
        type=existing_file,
        action="append",
        default=[],
        metavar="FILE",
        help="--static: the gpu-operator chart's values a change edits (several: merged in order, as helm -f)",
    )
    k.add_argument(
        "--cluster-policy",
        type=existing_file,
        action="append",
        default=[],
        metavar="FILE",
        help="--static: a ClusterPolicy manifest",
    )
    k.add_argument("--operator-release", default=None, help="--static: the GPU Operator release (the chart's version)")
    k.add_argument("--base-ref", default=None, help="--static: check baseline changes against this git ref")
    k.add_argument(
        "--summary",
        type=file_to_write,
        default=None,
        metavar="FILE",
        help="--static: also write the Markdown summary here",
    )
    run_args(k, workers=False)
    k.set_defaults(func=cmd_configure)
    e = sub.add_parser("evaluate", help="re-evaluate recorded evidence against a spec and its baselines")
    e.add_argument("spec", type=existing_file)
    e.add_argument("--evidence", type=existing_folder, required=True, help="a run folder or its evidence/ folder")
    run_args(e)
    e.set_defaults(func=cmd_evaluate)
