"""The commands that render from a run folder or the contracts: `report allure` (the Allure HTML report as one file)
and `schema` (the JSON Schemas of the documents users write and the evidence)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpucert.cli.args import existing_folder, folder_to_write
from gpucert.files import make_folder
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec

__all__ = ["add_report_commands"]

console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def _trend_so_far(run_dir: Path, spec: str) -> tuple[dict[str, bytes], list[str], str | None]:
    """The history the report carries on: the spec's kept one (from an earlier run's report), else the latest
    earlier report of the spec beside this run; with notes on what was left out, and where it came from."""
    from gpucert.report.allure import history_of, previous_allure_report
    from gpucert.report.allure_history import kept_history, store_of, usable

    files, notes = kept_history(run_dir.parent, spec, run_dir.name)
    if files:
        return files, notes, str(store_of(run_dir.parent, spec))
    previous = previous_allure_report(run_dir, spec)
    if previous is None:
        return {}, notes, None
    files, more = usable(history_of(previous))
    return files, [*notes, *(f"{previous}: {n}" for n in more)], str(previous) if files else None


def cmd_report_allure(a: argparse.Namespace) -> int:
    from gpucert.report.allure import build_html, history_of, report_name
    from gpucert.report.allure_history import save_history, store_of
    from gpucert.report.verdict_model import read_verdict

    run_dir = Path(a.run_dir).resolve()
    folder = RunFolder(run_dir)
    # beside the run folder, not in it: the signed folder stays as it was signed
    out = Path(a.out).resolve() if a.out else run_dir.parent / f"{run_dir.name}-allure"
    verdict = read_verdict(folder) if folder.verdict_path.is_file() else None
    files, notes, source = _trend_so_far(run_dir, verdict.spec) if verdict else ({}, [], None)
    index = build_html(folder.allure_dir, out, name=report_name(verdict) if verdict else None, history=files)
    console.print(f"Allure report: {index}")
    console.print(f"  one self-contained file: open it from disk in a browser ({index.as_uri()}); no server needed")
    if source is not None:
        console.print(f"  trend carried on from {source}")
    if verdict is not None:  # the next report of this spec (and the next run's allure-results) carry it on
        notes += save_history(run_dir.parent, verdict.spec, run_dir.name, history_of(index))
        store = store_of(run_dir.parent, verdict.spec)
        if store is not None and store.is_dir():
            console.print(f"  trend kept in {store}")
    for note in notes:
        console.print(f"  trend: {note}")
    return 0


def cmd_schema(a: argparse.Namespace) -> int:
    out = Path(a.out)
    make_folder(
        out,
        not_a_folder="name a folder for the schemas",
        cannot="cannot create the folder for the schemas",
        key="--out",
    )
    from gpucert.measure.evidence import FabricEvidence
    from gpucert.measure.evidence import NodeEvidence as Evidence
    from gpucert.spec.handover import NodeBaseline
    from gpucert.spec.simulated_fleet import SimulatedFleet  # here: every command's start paid for it (~0.1 s)
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
    return 0


def add_report_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """Register `report allure` and `schema`."""
    rp = sub.add_parser("report", help="render reports from a run folder")
    rsub = rp.add_subparsers(dest="report", required=True)
    ra = rsub.add_parser("allure", help="the Allure HTML report as a single file (needs allure-commandline, Java 17)")
    ra.add_argument("run_dir", type=existing_folder)
    ra.add_argument(
        "--out",
        type=folder_to_write,
        default=None,
        help="output folder (default: RUN_DIR-allure beside the run folder)",
    )
    ra.set_defaults(func=cmd_report_allure)
    s = sub.add_parser("schema", help="write the JSON Schemas of the spec, fleet, baseline and evidence")
    s.add_argument("--out", type=folder_to_write, default="schemas")
    s.set_defaults(func=cmd_schema)
