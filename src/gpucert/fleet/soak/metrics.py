"""The soak's progress as Prometheus gauges, written beside its rounds (`soak/metrics.prom`, the text format
node_exporter's textfile collector reads) after every round: rounds done of the total, per node its clean hours and
whether it is still in the soak, the ETA, and the controller's share of the wall time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

if TYPE_CHECKING:
    from gpucert.fleet.soak.controller import Progress

__all__ = ["METRICS_FILE", "write_soak_metrics"]

METRICS_FILE = "metrics.prom"


def write_soak_metrics(path: Path, run: str, spec: str, progress: Progress, eta_s: float) -> None:
    """Write the gauges of `progress` to `path` (atomically: prometheus_client writes aside, then renames)."""
    registry = CollectorRegistry()
    labels = ["run", "spec"]
    Gauge("gpucert_soak_rounds_done", "soak rounds judged", labels, registry=registry).labels(run, spec).set(
        progress.round
    )
    Gauge("gpucert_soak_rounds_total", "soak rounds in all", labels, registry=registry).labels(run, spec).set(
        progress.rounds
    )
    Gauge("gpucert_soak_eta_seconds", "seconds until the soak's last round ends", labels, registry=registry).labels(
        run, spec
    ).set(eta_s)
    share = progress.controller_s / progress.wall_s if progress.wall_s > 0 else 0.0
    Gauge(
        "gpucert_soak_controller_overhead_ratio",
        "the controller's time between rounds as a share of the soak's wall time",
        labels,
        registry=registry,
    ).labels(run, spec).set(share)
    node_labels = ["run", "spec", "node", "pool"]
    clean = Gauge(
        "gpucert_soak_node_clean_hours",
        "hours a node has been clean since its clock started",
        node_labels,
        registry=registry,
    )
    running = Gauge(
        "gpucert_soak_node_running", "1 while a node is in the soak, 0 once it left", node_labels, registry=registry
    )
    rounds = Gauge(
        "gpucert_soak_node_rounds", "rounds a node passed since its clock started", node_labels, registry=registry
    )
    for node, v in progress.nodes.items():
        key = (run, spec, node, str(v["pool"]))
        clean.labels(*key).set(v["cleanHours"])
        running.labels(*key).set(1 if v["status"] == "running" else 0)
        rounds.labels(*key).set(v["rounds"])
    write_to_textfile(str(path), registry)
