"""A soak's all-reduce across nodes on a Kubernetes cluster (issue 26: "NCCL within the node and across nodes"):
the real `kubernetes` client against the fake API server, a fake kubelet whose pods report what the simulator
measures (the nodes' probes, and the collective's process 0), and each round's collective the Indexed Job (or the
JobSet Kueue admits) certify runs, after the round's probe Jobs. A slow fabric is found at its round by its
criterion; a hung or not-admitted collective is its round's finding, not a hung soak; a controller stopped
mid-collective (Ctrl-C, or killed) leaves nothing behind once resumed, and its resumed soak repeats nothing.

The round's wall wait is taken out (`no_round_wait`): the rounds are what is tested here, not the clock."""

from __future__ import annotations

import json
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.fleet.soak import resume_soak, start_soak
from gpucert.measure.targets.kubernetes import fabric as kfabric
from gpucert.measure.targets.kubernetes import soak as ksoak
from gpucert.measure.targets.kubernetes import watch
from gpucert.measure.targets.kubernetes.fabric import FabricJobs
from gpucert.measure.targets.kubernetes.gang import Gang
from gpucert.measure.targets.kubernetes.nodes import KubernetesNodeControl
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.spec.cluster import load_spec

from .fakecluster import FakeCluster
from .fakegang import FakeGang
from .fakekubelet import FakeKubelet
from .gpu_operator import node

ROOT = Path(__file__).resolve().parents[2]
NS = "gpucert"
MULTINODE = "nccl.all_reduce.multinode"
NODES = 2
LEFT = ("jobs", "pods", "services", "configmaps", "leases")


