"""`gpucert metrics` over the run folders of a simulated fleet, through the `gpucert` command: the series, their
values and help text, a failed node, a node never certified, a newer recertification, a scheduled round, an
unreadable verdict, careless options; and the Grafana dashboard's queries against what the exporter emits."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpucert.cli import main as cli
from gpucert.errors import ConfigError, IncompleteRunError
from gpucert.fleet import exporter
from gpucert.fleet.metrics import FleetCollector, SpecWatch, registry_for
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import NodeTarget
from gpucert.spec.cluster import load_spec

from ..in_process import gpucert_here, next_second
from .conftest import ROOT

SPEC = "examples/clean.yaml"
FLEET = "examples/fleets/h100-4x8.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "gpucert-fleet.json"
Series = dict[str, list[tuple[dict[str, str], float]]]


@dataclass
class Exposition:
    text: str

    @property
    def families(self) -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(self.text)}

    @property
    def series(self) -> Series:
        out: Series = {}
        for family in text_string_to_metric_families(self.text):
            for s in family.samples:
                out.setdefault(s.name, []).append((s.labels, s.value))
        return out

    def by_node(self, name: str) -> dict[str, float]:
        return {labels["node"]: v for labels, v in self.series.get(name, [])}


@dataclass
class Fleet:
    project: Path
    certification: Path  # the run folder of the fleet's certification
    recertification: Path  # gpu-node-2's, after its repair
    after_certify: Exposition
    after_recertify: Exposition


def metrics(project: Path, name: str, *args: str) -> Exposition:
    out = project / f"{name}.prom"
    r = gpucert_here("metrics", "--spec", SPEC, "--textfile", str(out), *args, cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    return Exposition(out.read_text())


def set_fleet(project: Path, count: int, *faults: dict[str, Any]) -> None:
    doc = yaml.safe_load((project / FLEET).read_text())
    doc["nodes"]["count"] = count
    doc["faults"] = list(faults)
    (project / FLEET).write_text(yaml.safe_dump(doc))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """The clean 4-node fleet certified with one GPU 15% slow; then the GPU repaired and a fifth node added (never
    certified); gpu-node-2 recertified; one scheduled round."""
    project = tmp_path_factory.mktemp("fleet")
    shutil.copytree(ROOT / "examples", project / "examples")
    shutil.copytree(ROOT / "baselines", project / "baselines")
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    set_fleet(
        project, 4, {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.85}
    )
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    certification = sorted((project / "reports").iterdir())[-1]
    set_fleet(project, 5)
    first = metrics(project, "after-certify")
    args = ("--spec", SPEC, "-q", "--sign-key", "keys/gpucert.key", "--without-handover")
    next_second()  # the recertification newer than the certification, as it is in the field
    r = gpucert_here("recertify", "gpu-node-2", *args, cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    recertification = sorted((project / "reports").glob("*recertify-gpu-node-2"))[-1]
    next_second()
    r = gpucert_here(
        "schedule",
        SPEC,
        "--without-handover",
        "--max-nodes",
        "1",
        "--max-cordoned-share",
        "0.5",
        "--sign-key",
        "keys/gpucert.key",
        cwd=project,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return Fleet(project, certification, recertification, first, metrics(project, "after-recertify"))


def test_every_series_is_a_gauge_with_help_and_prometheus_names(fleet: Fleet) -> None:
    families = fleet.after_recertify.families
    assert set(families) == {
        "gpucert_node_certified",
        "gpucert_node_last_certified_timestamp_seconds",
        "gpucert_check_failed",
        "gpucert_metric_ratio_to_baseline",
        "gpucert_performance_index",
        "gpucert_pool_capacity_lost_gpus",
        "gpucert_pool_gpus_within_reference_ratio",
        "gpucert_run_info",
        "gpucert_run_folders_unreadable",
        "gpucert_schedule_last_run_timestamp_seconds",
        "gpucert_schedule_breaker_open",
        "gpucert_schedule_nodes",
    }
    for name, family in families.items():
        assert family.type == "gauge", name
        assert len(family.documentation) > 40, name
        assert name.startswith("gpucert_"), name
        assert name == name.lower(), name
    assert "passed (1) or not (0" in families["gpucert_node_certified"].documentation
    assert "SKU baseline's figure" in families["gpucert_metric_ratio_to_baseline"].documentation
    assert families["gpucert_node_last_certified_timestamp_seconds"].unit in ("", "seconds")
    both = [*families.values(), *fleet.after_certify.families.values()]  # a failing check: after the certification
    labels: dict[str, set[tuple[str, ...]]] = {}
    for f in both:
        labels.setdefault(f.name, set()).update(tuple(sorted(s.labels)) for s in f.samples)
    assert labels["gpucert_node_certified"] == {("node", "pool")}
    assert labels["gpucert_check_failed"] == {("check", "gpu", "node")}
    assert labels["gpucert_metric_ratio_to_baseline"] == {("gpu", "metric", "node")}
    assert labels["gpucert_run_info"] == {("result", "run", "spec")}
    assert labels["gpucert_performance_index"] == {("gpu", "metric", "node")}
    assert labels["gpucert_pool_capacity_lost_gpus"] == {("pool",)}


def test_the_index_without_a_handover_is_the_sku_ratio_and_the_pool_counts_what_nothing_measured(
    fleet: Fleet,
) -> None:
    """No run here was held to a handover figure: each GPU's index is its ratio to the SKU figure. The pool's
    capacity lost counts the slow GPU's shortfall and, fail closed, every GPU of the node never certified."""
    e = fleet.after_certify
    ratios = {(lb["node"], lb["metric"], lb["gpu"]): v for lb, v in e.series["gpucert_metric_ratio_to_baseline"]}
    index = {(lb["node"], lb["metric"], lb["gpu"]): v for lb, v in e.series["gpucert_performance_index"]}
    assert len(index) == 4 * 8 * 9  # per GPU: the node's all-reduce has a ratio, not a GPU's index
    assert index == {k: v for k, v in ratios.items() if k[2] != ""}
    (lost,) = [v for lb, v in e.series["gpucert_pool_capacity_lost_gpus"] if lb["pool"] == "default"]
    assert lost > 8 + 0.13  # gpu-node-5's 8 GPUs never measured, and gpu-node-2's GPU 3 at 0.85
    (within,) = [v for lb, v in e.series["gpucert_pool_gpus_within_reference_ratio"] if lb["pool"] == "default"]
    assert within < 32 / 40
    after = fleet.after_recertify  # gpu-node-2 repaired; the scheduled round certified gpu-node-5
    (lost,) = [v for lb, v in after.series["gpucert_pool_capacity_lost_gpus"] if lb["pool"] == "default"]
    assert lost < 1.0


