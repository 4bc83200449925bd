"""Scheduled recertification (`gpucert schedule`) and the exporter (`gpucert metrics`) on a live cluster: the real
`kubernetes` client against the fake API server, the command in the test's process (two rounds started together
each in their own), a fake kubelet whose probe pods report what the simulator measures. Which nodes a round takes,
its budget, busy nodes, the cordon share and the circuit breaker; the RBAC both use, against deploy/."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpucert.errors import IncompleteRunError
from gpucert.fleet.metrics import FleetCollector, registry_for, serve
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import NodeTarget
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.spec.cluster import load_spec

from ..in_process import gpucert_here, next_second
from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import gpu_pod
from .rbac import grants, not_granted, roles_of, unused, verb

ROOT = Path(__file__).resolve().parents[2]
NS = "gpucert"
NODES = [f"gpu-node-{i}" for i in range(1, 7)]


def ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def marked(days: float, *, passed: bool = True) -> dict[str, dict[str, str]]:
    """The labels and annotations a recertification `days` ago left (its run folder is not on this machine)."""
    stamp = {"time": ago(days), "run": f"earlier-run-{days}", "certificate": None}
    annotations = {
        "gpucert.io/last-recertification": json.dumps({**stamp, "result": "pass" if passed else "fail"}),
        "gpucert.io/failing-checks": "" if passed else "memory.bandwidth",
    }
    if passed:
        annotations["gpucert.io/last-certified"] = json.dumps(stamp)
    return {"labels": {"gpucert.io/certified": "true" if passed else "false"}, "annotations": annotations}


@pytest.fixture
def live(served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKubelet]:
    """Six simulated H100 nodes behind the fake API server, a kubelet, a signing key, and spec.yaml."""
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-4x8.yaml").read_text())
    fleet["nodes"]["count"] = len(NODES)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text())
    spec["expect"]["nodes"] = len(NODES)
    spec["target"]["fleet"] = str(tmp_path / "fleet.yaml")
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(spec))
    sim = SimulatedTarget.from_spec(load_spec(tmp_path / "sim.yaml"))
    nodes, pods = sim.observe()
    for n in nodes:
        served_cluster.put("nodes", json.loads(json.dumps(n)))
    for p in pods:
        served_cluster.put("pods", json.loads(json.dumps(p)))
    spec["target"] = {
        "kind": "kubernetes",
        "context": "fake",
        "namespace": NS,
        "maxParallel": 4,
        "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
        "pendingTimeoutSeconds": 5,
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("GPUCERT_LEASE_SECONDS", "3")
    assert gpucert(tmp_path, "keygen", "keys").returncode == 0
    kubelet = FakeKubelet(served_cluster, simulator=sim).start()
    yield kubelet
    kubelet.close()


def gpucert(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gpucert_here(*args, cwd=tmp_path)


def schedule(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    r = gpucert(tmp_path, "schedule", "spec.yaml", "--sign-key", "keys/gpucert.key", "--without-handover", *args)
    records = sorted((tmp_path / "reports" / ".schedule").glob("*.json"))
    return r, json.loads(records[-1].read_text()) if records else {}


def mark(cluster: FakeCluster, name: str, *, cordon: bool = False, **marks: dict[str, str]) -> None:
    node = cluster.get("nodes", None, name)
    assert node is not None
    for key, values in marks.items():
        node["metadata"].setdefault(key, {}).update(values)
    if cordon:
        node.setdefault("spec", {})["unschedulable"] = True
    cluster.put("nodes", node, "MODIFIED")


def node_obj(cluster: FakeCluster, name: str) -> dict[str, Any]:
    obj = cluster.get("nodes", None, name)
    assert obj is not None
    return obj


def ever_cordoned(cluster: FakeCluster, name: str) -> bool:
    return any(
        e[1] == "nodes" and e[4]["metadata"]["name"] == name and (e[4].get("spec") or {}).get("unschedulable")
        for e in cluster.events
    )


def lapsed_lease(node: str) -> dict[str, Any]:
    """What a round killed half-way (OOM, a deleted pod) leaves: a Lease its holder stopped renewing."""
    from gpucert.measure.targets.kubernetes.nodes import KubernetesNodeControl

    stale = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": KubernetesNodeControl.lease_name(node), "namespace": NS},
        "spec": {
            "holderIdentity": "nobody@gone/1",
            "leaseDurationSeconds": 60,
            "acquireTime": stale,
            "renewTime": stale,
        },
    }


def exported(tmp_path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    """`gpucert metrics --spec spec.yaml` as it exports the fleet now, by series name."""
    out = tmp_path / "fleet.prom"
    r = gpucert(tmp_path, "metrics", "--spec", "spec.yaml", "--textfile", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(out.read_text()):
        for s in family.samples:
            series.setdefault(s.name, []).append((s.labels, s.value))
    return series


def by_node(series: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    return {labels["node"]: value for labels, value in series}


def test_oldest_idle_nodes_first_within_the_budget_and_drain_only_when_told(live: FakeKubelet, tmp_path: Path) -> None:
    cluster = live.cluster
    mark(cluster, "gpu-node-1", **marked(10))
    mark(cluster, "gpu-node-2", **marked(30))
    cluster.put("pods", gpu_pod("trainer-0", "gpu-node-3"))  # never certified, but training
    mark(cluster, "gpu-node-4", **marked(20))
    mark(cluster, "gpu-node-5", cordon=True)  # never certified, cordoned by an admin for maintenance
    mark(cluster, "gpu-node-6", **marked(1))
    cluster.put("leases", lapsed_lease("gpu-node-2"))

    before = exported(tmp_path)  # no run folder yet: what the nodes' marks say
    assert by_node(before["gpucert_node_certified"]) == {
        "gpu-node-1": 1.0,
        "gpu-node-2": 1.0,
        "gpu-node-3": 0.0,
        "gpu-node-4": 1.0,
        "gpu-node-5": 0.0,
        "gpu-node-6": 1.0,
    }
    age = {
        n: datetime.now(UTC).timestamp() - t
        for n, t in by_node(before["gpucert_node_last_certified_timestamp_seconds"]).items()
    }
    assert sorted(age) == ["gpu-node-1", "gpu-node-2", "gpu-node-4", "gpu-node-6"]  # the others never passed
    assert 29.9 * 86400 < age["gpu-node-2"] < 30.1 * 86400

    # the first cordon is slow to answer: the lease (3 s here) is renewed while the node is held, on any machine
    cluster.hang("PATCH", "nodes", 1.5)
    r, record = schedule(tmp_path, "--max-nodes", "2", "--max-cordoned-share", "0.5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert record["chosen"] == ["gpu-node-2", "gpu-node-4"]  # the oldest two that may be taken
    assert record["skipped"] == {
        "gpu-node-3": "runs GPU pods (ml-team/trainer-0) and drain is off",
        "gpu-node-5": "cordoned by someone else",
    }
    assert {n: o["outcome"] for n, o in record["outcomes"].items()} == {"gpu-node-2": "passed", "gpu-node-4": "passed"}
    for name in ("gpu-node-2", "gpu-node-4"):
        node = node_obj(cluster, name)
        assert node["metadata"]["labels"]["gpucert.io/certified"] == "true"
        assert node["spec"]["unschedulable"] is False
        assert ever_cordoned(cluster, name), "measured while cordoned"
        last = json.loads(node["metadata"]["annotations"]["gpucert.io/last-certified"])
        assert (tmp_path / "reports" / last["run"] / "certificate.intoto.json").is_file()
    assert not ever_cordoned(cluster, "gpu-node-3"), "a busy node is never touched without drain"
    assert cluster.get("pods", "ml-team", "trainer-0") is not None
    assert not node_obj(cluster, "gpu-node-5")["metadata"].get("labels", {}).get("gpucert.io/certified")

    after = exported(tmp_path)
    assert by_node(after["gpucert_node_certified"])["gpu-node-2"] == 1.0
    runs = {labels["run"] for labels, _ in after["gpucert_run_info"]}
    assert runs == {o["run"] for o in record["outcomes"].values()}  # the other nodes' runs are elsewhere
    assert {labels["node"] for labels, _ in after["gpucert_metric_ratio_to_baseline"]} == {"gpu-node-2", "gpu-node-4"}

    # with drain, the busy node (the oldest: never certified) is taken and its training pod evicted
    next_second()  # a round's record is named by its second, and records[-1] must be this one
    r, record = schedule(tmp_path, "--max-nodes", "1", "--drain=true", "--max-cordoned-share", "0.5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert record["chosen"] == ["gpu-node-3"]
    assert cluster.get("pods", "ml-team", "trainer-0") is None
    assert node_obj(cluster, "gpu-node-3")["metadata"]["labels"]["gpucert.io/certified"] == "true"

    # what the rounds asked of the API: granted to the CronJob's service account, and every recertify grant needed
    used = {verb(m, p) for m, p in cluster.requests}
    assert not_granted(used, roles_of(NS, "gpucert")) == set(), "a request the CronJob's RBAC does not grant"
    assert unused(used, {"gpucert-recertify", "gpucert-recertify-nodes"}) == set(), "a grant no request needs"


def test_the_cordon_share_counts_every_cordon_and_a_failed_node_comes_back(live: FakeKubelet, tmp_path: Path) -> None:
    cluster = live.cluster
    mark(cluster, "gpu-node-1", cordon=True, **marked(5, passed=False))  # left cordoned by a failed round, repaired
    mark(cluster, "gpu-node-5", cordon=True)  # an admin's maintenance
    for name, days in (("gpu-node-2", 40), ("gpu-node-3", 30), ("gpu-node-4", 20), ("gpu-node-6", 10)):
        mark(cluster, name, **marked(days))
    events = len(cluster.events)

    # 6 nodes x 0.34: 2 may be cordoned at once, and 2 are: only the node gpucert left cordoned may be taken
    r, record = schedule(tmp_path, "--max-nodes", "3", "--max-cordoned-share", "0.34")
    assert r.returncode == 0, r.stdout + r.stderr
    assert record["pools"] == {"default": {"nodes": 6, "cordoned": 2, "cordonLimit": 2}}
    assert record["chosen"] == ["gpu-node-1"]
    for name in ("gpu-node-2", "gpu-node-3", "gpu-node-4", "gpu-node-6"):
        assert "one more would exceed max cordoned share 0.34 (2 at once)" in record["skipped"][name]
    node = node_obj(cluster, "gpu-node-1")
    assert node["spec"]["unschedulable"] is False, "repaired, passed, back in service"
    assert node["metadata"]["labels"]["gpucert.io/certified"] == "true"
    cordons = [
        e[4]["metadata"]["name"]
        for e in cluster.events[events:]
        if e[1] == "nodes" and (e[4].get("spec") or {}).get("unschedulable")
    ]
    assert set(cordons) <= {"gpu-node-1", "gpu-node-5"}, "no other node was cordoned"


def most_cordoned_at_once(cluster: FakeCluster, since: int) -> int:
    """The most nodes cordoned at the same time, replaying the node events from `since` on (none cordoned then)."""
    cordoned: set[str] = set()
    most = 0
    for e in cluster.events[since:]:
        if e[1] == "nodes":
            name = e[4]["metadata"]["name"]
            (cordoned.add if (e[4].get("spec") or {}).get("unschedulable") else cordoned.discard)(name)
            most = max(most, len(cordoned))
    return most


def test_two_rounds_started_together_share_one_cordon_budget(live: FakeKubelet, tmp_path: Path) -> None:
    """Each round holds the cluster's round Lease: the second finds it held and takes no node, so the pool's
    max cordoned share holds across processes (without it, two rounds counted the cordons before either made
    one, and cordoned more than the share: 20 of 61 trials)."""
    cluster = live.cluster
    live.slow_s = 0.3  # a round lasts well past the other process's start
    since = len(cluster.events)
    args = ["schedule", "spec.yaml", "--sign-key", "keys/gpucert.key", "--without-handover", "--max-nodes", "2"]
    cmd = [sys.executable, "-m", "gpucert.cli.main", *args, "--max-cordoned-share", "0.17"]  # 6 x 0.17: one at once
    procs = [
        subprocess.Popen(cmd, cwd=tmp_path, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    refused = [err.decode() for p, (_, err) in zip(procs, outs, strict=True) if p.returncode == 3]
    assert len(refused) == 1, (codes, [o[1].decode()[-2000:] for o in outs])
    assert refused[0].strip().count("\n") == 0, refused[0]
    assert "another schedule round holds the cluster's round lease (gpucert schedule" in refused[0]
    assert "this round took no node" in refused[0]
    assert sorted(codes) == [0, 3], codes
    assert most_cordoned_at_once(cluster, since) <= 1
    records = sorted((tmp_path / "reports" / ".schedule").glob("*.json"))
    assert len(records) == 1  # the refused round chose nothing and wrote nothing
    assert len(json.loads(records[0].read_text())["chosen"]) == 2
    assert cluster.list("leases", NS) == []  # both holds released


def test_the_circuit_breaker_stops_a_fleet_wide_failure(live: FakeKubelet, tmp_path: Path) -> None:
    # a wrong figure in the SKU baseline (the stack's fault, not the hardware's): every node fails memory.bandwidth
    strict = yaml.safe_load((ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml").read_text())
    strict["metrics"]["memory.bandwidth"]["expected"] = 3600
    (tmp_path / "strict.yaml").write_text(yaml.safe_dump(strict))
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    spec["certify"]["baseline"] = str(tmp_path / "strict.yaml")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    cluster = live.cluster

    r, record = schedule(tmp_path, "--max-nodes", "4", "--max-failure-share", "0.5", "--max-cordoned-share", "0.5")
    assert r.returncode == 3, r.stdout + r.stderr
    assert record["chosen"] == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    assert {n: o["outcome"] for n, o in record["outcomes"].items()} == {
        "gpu-node-1": "failed",
        "gpu-node-2": "failed",
        "gpu-node-3": "withheld",
        "gpu-node-4": "skipped",
    }
    assert record["breaker"]["open"] is True
    assert record["breaker"]["allowance"] == 2
    assert "more likely gpucert's or the stack's fault" in record["breaker"]["reason"]
    assert "circuit breaker" in r.stdout
    for name in ("gpu-node-1", "gpu-node-2"):  # within the share: marked as any failure is
        node = node_obj(cluster, name)
        assert node["metadata"]["labels"]["gpucert.io/certified"] == "false"
        assert node["spec"]["unschedulable"] is True
    third = node_obj(cluster, "gpu-node-3")  # the one that tripped it: left as it was
    assert "gpucert.io/certified" not in (third["metadata"].get("labels") or {})
    assert not any(k.startswith("gpucert.io/") for k in third["metadata"].get("annotations") or {})
    assert third["spec"]["unschedulable"] is False
    run = tmp_path / "reports" / record["outcomes"]["gpu-node-3"]["run"]
    marks = json.loads((run / "recertify.json").read_text())["marks"]
    assert marks["uncordon"] is True
    assert marks["withheld"].startswith("circuit breaker: 3 of the round's 4 nodes failed")
    assert not ever_cordoned(cluster, "gpu-node-4")
    assert cluster.list("leases", NS) == []

    series = exported(tmp_path)
    assert series["gpucert_schedule_breaker_open"] == [({}, 1.0)]
    assert {labels["outcome"]: v for labels, v in series["gpucert_schedule_nodes"]} == {
        "passed": 0.0,
        "failed": 2.0,
        "withheld": 1.0,
        "error": 0.0,
        "skipped": 1.0,
    }
    failing = {(labels["node"], labels["gpu"]) for labels, _ in series["gpucert_check_failed"]}
    assert ("gpu-node-3", "0") in failing  # the verdict is the verdict: the breaker only withholds the marks


def test_a_gpu_pod_that_lands_after_the_choice_puts_the_node_back(live: FakeKubelet, tmp_path: Path) -> None:
    cluster = live.cluster
    for i, name in enumerate(NODES):
        mark(cluster, name, **marked(10 + i))  # gpu-node-6 certified longest ago
    landed: list[str] = []

    def land(method: str, path: str) -> None:  # the scheduler placed a pod between the choice and the cordon
        if method == "PATCH" and path == "/api/v1/nodes/gpu-node-6" and not landed:
            landed.append(path)
            cluster.put("pods", gpu_pod("late-0", "gpu-node-6"))

    cluster.on_request = land
    r, record = schedule(tmp_path, "--max-nodes", "1", "--wait-timeout", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    assert record["chosen"] == ["gpu-node-6"]
    outcome = record["outcomes"]["gpu-node-6"]
    assert outcome["outcome"] == "error"
    assert "1 GPU pod(s) still run on gpu-node-6 after 1 s: ml-team/late-0" in outcome["message"]
    assert "uncordoned again, as it was before" in outcome["message"]
    node = node_obj(cluster, "gpu-node-6")
    assert node["spec"]["unschedulable"] is False  # back in service, for a later round
    assert node["metadata"]["labels"]["gpucert.io/certified"] == "true"  # its earlier certification stands
    assert cluster.get("pods", "ml-team", "late-0") is not None  # never evicted without drain
    assert cluster.list("leases", NS) == []


def test_the_exporter_lists_nodes_only_and_a_scrape_the_api_refuses_fails(live: FakeKubelet, tmp_path: Path) -> None:
    cluster = live.cluster
    spec = load_spec(tmp_path / "spec.yaml")
    target = open_target(spec)
    assert isinstance(target, NodeTarget)
    # a deadline past the client's five tries and their backoff: this test is about what the API refuses
    collector = FleetCollector(
        tmp_path / "reports", spec, target.node_control(tmp_path / "reports"), cluster_timeout_s=60
    )
    start = len(cluster.requests)
    port = free_port()
    ready, stop = threading.Event(), threading.Event()
    kwargs = {"ready": ready, "stop": stop}
    server = threading.Thread(target=serve, args=(collector, f"127.0.0.1:{port}"), kwargs=kwargs, daemon=True)
    server.start()
    try:
        assert ready.wait(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"gpucert_node_certified", "gpucert_run_folders_unreadable"} <= names
        used = {verb(m, p) for m, p in cluster.requests[start:]}
        assert used == grants({"gpucert-metrics"}) == {("", "nodes", "list", None)}
        assert roles_of(NS, "gpucert-metrics") == {"gpucert-metrics"}

        cluster.fail("GET", "nodes", 503, times=10)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60)
        err.value.close()
        assert err.value.code == 500  # Prometheus marks the target down, rather than scrape a partial fleet
    finally:
        stop.set()
        server.join(10)
    cluster.failures.clear()
    cluster.fail("GET", "nodes", 503, times=10)
    with pytest.raises(IncompleteRunError, match="did not answer after 5 tries"):
        generate_latest(registry_for(collector))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