@pytest.fixture(autouse=True)
def no_round_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round on a cluster lasts its length (1 s at least): here it ends when its Jobs do."""
    monkeypatch.setattr(ksoak, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: None))
    monkeypatch.setattr(watch, "STEP_S", 0.2)  # a hung process is seen gone, and admission read, between slices


@pytest.fixture
def sim_cluster(served_cluster: FakeCluster) -> FakeCluster:
    """The served cluster, its deleted pods going as a cluster's do: Terminating through two more lists of pods (the
    garbage collector comes to a deleted Job's pods after it, and a running pod's delete is graceful;
    test_terminating_pods.py cites both), so a round's, or a killed controller's, pods are still there as the sweep's
    deletes are answered."""
    served_cluster.grace_lists = 2
    return served_cluster


def _simulator(tmp_path: Path) -> SimulatedTarget:
    """The hardware behind the fake cluster: the clean H100 fleet, two nodes of it."""
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-4x8.yaml").read_text(encoding="utf-8"))
    fleet["nodes"]["count"] = NODES
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"]["fleet"] = str(tmp_path / "fleet.yaml")
    spec["expect"]["nodes"] = NODES
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return SimulatedTarget.from_spec(load_spec(tmp_path / "sim.yaml"))


def _spec(tmp_path: Path, gang: dict[str, Any] | None = None, rounds: int = 3) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"] = {
        "kind": "kubernetes",
        "context": "fake",
        "namespace": NS,
        "maxParallel": 4,
        "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
        "pendingTimeoutSeconds": 30,  # a loaded machine is no Pending pod
        **({"gang": gang} if gang else {}),
    }
    spec["expect"]["nodes"] = NODES
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    spec["certify"]["multinode"] = {}
    # 3 rounds; the first two are each series' reference, so a step at the third is a drift. The simulator's
    # certification readings are not at the soak's load: its temperatures are not what is tested here
    criteria = {"referenceRounds": 2, "temperatureSpreadC": 30}
    spec["soak"] = {"duration": f"{rounds}s", "round": "1s", "probes": ["health", "nccl"], "criteria": criteria}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return tmp_path / "spec.yaml"


@pytest.fixture
def kubelet(sim_cluster: FakeCluster, tmp_path: Path) -> Iterator[FakeKubelet]:
    """The simulated H100 fleet's Nodes in the fake cluster, and a kubelet whose pods report what the
    simulator measures."""
    sim = _simulator(tmp_path)
    nodes, _ = sim.observe()
    for n in nodes:
        sim_cluster.put("nodes", json.loads(json.dumps(n)))
    k = FakeKubelet(sim_cluster, simulator=sim).start()
    yield k
    k.close()


def _made(cluster: FakeCluster, *, indexed: bool) -> list[dict[str, Any]]:
    return [
        e[4]
        for e in cluster.events
        if e[1] == "jobs" and e[3] == "ADDED" and (e[4]["spec"].get("completionMode") == "Indexed") == indexed
    ]


def _fabric_rounds(run: Path) -> list[dict[str, Any] | None]:
    out = []
    for d in sorted((run / "soak" / "rounds").iterdir()):
        out.append(json.loads((d / "summary.json").read_text(encoding="utf-8")).get("fabric"))
    return out


def _left(cluster: FakeCluster) -> dict[str, int]:
    return {k: len(cluster.list(k, NS)) for k in LEFT}


def test_a_3_round_soak_runs_3_collectives_across_the_nodes_after_their_probe_jobs(
    sim_cluster: FakeCluster, kubelet: FakeKubelet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[tuple[float, int]] = []  # each round's wait for its end: how long, and the collectives made by then

    def sleep(s: float) -> None:
        waits.append((s, len(_made(sim_cluster, indexed=True))))

    monkeypatch.setattr(ksoak, "time", types.SimpleNamespace(monotonic=lambda: 0.0, sleep=sleep))  # rounds take 0 s
    result = start_soak(_spec(tmp_path), tmp_path / "reports")
    assert waits == [(1.0, 1), (1.0, 2), (1.0, 3)]  # the round's 1 s, its collective inside it (not after it)
    assert result.result == "pass", ({n: v["findings"] for n, v in result.nodes.items()}, result.fabric)
    assert result.fabric == {"result": "pass", "rounds": 3, "leftRound": None, "findings": []}
    collectives = _made(sim_cluster, indexed=True)
    assert len(collectives) == 3
    assert all(j["spec"]["completions"] == NODES for j in collectives)  # one pod per running node
    assert len(_made(sim_cluster, indexed=False)) == 3 * NODES  # each round's probe Job per node
    made = [e[4] for e in sim_cluster.events if e[1] == "jobs" and e[3] == "ADDED"]
    order = [j["spec"].get("completionMode") == "Indexed" for j in made]
    order = [indexed for i, indexed in enumerate(order) if i == 0 or indexed != order[i - 1]]
    assert order == [False, True] * 3  # each round: the nodes' Jobs, then the collective
    rounds = _fabric_rounds(result.run)
    assert [r["round"]["round"] for r in rounds if r] == [0, 1, 2]
    assert all(r and r["round"]["median"] > 297.5 and r["findings"] == [] for r in rounds)
    for i in range(3):  # each collective's evidence was written in its round's folder before the round's commit
        raw = json.loads((result.run / "soak" / "rounds" / f"{i:04d}" / "_fabric.json").read_text(encoding="utf-8"))
        assert raw["median"] == rounds[i]["round"]["median"]  # type: ignore[index]
    progress = json.loads((result.run / "soak" / "progress.json").read_text(encoding="utf-8"))
    assert progress["fabric"] == {"status": "running", "rounds": 3, "leftRound": None}
    assert _left(sim_cluster) == dict.fromkeys(LEFT, 0)


def test_a_fabric_that_slows_is_found_at_its_round_by_the_drift_criterion(
    sim_cluster: FakeCluster, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    kubelet.collectives = ["ok", "ok", "slow:0.94"]  # 6%: past the 3% drift limit, inside the baseline's 15%
    result = start_soak(_spec(tmp_path), tmp_path / "reports")
    assert result.result == "fail"
    assert {v["result"] for v in result.nodes.values()} == {"pass"}  # the nodes' own rounds stayed clean
    assert result.fabric is not None
    assert result.fabric["leftRound"] == 2
    assert {f["check"] for f in result.fabric["findings"]} == {f"soak.drift.{MULTINODE}"}
    verdict = json.loads((result.run / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["fleet"]["failed"] == 1


def test_a_hung_collective_is_its_rounds_finding_and_the_soak_goes_on(
    sim_cluster: FakeCluster, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    kubelet.collectives = ["ok", "deadline"]  # the Job's activeDeadlineSeconds ends the hung processes
    result = start_soak(_spec(tmp_path), tmp_path / "reports")
    assert result.fabric is not None
    assert result.fabric["leftRound"] == 1
    (finding,) = result.fabric["findings"]
    assert finding["check"] == "soak.round"
    assert finding["status"] == "error"
    assert "of the all-reduce across nodes failed" in finding["message"]
    assert result.result == "fail"
    assert {v["result"] for v in result.nodes.values()} == {"pass"}  # their rounds went on to the end
    assert len(_made(sim_cluster, indexed=True)) == 2  # none after the fabric left the soak
    assert _fabric_rounds(result.run)[2] is None
    assert _left(sim_cluster) == dict.fromkeys(LEFT, 0)


def test_a_collective_kueue_does_not_admit_in_time_is_its_rounds_finding(
    sim_cluster: FakeCluster, kubelet: FakeKubelet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gang = FakeGang(sim_cluster, quota_gpus=8).install().start()  # one node's GPUs: two cannot be admitted
    try:
        gang_spec = _spec(tmp_path, {"localQueue": "gpucert", "admissionTimeoutSeconds": 1}, rounds=1)
        result = start_soak(gang_spec, tmp_path / "r")
    finally:
        gang.close()
    assert result.fabric is not None
    assert result.fabric["leftRound"] == 0
    (finding,) = result.fabric["findings"]
    assert finding["check"] == "soak.round"
    assert "not admitted by Kueue in 1 s" in finding["message"]
    assert "insufficient unused quota" in finding["message"]
    # JobSet v0.8.2 makes the child Job with the JobSet, suspended as it is (fakegang.py): a Job, and no rank started
    assert [j["spec"]["suspend"] for j in _made(sim_cluster, indexed=True)] == [True]
    ranks = [
        e
        for e in sim_cluster.events
        if e[1] == "pods" and "jobset.sigs.k8s.io/jobset-name" in e[4]["metadata"]["labels"]
    ]
    assert ranks == []
    assert _left(sim_cluster) | {"jobsets": len(sim_cluster.list("jobsets", NS))} == {
        **dict.fromkeys(LEFT, 0),
        "jobsets": 0,
    }


class _Killed(BaseException):
    """The controller stopped where it stood (as Ctrl-C's KeyboardInterrupt, a BaseException)."""


def _stop_in_second_collective(monkeypatch: pytest.MonkeyPatch, kubelet: FakeKubelet, *, kill: bool = False) -> None:
    """Stop the controller once every process of the second collective runs: as Ctrl-C does (its cleanup runs on
    the way out), or, with `kill`, as a SIGKILL does (nothing more runs: the collective's Job, pods, Service,
    ConfigMap and JobSet stay)."""
    seen, sweep, delete = FabricJobs._on_fabric_pod, kfabric.cleanup_runs, Gang.delete
    holder = KubernetesNodeControl.holder
    stopped = threading.Event()

    def on_pod(
        self: FabricJobs, runs: dict[str, Any], pod: dict[str, Any], deleted: bool, gang: Gang | None = None
    ) -> bool:
        done = seen(self, runs, pod, deleted, gang)
        (run,) = runs.values()
        running = [p for p in run.pods.values() if (p.get("status") or {}).get("phase") == "Running"]
        if kubelet.collectives_made == 2 and len(running) == len(run.nodes):
            stopped.set()
            raise _Killed
        return done

    monkeypatch.setattr(FabricJobs, "_on_fabric_pod", on_pod)
    if kill:
        monkeypatch.setattr(kfabric, "cleanup_runs", lambda *a, **k: 0 if stopped.is_set() else sweep(*a, **k))
        monkeypatch.setattr(Gang, "delete", lambda self: None if stopped.is_set() else delete(self))
        # nor is a lease released: each stays the killed controller's, live until it lapses (60 s)
        monkeypatch.setattr(
            KubernetesNodeControl, "holder", lambda self, node: None if stopped.is_set() else holder(self, node)
        )


def test_ctrl_c_mid_collective_leaves_nothing_and_the_round_uncommitted(
    sim_cluster: FakeCluster, kubelet: FakeKubelet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubelet.collectives = ["ok", "hang"]
    _stop_in_second_collective(monkeypatch, kubelet)
    with pytest.raises(_Killed):
        start_soak(_spec(tmp_path), tmp_path / "reports")
    assert _left(sim_cluster) == dict.fromkeys(LEFT, 0)  # the collective's Job, Service, pods, and the leases
    (run,) = (tmp_path / "reports").iterdir()
    assert (run / "soak" / "rounds" / "0000" / "summary.json").is_file()
    assert not (run / "soak" / "rounds" / "0001" / "summary.json").exists()
    assert not (run / "soak" / "rounds" / "0001" / "_fabric.json").exists()


@pytest.mark.parametrize("gang", [False, True], ids=["indexed-job", "jobset"])
def test_a_soak_killed_mid_collective_resumes_with_nothing_lost_or_repeated_and_nothing_left(
    sim_cluster: FakeCluster, kubelet: FakeKubelet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gang: bool
) -> None:
    """Without the sweep the resumed round's ConfigMap and Job meet the killed one's names (409 Conflict); without
    taking the run's own leases over, the resume is refused until they lapse."""
    kueue = FakeGang(sim_cluster).install().start() if gang else None
    kubelet.collectives = ["ok", "hang"]
    spec = _spec(tmp_path, {"localQueue": "gpucert"} if gang else None)
    try:
        with monkeypatch.context() as killed:
            _stop_in_second_collective(killed, kubelet, kill=True)
            with pytest.raises(_Killed):
                start_soak(spec, tmp_path / "reports")
        (run,) = (tmp_path / "reports").iterdir()
        left = _left(sim_cluster)
        assert (left["jobs"], left["services"], left["pods"]) == (1, 1, NODES)  # the hung collective, running on
        assert len(sim_cluster.list("jobsets", NS)) == int(gang)
        held = {lease["spec"]["holderIdentity"] for lease in sim_cluster.list("leases", NS)}
        assert held == {f"soak {run.name}"}  # the resumed controller takes its own run's leases over at once
        after_kill = len(sim_cluster.events)
        result = resume_soak(run)
    finally:
        if kueue is not None:
            kueue.close()
    assert _left(sim_cluster) == dict.fromkeys(LEFT, 0)  # the killed collective went before the round ran again
    assert sim_cluster.list("jobsets", NS) == []
    assert result.result == "pass", ({n: v["findings"] for n, v in result.nodes.items()}, result.fabric)
    assert result.fabric == {"result": "pass", "rounds": 3, "leftRound": None, "findings": []}
    assert len(_made(sim_cluster, indexed=False)) == 3 * NODES  # round 1's probe Jobs ended before the kill: not again
    assert len(_made(sim_cluster, indexed=True)) == 4  # 0, 1 (killed), 1 again, 2: round 0's was not repeated
    assert [r["round"]["round"] for r in _fabric_rounds(run) if r] == [0, 1, 2]
    if gang:
        # the JobSet is deleted itself, not left to the garbage collector with the ConfigMap that owns it: a
        # cluster's collector deletes dependents in the background, after the owner ("Background cascading
        # deletion", kubernetes.io/docs/concepts/architecture/garbage-collection/), and the resumed round's
        # JobSet takes the same name at once
        killed_js = next(e[4]["metadata"]["name"] for e in sim_cluster.events if e[1] == "jobsets")
        gone = [(e[1], e[4]["metadata"]["name"]) for e in sim_cluster.events[after_kill:] if e[3] == "DELETED"]
        assert gone.index(("jobsets", killed_js)) < gone.index(("configmaps", killed_js))


def test_each_pools_pods_request_the_gpus_its_pool_expects(served_cluster: FakeCluster, tmp_path: Path) -> None:
    """A spec of two pools, 8 and 4 GPUs a node: each round's probe pods and each pool's all-reduce request their
    own pool's count (the soak asked every node for the first pool's 8, which a 4-GPU node can never schedule)."""
    baseline = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    pools = []
    for name, gpus in (("big", 8), ("small", 4)):
        for i in (1, 2):
            served_cluster.put("nodes", node(f"{name}-{i}", gpus=gpus, extra_labels={"pool": name}))
        expect = {"nodes": 2, "gpusPerNode": gpus, "gpuProduct": "NVIDIA-H100-80GB-HBM3"}
        pools.append({"name": name, "nodeSelector": {"pool": name}, "expect": expect, "baseline": baseline})
    doc = {
        "apiVersion": "gpucert.io/v1alpha2",
        "kind": "ClusterSpec",
        "metadata": {"name": "two-pools"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": NS,
            "maxParallel": 4,
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
            "pendingTimeoutSeconds": 3,
        },
        "pools": pools,
        "certify": {"probes": ["health", "nccl"], "multinode": {}},
        "soak": {"duration": "1s", "round": "1s", "probes": ["health", "nccl"]},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    # every process placed, then OOM-killed at start: what is asserted is what each pod requests, not a ring's NumPy
    oom = dict.fromkeys(("big-1", "big-2", "small-1", "small-2"), "oom")
    kubelet = FakeKubelet(served_cluster, fabric_behaviour=oom).start()
    try:
        result = start_soak(tmp_path / "spec.yaml", tmp_path / "reports")
    finally:
        kubelet.close()

    def requested(job: dict[str, Any]) -> int:
        return int(job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])

    probes = {
        j["metadata"]["annotations"]["gpucert.io/node"]: requested(j) for j in _made(served_cluster, indexed=False)
    }
    assert probes == {"big-1": 8, "big-2": 8, "small-1": 4, "small-2": 4}
    rings = {
        j["metadata"]["annotations"]["gpucert.io/nodes"]: requested(j) for j in _made(served_cluster, indexed=True)
    }
    assert rings == {"big-1,big-2": 8, "small-1,small-2": 4}
    assert result.fabric is not None
    for ring in result.fabric["pools"].values():  # each ran, every process scheduled (none left Pending)
        (finding,) = ring["findings"]
        assert "OOMKilled" in finding["message"], finding
