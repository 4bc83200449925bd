"""`gpucert metrics`: the fleet's certification state in the Prometheus exposition format, with the official
`prometheus_client`, as a file for node-exporter's textfile collector or from a small HTTP exporter.

Each scrape (or write) reads the state afresh through fleetstate: the newest run folder per node under the reports
folder and, with a spec whose target has nodes, the nodes as they stand (gpucert.io/* labels and annotations).
Run folders are read once each and their figures cached, so a scrape costs one listing of the folder and, against
a cluster, one paged list of nodes. Cardinality stays bounded by the fleet: nodes x GPUs x metrics for the
per-GPU series, whose labels never carry a run id; `gpucert_run_info` has one series per run that is some node's
newest. A scrape that cannot read the cluster fails (HTTP 500, so Prometheus marks the target down) rather than
export a partial fleet.
"""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpucert.errors import ConfigError, GpucertError
from gpucert.evaluate.index import GpuIndex
from gpucert.evaluate.view import RunView
from gpucert.fleet import exporter
from gpucert.fleet.exporter import parse_listen
from gpucert.fleet.fabric_metrics import FabricSeries
from gpucert.fleet.index_metrics import NodeIndex, index_families, node_index
from gpucert.fleet.state import NodeStatus, RunIndex, RunRecord, node_statuses
from gpucert.measure.targets.base import NodeControl
from gpucert.plan.checks import GPU_METRICS, NODE_METRICS
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.fabric import FabricSpec

if TYPE_CHECKING:
    from gpucert.fleet.soak.metrics import SoakGauges

__all__ = [
    "CLUSTER_TIMEOUT_S",
    "FleetCollector",
    "SpecWatch",
    "parse_listen",
    "registry_for",
    "serve",
    "write_textfile",
]

SCHEDULE_OUTCOMES = ("passed", "failed", "withheld", "error", "skipped")
# the cluster read's own deadline: inside Prometheus' default scrape_timeout (10 s), whatever the client's retries
CLUSTER_TIMEOUT_S = 8.0


@dataclass
class SpecWatch:
    """The spec file the exporter serves, read again (with its target) when it changes: a ConfigMap update, an
    edited nodeSelector or context. A spec that no longer loads fails the scrape until it is fixed."""

    path: Path
    load: Callable[[Path], tuple[ClusterSpec, NodeControl | None]]
    _seen: tuple[int, int, int] | None = field(default=None, init=False)

    def _key(self) -> tuple[int, int, int]:
        st = self.path.stat()  # follows the ..data link a ConfigMap volume swaps
        return st.st_ino, st.st_mtime_ns, st.st_size

    def changed(self) -> bool:
        try:
            return self._key() != self._seen
        except OSError:
            return True  # gone or unreadable: loading it says why

    def read(self) -> tuple[ClusterSpec, NodeControl | None]:
        try:
            key = self._key()
        except OSError:
            key = None
        spec, control = self.load(self.path)
        if key is not None:
            self._seen = key
        return spec, control