def test_a_failed_node_and_a_node_never_certified(fleet: Fleet) -> None:
    e = fleet.after_certify
    assert e.by_node("gpucert_node_certified") == {
        "gpu-node-1": 1.0,
        "gpu-node-2": 0.0,
        "gpu-node-3": 1.0,
        "gpu-node-4": 1.0,
        "gpu-node-5": 0.0,  # added to the fleet since: never certified
    }
    assert {labels["pool"] for labels, _ in e.series["gpucert_node_certified"]} == {"default"}
    last = e.by_node("gpucert_node_last_certified_timestamp_seconds")
    assert set(last) == {"gpu-node-1", "gpu-node-3", "gpu-node-4"}  # no series for a node that never passed
    measured = json.loads((fleet.certification / "verdict.json").read_text())["nodes"]["gpu-node-1"]["measured"]
    assert last["gpu-node-1"] == pytest.approx(
        __import__("datetime").datetime.fromisoformat(measured.replace("Z", "+00:00")).timestamp()
    )
    failed = [(labels["check"], labels["node"], labels["gpu"]) for labels, v in e.series["gpucert_check_failed"]]
    assert failed == [("memory.bandwidth", "gpu-node-2", "3")]
    run = fleet.certification.name
    assert e.series["gpucert_run_info"] == [({"run": run, "spec": "clean-h100-pod-a", "result": "fail"}, 1.0)]
    assert e.series["gpucert_run_folders_unreadable"] == [({}, 0.0)]
    assert "gpucert_schedule_breaker_open" not in e.series  # no round has run yet


