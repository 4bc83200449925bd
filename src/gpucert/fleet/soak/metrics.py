"""The soak's progress as Prometheus gauges, written beside its rounds (`soak/metrics.prom`, the text format
node_exporter's textfile collector reads) after every round: rounds done of the total, per node its clean hours and
whether it is still in the soak, the ETA, and the controller's share of the wall time. `gpucert metrics` exports
the gauges of the newest soak run of its spec (`SoakGauges`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from gpucert.fleet.soak.model import Progress

__all__ = ["METRICS_FILE", "SoakGauges", "write_soak_metrics"]

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
        "gpucert_soak_node_rounds",
        "rounds a node ran in the soak (the one it left in among them)",
        node_labels,
        registry=registry,
    )
    for node, v in progress.nodes.items():
        key = (run, spec, node, str(v["pool"]))
        clean.labels(*key).set(v["cleanHours"])
        running.labels(*key).set(1 if v["status"] == "running" else 0)
        rounds.labels(*key).set(v["rounds"])
    write_to_textfile(str(path), registry)


@dataclass
class SoakGauges:
    """The gauges of the newest soak run under `reports` (of spec `spec`, when given), as its controller last wrote
    them: the run whose id (its start time first) sorts last among those with a `soak/metrics.prom`. The file is
    parsed again only when it changes. One run's series: the cardinality is the soak's nodes. A file that cannot be
    parsed exports no soak series and `gpucert_soak_metrics_unreadable` 1 (the fleet's other series still go out)."""

    reports: Path
    _cache: tuple[Path, tuple[int, int], list[Metric]] | None = field(default=None, init=False)

    def families(self, spec: str | None) -> list[Metric]:
        newest = self._newest(spec)
        if newest is None:
            return []
        path, key = newest
        if self._cache is None or self._cache[:2] != (path, key):
            self._cache = (path, key, _parse(path))
        metrics = self._cache[2]
        unreadable = Metric(
            "gpucert_soak_metrics_unreadable",
            "Whether the newest soak run's soak/metrics.prom could not be parsed (1: its series are missing).",
            "gauge",
        )
        unreadable.add_sample("gpucert_soak_metrics_unreadable", {}, 0.0 if metrics else 1.0)
        return [*metrics, unreadable]

    def _newest(self, spec: str | None) -> tuple[Path, tuple[int, int]] | None:
        # a soak's run id is `<start>-<spec>-soak[-N]` (RunFolder.create): the spec's soaks are found by name
        name = re.compile(rf"\d{{4}}-\d\d-\d\dT\d\d-\d\d-\d\dZ-{re.escape(spec) if spec else '.+'}-soak(-\d+)?")
        runs = [p.name for p in self.reports.iterdir() if name.fullmatch(p.name)] if self.reports.is_dir() else []
        for run in sorted(runs, reverse=True):
            path = self.reports / run / "soak" / METRICS_FILE
            try:
                st = path.stat()
            except OSError:
                continue  # a soak that has not finished a round yet
            return path, (st.st_mtime_ns, st.st_size)
        return None


def _parse(path: Path) -> list[Metric]:
    try:
        return [m for m in text_string_to_metric_families(path.read_text(encoding="utf-8")) if m.samples]
    except (OSError, ValueError, UnicodeDecodeError):
        return []