@dataclass(eq=False)  # registered by identity
class FleetCollector(Collector):
    """A prometheus_client collector over the run folders under `reports` (of `spec`, when given) and the nodes
    `control` reports (when given)."""

    reports: Path
    spec: ClusterSpec | None = None
    control: NodeControl | None = None
    cluster_timeout_s: float = CLUSTER_TIMEOUT_S
    watch: SpecWatch | None = None
    index: RunIndex = field(init=False)
    _ratios: dict[tuple[str, str], list[tuple[str, str, float]]] = field(default_factory=dict, init=False)
    _indices: dict[tuple[str, str], list[GpuIndex]] = field(default_factory=dict, init=False)
    _views: dict[str, RunView | None] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _fabric: FabricSeries = field(default_factory=FabricSeries, init=False)
    _soak: SoakGauges = field(init=False)

    def __post_init__(self) -> None:
        from gpucert.fleet.soak.metrics import SoakGauges

        self.index = RunIndex(self.reports)
        self._soak = SoakGauges(self.reports)
        if self.watch is not None:
            self.spec, self.control = self.watch.read()

    # ---- what is read --------------------------------------------------------------------------------------------

    def runs(self) -> list[RunRecord]:
        try:
            is_dir = stat.S_ISDIR(self.reports.stat().st_mode)
        except FileNotFoundError:
            is_dir = True  # not made yet: no runs
        except OSError as exc:  # under a file, a name too long: not a folder this can ever hold runs in
            raise ConfigError(
                f"cannot be read ({exc.strerror}): --reports names the folder of run folders", path=self.reports
            ) from None
        if not is_dir:
            raise ConfigError("is not a folder: --reports names the folder of run folders", path=self.reports)
        if self.spec is not None:
            return self.index.runs(self.spec.metadata.name)
        runs = self.index.runs()
        specs = sorted({r.spec for r in runs if r.spec is not None})
        if len(specs) > 1:
            raise ConfigError(
                f"holds runs of {len(specs)} specs ({', '.join(specs)}): pass --spec SPEC to export one of them",
                path=self.reports,
                key="--spec",
            )
        return runs

    def statuses(self, runs: list[RunRecord]) -> list[NodeStatus]:
        control = self.control
        cluster = (
            exporter.bounded(control.nodes, self.cluster_timeout_s, "the cluster's node list")
            if control is not None
            else None
        )
        return node_statuses(runs, cluster, self.spec)

    def _view(self, folder: RunFolder) -> RunView | None:
        """The run as the evaluation judged it (its inputs' spec and baselines), or None when they cannot be read."""
        if folder.id not in self._views:
            try:
                self._views[folder.id] = RunView.from_run(folder)
            except (GpucertError, OSError, ValueError):
                self._views[folder.id] = None
        return self._views[folder.id]

    def ratios(self, folder: RunFolder, node: str) -> list[tuple[str, str, float]]:
        """(metric, gpu, measured median / SKU figure) of the node's evidence in the run; gpu "" for the node's
        all-reduce. The figure is the evaluation's (RunView.sampled): one whose samples cannot be believed (fewer
        than the spec asks of the probe, not positive, absurd) has no ratio, as it has no pass."""
        key = (folder.id, node)
        if key not in self._ratios:
            view = self._view(folder)
            self._ratios[key], self._indices[key] = _figures(view, node) if view is not None else ([], [])
        return self._ratios[key]

    def indices(self, folder: RunFolder, node: str) -> list[GpuIndex]:
        """The node's performance index in the run (fleet/index_metrics.py), read with its ratios."""
        self.ratios(folder, node)
        return self._indices[(folder.id, node)]

    def _expected_gpus(self, pool: str, indices: list[GpuIndex]) -> list[int]:
        """The GPUs a node of the pool should have figures of: the spec's count where it is known."""
        count = next((p.expect.gpus_per_node for p in self.spec.pools if p.name == pool), 0) if self.spec else 0
        return sorted(set(range(count)) | {i.gpu for i in indices})

    # ---- the series ----------------------------------------------------------------------------------------------

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # the series depend on the fleet: registering reads nothing

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self.watch is not None and self.watch.changed():
                self.spec, self.control = self.watch.read()
            runs = self.runs()
            statuses = self.statuses(runs)
            families = self._families(runs, statuses)
        yield from families

    def _families(self, runs: list[RunRecord], statuses: list[NodeStatus]) -> list[Metric]:
        certified = GaugeMetricFamily(
            "gpucert_node_certified",
            "Whether the node's newest certification passed (1) or not (0: failed, incomplete, unreadable, or the "
            "node was never certified).",
            labels=["node", "pool"],
        )
        last = GaugeMetricFamily(
            "gpucert_node_last_certified_timestamp_seconds",
            "When the node was last measured for a certification it passed, in seconds since the epoch (no series "
            "for a node never certified).",
            labels=["node", "pool"],
            unit="seconds",
        )
        failed = GaugeMetricFamily(
            "gpucert_check_failed",
            "A check that failed or errored in the node's newest certification (1); gpu is empty for a node-level "
            "check, node for a fleet-level one. Passing checks have no series.",
            labels=["check", "node", "gpu"],
        )
        ratio = GaugeMetricFamily(
            "gpucert_metric_ratio_to_baseline",
            "The GPU's measured median over the SKU baseline's figure for the metric, in the node's newest "
            "certification (1 is the SKU figure; gpu is empty for the node's all-reduce).",
            labels=["metric", "node", "gpu"],
        )
        info = GaugeMetricFamily(
            "gpucert_run_info",
            "A run folder holding the newest certification of at least one node (value 1), with its spec and result.",
            labels=["run", "spec", "result"],
        )
        unreadable = GaugeMetricFamily(
            "gpucert_run_folders_unreadable",
            "Run folders whose verdict.json cannot be read; the nodes they held count as not certified.",
        )
        newest_runs: dict[str, RunRecord] = {}
        by_id = {r.id: r for r in runs}
        used: set[tuple[str, str]] = set()
        performance: list[NodeIndex] = []
        for s in statuses:
            certified.add_metric([s.node, s.pool], 1.0 if s.certified else 0.0)
            if s.certified_at is not None:
                last.add_metric([s.node, s.pool], s.certified_at.timestamp())
            j = s.latest
            got = self.indices(j.folder, s.node) if j is not None and j.folder is not None else []
            performance.append(NodeIndex(s.node, s.pool, got, self._expected_gpus(s.pool, got)))
            if j is None:
                continue
            for f in sorted({(f.check, f.gpu) for f in j.failing}, key=lambda c: (c[0], -1 if c[1] is None else c[1])):
                failed.add_metric([f[0], s.node, "" if f[1] is None else str(f[1])], 1.0)
            if j.folder is not None:
                used.add((j.folder.id, s.node))
                for metric, gpu, value in self.ratios(j.folder, s.node):
                    ratio.add_metric([metric, s.node, gpu], value)
            if j.run in by_id:
                newest_runs[j.run] = by_id[j.run]
        # the fleet as a whole (the all-reduce across nodes), as the newest certification of the fleet found it
        fleet = next((r for r in runs if not r.recertification), None)
        for check in sorted({f.check for f in fleet.fleet_failing}) if fleet is not None else []:
            failed.add_metric([check, "", ""], 1.0)
        for r in sorted(newest_runs.values(), key=lambda r: r.id):
            info.add_metric([r.id, r.spec or "", r.result], 1.0)
        unreadable.add_metric([], float(sum(1 for r in runs if r.problem is not None)))
        # keep only what this scrape used: the cache stays as large as the fleet, however many runs accumulate
        self._ratios = {k: v for k, v in self._ratios.items() if k in used}
        self._indices = {k: v for k, v in self._indices.items() if k in used}
        self._views = {k: v for k, v in self._views.items() if k in {run for run, _ in used}}
        fabric = self._fabric.families(
            [(by_id[run].folder, node) for run, node in sorted(used) if run in by_id], self._rails(statuses)
        )
        self._fabric.keep(used)
        soak = self._soak.families(self.spec.metadata.name if self.spec is not None else None)
        index = index_families(performance)
        return [certified, last, failed, ratio, *index, info, unreadable, *fabric, *self._schedule(), *soak]

    def _rails(self, statuses: list[NodeStatus]) -> dict[str, FabricSpec]:
        """Each node's pool fabric, where the spec is known and declares one: it says which port is which rail."""
        pools = {p.name: p.fabric for p in self.spec.pools if p.fabric is not None} if self.spec else {}
        return {s.node: pools[s.pool] for s in statuses if s.pool in pools}

    def _schedule(self) -> list[GaugeMetricFamily]:
        from gpucert.fleet.schedule import last_schedule

        record = last_schedule(self.reports, self.spec.metadata.name if self.spec is not None else None)
        if record is None:
            return []
        when = GaugeMetricFamily(
            "gpucert_schedule_last_run_timestamp_seconds",
            "When the last scheduled recertification (gpucert schedule) finished, in seconds since the epoch.",
            unit="seconds",
        )
        when.add_metric([], record.finished.timestamp())
        breaker = GaugeMetricFamily(
            "gpucert_schedule_breaker_open",
            "Whether the last scheduled recertification stopped on its circuit breaker (1): more nodes failed than "
            "its maxFailureShare allows, which is more likely gpucert's or the stack's fault than the hardware's.",
        )
        breaker.add_metric([], 1.0 if record.breaker_open else 0.0)
        nodes = GaugeMetricFamily(
            "gpucert_schedule_nodes",
            "The nodes of the last scheduled recertification by outcome (passed, failed, withheld: failed but left "
            "unmarked by the circuit breaker, error: could not complete, skipped: chosen but not taken, no longer "
            "eligible or after the breaker opened).",
            labels=["outcome"],
        )
        for outcome in SCHEDULE_OUTCOMES:
            nodes.add_metric([outcome], float(record.counts.get(outcome, 0)))
        return [when, breaker, nodes]