def test_the_ratio_is_the_measured_median_over_the_sku_figure(fleet: Fleet) -> None:
    ratios = {
        (labels["node"], labels["metric"], labels["gpu"]): v
        for labels, v in fleet.after_certify.series["gpucert_metric_ratio_to_baseline"]
    }
    evidence = json.loads((fleet.certification / "evidence" / "gpu-node-2.json").read_text())
    samples = evidence["gpus"][3]["measurements"]["memory.bandwidth"]["samples"]
    assert ratios[("gpu-node-2", "memory.bandwidth", "3")] == pytest.approx(statistics.median(samples) / 2900)
    assert ratios[("gpu-node-2", "memory.bandwidth", "3")] == pytest.approx(0.85, abs=0.03)
    assert ratios[("gpu-node-2", "memory.bandwidth", "2")] == pytest.approx(1.0, abs=0.03)
    busbw = max(evidence["nccl"]["points"], key=lambda p: p["size_bytes"])["busbw"]
    assert ratios[("gpu-node-2", "nccl.all_reduce", "")] == pytest.approx(statistics.median(busbw) / 460)
    # bounded: GPUs x metrics per node measured, one all-reduce per node, and never a run id in these labels
    assert len(ratios) == 4 * (8 * 9 + 1)
    assert {node for node, _, _ in ratios} == {"gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"}


def test_a_newer_recertification_speaks_for_its_node(fleet: Fleet) -> None:
    e = fleet.after_recertify
    certified = e.by_node("gpucert_node_certified")
    assert certified["gpu-node-2"] == 1.0
    assert not [s for s in e.series.get("gpucert_check_failed", []) if s[0]["node"] == "gpu-node-2"]
    ratio = {
        (labels["node"], labels["metric"], labels["gpu"]): v
        for labels, v in e.series["gpucert_metric_ratio_to_baseline"]
    }
    assert ratio[("gpu-node-2", "memory.bandwidth", "3")] == pytest.approx(1.0, abs=0.03)  # repaired
    runs = {labels["run"]: labels["result"] for labels, _ in e.series["gpucert_run_info"]}
    assert runs[fleet.recertification.name] == "pass"
    assert runs[fleet.certification.name] == "fail"  # still the newest for gpu-node-1, 3 and 4
    assert e.by_node("gpucert_node_last_certified_timestamp_seconds")["gpu-node-2"] > 0


def test_the_scheduled_round_took_the_node_never_certified(fleet: Fleet) -> None:
    e = fleet.after_recertify
    record = json.loads(sorted((fleet.project / "reports" / ".schedule").glob("*.json"))[-1].read_text())
    assert record["chosen"] == ["gpu-node-5"]
    outcome = record["outcomes"]["gpu-node-5"]["outcome"]
    assert {labels["outcome"]: v for labels, v in e.series["gpucert_schedule_nodes"]}[outcome] == 1.0
    assert e.series["gpucert_schedule_breaker_open"] == [({}, 0.0)]
    assert "gpu-node-5" in e.by_node("gpucert_node_certified")


