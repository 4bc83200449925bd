"""The end of a soak: its verdict (`verdict.json`, kind soak), `run.json`, and with a key its signature
(`certificate.intoto.json`, predicate https://gpucert.io/soak/v1) over every file of the run folder, as a
certification's. Written after the controller let go of the run, so the lock is not among the signed files."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucert._version import __version__
from gpucert.files import write_atomic, write_json
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.report import attest
from gpucert.report.soak_html import SoakSeries, render_soak_report
from gpucert.report.soak_verdict import SOAK_PREDICATE_TYPE, soak_predicate, soak_verdict
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.durations import duration_seconds

if TYPE_CHECKING:
    from gpucert.fleet.soak.model import SoakResult

__all__ = ["seal", "write_report"]


def write_report(folder: SoakFolder, plan: dict[str, Any], spec: str, result: SoakResult) -> None:
    """`soak/report.html` from the rounds' summaries, read one round at a time."""
    pools = {str(n["node"]): n["pool"] for n in plan["nodes"]}
    series = SoakSeries()
    for index in range(int(plan["rounds"])):
        summary = folder.read_summary(index)
        if summary is None:
            break
        series.add_round(summary, pools)
    hours = float(plan["rounds"]) * duration_seconds(str(plan["soak"]["round"])) / 3600
    html = render_soak_report(
        run=folder.run.id,
        spec=spec,
        result=result.result,
        hours=hours,
        nodes=result.nodes,
        series=series,
        fabric=result.fabric,
    )
    write_atomic(folder.report_path, html)


def seal(folder: SoakFolder, spec: ClusterSpec, result: SoakResult, sign_key: Path | None) -> str | None:
    """Write the verdict and run.json; sign the folder with `sign_key` (the signer's fingerprint, else None)."""
    plan = folder.read_plan()
    run = folder.run
    verdict = soak_verdict(
        run=run.id,
        spec=spec.metadata.name,
        target=str(plan["target"]),
        result=result.result,
        nodes=result.nodes,
        fabric=result.fabric,
        gpus_per_node=max(p.expect.gpus_per_node for p in spec.pools),
    )
    run.write_verdict(verdict.to_json())
    write_report(folder, plan, spec.metadata.name, result)
    finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    info = {
        "run": run.id,
        "spec": spec.metadata.name,
        "mode": "soak",
        "target": plan["target"],
        "started": plan["started"],
        "finished": finished,
        "gpucert_version": __version__,
    }
    write_json(run.run_info_path, info)
    if sign_key is None:
        return None
    predicate = soak_predicate(
        verdict,
        spec_sha256=attest.sha256_file(run.spec_copy),
        started=str(plan["started"]),
        finished=finished,
        soak={k: plan["soak"][k] for k in ("duration", "round")} | {"rounds": plan["rounds"]},
        nodes=result.nodes,
    )
    _, fingerprint = attest.sign_folder(run.path, sign_key, SOAK_PREDICATE_TYPE, predicate)
    return fingerprint