def _figures(view: RunView, node: str) -> tuple[list[tuple[str, str, float]], list[GpuIndex]]:
    """The node's ratios to the SKU figures and its performance index, read from its evidence at once."""
    try:
        ev = view.measured_node(node)
        slots = [(m, g.index) for g in ev.gpus for m in GPU_METRICS] + [(m, None) for m in NODE_METRICS] if ev else []
        out = []
        for metric, gpu in slots:
            expected, sampled = view.expected(node, metric), view.sampled(metric, node, gpu)
            if expected is not None and sampled is not None:
                out.append((metric, "" if gpu is None else str(gpu), sampled.value / expected))
        return out, node_index(view, node, ev) if ev is not None else []
    except (GpucertError, OSError, ValueError):  # unreadable evidence, a node in no pool: no figure to show
        return [], []
    finally:
        view.release(node)  # the ratios are kept; the evidence is not


def registry_for(collector: FleetCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def write_textfile(collector: FleetCollector, path: Path) -> None:
    """Write the series to `path` for node-exporter's textfile collector (atomically: a scrape never sees half)."""
    if path.suffix != ".prom":
        raise ConfigError(
            "node-exporter's textfile collector reads only files named *.prom: name the file so", key="--textfile"
        )
    if not path.parent.is_dir():
        raise ConfigError(
            f"{path.parent} is not a folder: point --textfile into the collector's folder", key="--textfile"
        )
    write_to_textfile(str(path), registry_for(collector))


def serve(
    collector: FleetCollector,
    listen: str,
    *,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve /metrics on `listen` until interrupted (Ctrl-C or SIGTERM), or until `stop` is set (report.exporter)."""
    exporter.serve(registry_for(collector), listen, ready=ready, stop=stop)