def test_an_unreadable_verdict_is_never_certified(fleet: Fleet, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    shutil.copytree(fleet.project / "reports", reports, ignore=shutil.ignore_patterns("allure-results"))
    (reports / fleet.recertification.name / "verdict.json").write_text('{"schema": "gpucert.io/verdict/v2", "resu')
    spec = load_spec(fleet.project / SPEC)
    text = generate_latest(registry_for(FleetCollector(reports, spec))).decode()
    e = Exposition(text)
    assert e.by_node("gpucert_node_certified")["gpu-node-2"] == 0.0  # its newest run cannot be read: not a pass
    assert e.series["gpucert_run_folders_unreadable"] == [({}, 1.0)]
    runs = {labels["run"]: labels["result"] for labels, _ in e.series["gpucert_run_info"]}
    assert runs[fleet.recertification.name] == "unknown"


def test_careless_options_are_one_line_errors(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(fleet.project)

    def refused(*args: str) -> str:
        assert cli.main(list(args)) == 2, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        return err

    assert "--textfile: node-exporter's textfile" in refused("metrics", "--spec", SPEC, "--textfile", "fleet.txt")
    assert "is not a folder" in refused("metrics", "--spec", SPEC, "--textfile", str(tmp_path / "nowhere" / "a.prom"))
    assert "--serve: '9400' is not [HOST]:PORT" in refused("metrics", "--spec", SPEC, "--serve", "9400")
    assert "is not [HOST]:PORT" in refused("metrics", "--spec", SPEC, "--serve", ":99999")
    assert "say where the series go" in refused("metrics", "--spec", SPEC)
    assert "nope.yaml" in refused("metrics", "--spec", "nope.yaml", "--textfile", "a.prom")
    assert "README.md' is a file: name a folder" in refused(
        "metrics", "--reports", str(ROOT / "README.md"), "--textfile", "a.prom"
    )
    assert "--max-nodes: 0 is less than 1: give 1 or more" in refused("schedule", SPEC, "--max-nodes", "0")
    assert "--max-failure-share: '1.5' is not a share from 0 to 1" in refused(
        "schedule", SPEC, "--max-nodes", "1", "--max-failure-share", "1.5"
    )
    # two specs' runs in one folder, and no --spec to choose: refused rather than mixed
    other = tmp_path / "reports"
    shutil.copytree(fleet.certification, other / fleet.certification.name, ignore=shutil.ignore_patterns("allure*"))
    twin = other / "2027-01-01T00-00-00Z-other"
    shutil.copytree(fleet.certification, twin, ignore=shutil.ignore_patterns("allure*"))
    verdict = json.loads((twin / "verdict.json").read_text())
    verdict["spec"] = "other-pod-b"
    (twin / "verdict.json").write_text(json.dumps(verdict))
    err = refused("metrics", "--reports", str(other), "--textfile", str(tmp_path / "a.prom"))
    assert "holds runs of 2 specs (clean-h100-pod-a, other-pod-b): pass --spec SPEC" in err
    assert not (tmp_path / "a.prom").exists()


# ---- the exporter over HTTP -------------------------------------------------------------------------------------


class Cluster:
    """A NodeControl stand-in for the exporter, which reads only `nodes()`: one that fails, or one that hangs."""

    def __init__(self, *, error: Exception | None = None, hang_s: float = 0.0) -> None:
        self.error, self.hang_s = error, hang_s

    def nodes(self) -> list[Any]:
        if self.hang_s:
            time.sleep(self.hang_s)  # as a client retrying a hung API server five times over a 3 s read timeout
        if self.error is not None:
            raise self.error
        return []


@contextlib.contextmanager
def exporter_at(collector: FleetCollector, log: list[str]) -> Iterator[str]:
    port = free_port()
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=exporter.serve,
        args=(registry_for(collector), f"127.0.0.1:{port}"),
        kwargs={"ready": ready, "stop": stop, "log": log.append},
        daemon=True,
    )
    thread.start()
    try:
        assert ready.wait(10)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(10)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read().decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_exporter_serves_metrics_only(fleet: Fleet) -> None:
    """prometheus_client 0.26.0 answers every path with the metrics (exposition.py, make_wsgi_app); gpucert's
    exporter answers /metrics and 404 elsewhere."""
    log: list[str] = []
    with exporter_at(FleetCollector(fleet.project / "reports", load_spec(fleet.project / SPEC)), log) as url:
        status, text = get(f"{url}/metrics")
        assert status == 200
        assert "gpucert_node_certified" in text
        for path in ("/", "/metrics/", "/metrics/x", "/favicon.ico", "/index.html"):
            status, text = get(url + path)
            assert (status, text) == (404, "not found: gpucert serves /metrics only\n"), path
    assert log == []


def test_a_failed_cluster_read_is_its_own_one_line_500(fleet: Fleet, capfd: pytest.CaptureFixture[str]) -> None:
    spec = load_spec(fleet.project / SPEC)
    refused = Cluster(error=IncompleteRunError("GET nodes: the API server did not answer after 5 tries (HTTP 503)"))
    log: list[str] = []
    collector = FleetCollector(fleet.project / "reports", spec, refused)  # type: ignore[arg-type]
    with exporter_at(collector, log) as url:
        status, text = get(f"{url}/metrics")
    assert status == 500  # Prometheus marks the target down rather than scrape a partial fleet
    assert text == "scrape failed: GET nodes: the API server did not answer after 5 tries (HTTP 503)\n"
    assert log == ["gpucert metrics: scrape failed: GET nodes: the API server did not answer after 5 tries (HTTP 503)"]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_the_cluster_read_is_bounded_by_its_own_timeout(fleet: Fleet) -> None:
    spec = load_spec(fleet.project / SPEC)
    hung = Cluster(hang_s=5.0)
    log: list[str] = []
    collector = FleetCollector(fleet.project / "reports", spec, hung, cluster_timeout_s=0.3)  # type: ignore[arg-type]
    with exporter_at(collector, log) as url:
        t0 = time.monotonic()
        status, text = get(f"{url}/metrics")
        took = time.monotonic() - t0
    assert status == 500
    assert "the cluster's node list did not answer within 0.3 s (--cluster-timeout)" in text
    assert took < 2.0, took


def test_a_folder_or_fifo_for_a_verdict_is_unreadable_not_skipped(fleet: Fleet, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    shutil.copytree(fleet.project / "reports", reports, ignore=shutil.ignore_patterns("allure-results"))
    (reports / fleet.certification.name / "verdict.json").unlink()
    os.mkfifo(reports / fleet.certification.name / "verdict.json")  # reading it would block for ever
    (reports / fleet.recertification.name / "verdict.json").unlink()
    (reports / fleet.recertification.name / "verdict.json").mkdir()
    collector = FleetCollector(reports, load_spec(fleet.project / SPEC))
    text = exporter.bounded(lambda: generate_latest(registry_for(collector)).decode(), 60, "the scrape")
    e = Exposition(text)
    assert e.series["gpucert_run_folders_unreadable"] == [({}, 2.0)]
    certified = e.by_node("gpucert_node_certified")
    assert certified["gpu-node-2"] == 0.0  # its two newest runs cannot be read: not a pass
    runs = {labels["run"]: labels["result"] for labels, _ in e.series["gpucert_run_info"]}
    assert runs[fleet.recertification.name] == "unknown"


def corrupt(path: Path) -> None:
    path.write_text('{"finished": "2026-')


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)  # reading it would block for ever


def folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("spoil", [corrupt, fifo, folder, Path.unlink], ids=["corrupt", "fifo", "folder", "missing"])
def test_a_run_whose_run_json_cannot_be_read_is_unreadable_never_a_pass(
    fleet: Fleet, tmp_path: Path, spoil: Any
) -> None:
    """Issue 23 item 9: the run's time came from its folder name or mtime and its PASS verdict counted."""
    reports = tmp_path / "reports"
    shutil.copytree(fleet.project / "reports", reports, ignore=shutil.ignore_patterns("allure-results"))
    spoil(reports / fleet.recertification.name / "run.json")
    collector = FleetCollector(reports, load_spec(fleet.project / SPEC))
    e = Exposition(exporter.bounded(lambda: generate_latest(registry_for(collector)).decode(), 60, "the scrape"))
    assert e.by_node("gpucert_node_certified")["gpu-node-2"] == 0.0  # its newest run (a PASS) cannot be dated
    assert e.series["gpucert_run_folders_unreadable"] == [({}, 1.0)]
    runs = {labels["run"]: labels["result"] for labels, _ in e.series["gpucert_run_info"]}
    assert runs[fleet.recertification.name] == "unknown"


def test_the_spec_and_its_target_are_read_again_when_the_spec_changes(fleet: Fleet) -> None:
    examples = fleet.project / "examples"
    watched = examples / "watched.yaml"
    shutil.copy(examples / "clean.yaml", watched)
    six = yaml.safe_load((fleet.project / FLEET).read_text())
    six["nodes"]["count"] = 6
    (examples / "fleets" / "six.yaml").write_text(yaml.safe_dump(six))

    def load(path: Path) -> tuple[Any, Any]:
        spec = load_spec(path)
        target = open_target(spec)
        assert isinstance(target, NodeTarget)
        return spec, target.node_control(fleet.project / "reports")

    collector = FleetCollector(fleet.project / "reports", watch=SpecWatch(watched, load))
    before = Exposition(generate_latest(registry_for(collector)).decode()).by_node("gpucert_node_certified")
    assert sorted(before) == [f"gpu-node-{i}" for i in range(1, 6)]
    doc = yaml.safe_load(watched.read_text())
    doc["target"]["fleet"] = "fleets/six.yaml"
    watched.write_text(yaml.safe_dump(doc))
    after = Exposition(generate_latest(registry_for(collector)).decode()).by_node("gpucert_node_certified")
    assert sorted(after) == [f"gpu-node-{i}" for i in range(1, 7)]
    assert after["gpu-node-6"] == 0.0  # a node the new target has, never certified
    watched.write_text("apiVersion: gpucert.io/v1alpha1\nkind: ClusterSpec\n")  # broken: the scrape fails
    with pytest.raises(ConfigError, match=r"watched\.yaml"):
        generate_latest(registry_for(collector))


# ---- the Grafana dashboard -----------------------------------------------------------------------------------------


def selectors(expr: Any) -> list[str]:
    """Every series name a PromQL expression selects, walking promql_parser's syntax tree."""
    names: list[str] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, promql_parser.VectorSelector):
            names.append(e.name)
        elif isinstance(e, promql_parser.MatrixSelector):
            stack.append(e.vector_selector)
        elif isinstance(e, promql_parser.BinaryExpr):
            stack += [e.lhs, e.rhs]
        elif isinstance(e, promql_parser.AggregateExpr):
            stack += [x for x in (e.expr, e.param) if x is not None]
        elif isinstance(e, promql_parser.Call):
            stack += list(e.args)
        elif isinstance(e, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
            stack.append(e.expr)
    return names


def queries(dashboard: dict[str, Any]) -> list[str]:
    panels = list(dashboard["panels"])
    exprs = []
    while panels:
        p = panels.pop()
        panels += p.get("panels", [])
        exprs += [t["expr"] for t in p.get("targets", [])]
    return exprs


def test_the_dashboard_asks_only_for_series_the_exporter_emits(fleet: Fleet) -> None:
    walked = selectors(promql_parser.parse("rate(a[5m]) + -(b) + max_over_time(c[1h:5m]) + topk(3, d) / (e)"))
    assert sorted(walked) == ["a", "b", "c", "d", "e"]
    dashboard = json.loads(DASHBOARD.read_text())
    emitted = set(fleet.after_recertify.families)
    exprs = queries(dashboard)
    assert len(exprs) >= 12
    asked = set()
    for expr in exprs:
        names = selectors(promql_parser.parse(expr))
        assert names, f"{expr!r} selects no series"
        asked.update(names)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            assert query.startswith("label_values(")
            asked.add(query.removeprefix("label_values(").split(",")[0].strip())
    assert asked <= emitted, f"the dashboard asks for series the exporter does not emit: {asked - emitted}"
    titles = {p["title"] for p in dashboard["panels"]}
    for what in ("Fleet certified", "Nodes by age of certification", "Failing checks by kind"):
        assert what in titles
    heatmaps = [p for p in dashboard["panels"] if p["type"] == "heatmap"]
    assert heatmaps
    assert all(p["repeat"] == "metric" for p in heatmaps)
    assert "gpucert_metric_ratio_to_baseline" in heatmaps[0]["targets"][0]["expr"]
    for series in ("gpucert_performance_index", "gpucert_pool_capacity_lost_gpus"):  # issue 27: a panel for each
        assert any(series in t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])), series
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
