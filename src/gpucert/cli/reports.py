"""The commands that render from a run folder or the contracts: `report allure` (the Allure HTML report as one file)
and `schema` (the JSON Schemas of the documents users write and the evidence)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpucert.errors import ConfigError
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.simulated_fleet import SimulatedFleet

__all__ = ["add_report_commands"]

console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


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
    return 0


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
    return 0


def add_report_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """Register `report allure` and `schema`."""
    rp = sub.add_parser("report", help="render reports from a run folder")
    rsub = rp.add_subparsers(dest="report", required=True)
    ra = rsub.add_parser("allure", help="the Allure HTML report as a single file (needs allure-commandline, Java 17)")
    ra.add_argument("run_dir")
    ra.add_argument("--out", default=None, help="output folder (default: RUN_DIR-allure beside the run folder)")
    ra.set_defaults(func=cmd_report_allure)
    s = sub.add_parser("schema", help="write the JSON Schemas of the spec, fleet, baseline and evidence")
    s.add_argument("--out", default="schemas")
    s.set_defaults(func=cmd_schema)
