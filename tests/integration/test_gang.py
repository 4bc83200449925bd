"""The all-reduce across nodes admitted whole (issue 28): where the cluster has JobSet and Kueue (their CRDs, of the
pinned releases, served by the fake API) and the spec names a LocalQueue, the kubernetes target's multi-node path
sends one JobSet that Kueue admits for every rank or none; without the CRDs it sends today's Indexed Job. The real
`kubernetes` client against the fake API server, kubelet, JobSet controller and Kueue."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import main as cli
from gpucert.errors import ClusterAccessError, ConfigError
from gpucert.evaluate.evaluation import Evaluation
from gpucert.measure.evidence import FabricEvidence
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.kubernetes import watch
from gpucert.measure.targets.kubernetes.fabric import FabricJobs
from gpucert.measure.targets.kubernetes.gang import EXCLUSIVE_TOPOLOGY, QUEUE_LABEL, Gang
from gpucert.measure.targets.kubernetes.preflight import GROUPS, Preflight, needed_access
from gpucert.plan import run as runner
from gpucert.plan.checks import CheckKey
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec

from . import crds
from .fakecluster import FakeCluster
from .fakegang import FakeGang
from .fakekubelet import FakeKubelet
from .gpu_operator import gpu_pod, node
from .rbac import not_granted, unused, verb

ROOT = Path(__file__).resolve().parents[2]
NS = "gpucert"
NODES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
RACK = "example.com/rack"


def spec_file(tmp_path: Path, gang: dict[str, Any] | None, pending_s: int = 5) -> Path:
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "gang"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": NS,
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
            "pendingTimeoutSeconds": pending_s,
            **({"gang": gang} if gang is not None else {}),
        },
        "expect": {"nodes": 4, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
        "certify": {
            "baseline": str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"),
            "probes": ["nccl"],
            "multinode": {},
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def all_reduce(
    cluster: FakeCluster,
    tmp_path: Path,
    gang: dict[str, Any] | None,
    racks: dict[str, str] | None = None,
    pending_s: int = 5,
) -> tuple[FabricEvidence, float]:
    """The kubernetes target's all-reduce across the four nodes (the fake kubelet running it), and its seconds."""
    for n in NODES:
        cluster.put("nodes", node(n, extra_labels={RACK: (racks or {}).get(n, "r1")}))
    target = open_target(load_spec(spec_file(tmp_path, gang, pending_s)))
    kubelet = FakeKubelet(cluster).start()
    t0 = time.monotonic()
    try:
        (fabric,) = target.measure_fabrics([NODES], MeasurePlan(run_id="gang-1", probes=(Probe.NCCL,), dcgm_level=1))
    finally:
        kubelet.close()
    return fabric, time.monotonic() - t0


LEFT = ("jobsets", "jobs", "pods", "configmaps", "services", "workloads")


def leftovers(fake: FakeCluster) -> dict[str, int]:
    return {k: len(fake.list(k, NS)) for k in LEFT}


def created(fake: FakeCluster, kind: str) -> list[dict[str, Any]]:
    return [e[4] for e in fake.events if e[1] == kind and e[3] == "ADDED"]


GANG = {"localQueue": "gpucert"}


@pytest.fixture(autouse=True)
def short_watch_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admission is read at each step of the run (a JobSet's change is no pod event): a step each second, the
    default since the run keeps one watch (issue 28), keeps this file fast."""
    monkeypatch.setattr(watch, "STEP_S", 1.0)


def test_with_jobset_and_kueue_the_all_reduce_is_one_jobset_that_kueue_admits_whole_in_one_rack(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    gang = FakeGang(served_cluster).install().start()
    try:
        fabric, _ = all_reduce(served_cluster, tmp_path, {**GANG, "topologyKey": RACK})
    finally:
        gang.close()
    assert fabric.errors == [], fabric.errors
    assert fabric.nodes == NODES
    assert fabric.nccl is not None
    assert fabric.nccl.correct
    assert fabric.nccl.ranks == 8
    assert fabric.admission == "kueue"  # how it was admitted, in its evidence (issue 28)
    (js,) = created(served_cluster, "jobsets")
    assert crds.problems(js) == []  # the pinned JobSet CRD's schema (the fake API refused it otherwise)
    assert js["metadata"]["labels"][QUEUE_LABEL] == "gpucert"
    assert js["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY] == RACK  # every rank in one rack, one all-reduce each
    assert js["spec"]["suspend"] is True  # nothing runs before Kueue admits it
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": js["metadata"]["name"],
                                     "publishNotReadyAddresses": True}  # fmt: skip
    (rjob,) = js["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 1
    job = rjob["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["parallelism"] == job["completions"] == 4
    assert job["backoffLimit"] == 0
    command = job["template"]["spec"]["containers"][0]["command"]
    assert (
        command[command.index("--rendezvous") + 1]
        == f"{js['metadata']['name']}-ranks-0-0.{js['metadata']['name']}:29511"
    )
    # gpucert made neither the Job nor the Service: the JobSet controller did, owned by the JobSet
    jobs = created(served_cluster, "jobs")
    assert [j["metadata"]["ownerReferences"][0]["kind"] for j in jobs] == ["JobSet"]
    assert [s["metadata"]["ownerReferences"][0]["kind"] for s in created(served_cluster, "services")] == ["JobSet"]
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)
    used = {verb(m, p) for m, p in served_cluster.requests}
    assert not_granted(used) == set(), "a request deploy/rbac.yaml does not grant"


def test_without_the_crds_the_all_reduce_is_the_indexed_job_it_was(served_cluster: FakeCluster, tmp_path: Path) -> None:
    fabric, _ = all_reduce(served_cluster, tmp_path, GANG)  # the spec asks; the cluster has no JobSet, no Kueue
    assert fabric.errors == [], fabric.errors
    assert fabric.admission == "indexed job"  # the fallback is in the evidence, not silent
    assert created(served_cluster, "jobsets") == []
    (job,) = created(served_cluster, "jobs")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == 4
    assert "ownerReferences" not in job or job["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap"
    asked = [p.rstrip("?") for _, p in served_cluster.requests if "customresourcedefinitions" in p]
    assert asked == ["/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"]


def test_without_gang_admission_ranks_that_waited_for_a_busy_node_end_with_who_never_came(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """The deadlock gang admission prevents, on the Indexed Job: gpu-03's GPUs are held by someone else's pod, so
    three processes start and wait at the rendezvous for a fourth that cannot be placed. The Pending timeout ends
    it, naming the process, why, the node no process reached and those that waited; and nothing is left."""
    served_cluster.put("pods", gpu_pod("trainer-0", "gpu-03"))
    fabric, seconds = all_reduce(served_cluster, tmp_path, None, pending_s=2)
    (error,) = fabric.errors
    assert "still Pending after 2 s: process 3 (Unschedulable: 0/4 nodes are available:" in error.message
    assert "Insufficient nvidia.com/gpu" in error.message
    assert "no process reached gpu-03" in error.message
    assert "processes 0, 1, 2 (gpu-01, gpu-02, gpu-04) started and waited for them until stopped" in error.message
    assert seconds < 10
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)  # the waiting ranks' pods went with the Job


def test_kueue_admits_quota_not_nodes_so_a_rank_on_a_node_busy_outside_the_queue_ends_with_who_never_came(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """Kueue reserves a ClusterQueue's quota, not nodes (Kueue v0.10.6: flavorassigner.go counts the quota's free
    units; nothing there looks at a node): with gpu-03's GPUs held by a pod that is not the ClusterQueue's, Kueue
    admits the JobSet whole, three ranks start, and the one pinned to gpu-03 cannot be placed. The Pending timeout,
    counted from the admission, ends it with who never came, as on the Indexed Job; nothing is left."""
    served_cluster.put("pods", gpu_pod("trainer-0", "gpu-03"))
    gang = FakeGang(served_cluster).install().start()  # quota for every rank: admitted at once
    try:
        fabric, seconds = all_reduce(served_cluster, tmp_path, GANG, pending_s=2)
    finally:
        gang.close()
    (error,) = fabric.errors
    assert "still Pending after 2 s: process 3 (Unschedulable: 0/4 nodes are available:" in error.message
    assert "Insufficient nvidia.com/gpu" in error.message
    assert "no process reached gpu-03" in error.message
    assert "processes 0, 1, 2 (gpu-01, gpu-02, gpu-04) started and waited for them until stopped" in error.message
    assert len(created(served_cluster, "jobsets")) == 1  # the gang path: its Job made suspended, resumed on admission
    assert [e[4]["spec"]["suspend"] for e in served_cluster.events if e[1] == "jobs"][:2] == [True, False]
    assert seconds < 12
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)


@pytest.mark.parametrize(
    ("installed", "queue", "status", "says"),
    [
        (False, None, "warn", "target.gang is set but the jobsets.jobset.x-k8s.io and workloads.kueue.x-k8s.io CRDs "
         "are absent: the run falls back to an Indexed Job (no gang admission)"),
        (True, None, "fail", "Kueue has no LocalQueue 'gpucert' in namespace gpucert"),
        (True, "gpucert", "ok", "JobSet and Kueue are installed: the all-reduce across nodes is one JobSet"),
    ],
)  # fmt: skip
def test_preflight_says_whether_the_all_reduce_is_gang_admitted_or_falls_back_to_an_indexed_job(
    served_cluster: FakeCluster, tmp_path: Path, installed: bool, queue: str | None, status: str, says: str
) -> None:
    if installed:
        FakeGang(served_cluster).install(queue=queue)
    spec = load_spec(spec_file(tmp_path, GANG))
    check = Preflight(spec, open_target(spec).kube)  # type: ignore[attr-defined]
    check.gang()
    (row,) = check.checks
    assert (row.group, row.item, row.status) == (GROUPS[1], "gang admission (target.gang, LocalQueue gpucert)", status)
    assert says in row.detail


def test_gpucert_preflight_runs_the_gang_check(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpucert preflight` (Preflight.run) has the gang row; its other checks, tested in test_preflight.py and
    seconds long against the fake, are left out here."""
    for step in ("access", "namespace", "node_checks", "image"):
        monkeypatch.setattr(Preflight, step, lambda self, *a, **k: None)
    monkeypatch.setattr(Preflight, "runtime_class", lambda self: True)
    spec = load_spec(spec_file(tmp_path, GANG))
    (row,) = Preflight(spec, open_target(spec).kube).run()  # type: ignore[attr-defined]
    assert (row.item, row.status) == ("gang admission (target.gang, LocalQueue gpucert)", "warn")
    assert "the run falls back to an Indexed Job (no gang admission)" in row.detail
    assert "install JobSet v0.8.2 and Kueue v0.10.6" in row.fix


def hold_first_look_until_evicted(cluster: FakeCluster, gang: FakeGang) -> None:
    """The run's first read of its JobSet is answered only once Kueue has admitted and evicted it and its ranks'
    pods are gone (an API server slow to answer): the run never sees the JobSet admitted, only its pods come and
    go. Under load this happened by chance (the run looks every watch.STEP_S = 1 s, the admission lasted 1 s)."""
    held = False

    def hold(method: str, path: str) -> None:
        nonlocal held
        if held or method != "GET" or "/jobsets/" not in path:
            return
        held = True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            gang.evicted and all(p["metadata"]["name"] == "trainer-0" for p in cluster.list("pods", NS))
        ):
            time.sleep(0.02)

    cluster.on_request = hold


@pytest.mark.parametrize("seen_admitted", [True, False], ids=["seen-admitted", "never-seen-admitted"])
def test_a_jobset_kueue_evicts_under_wait_for_pods_ready_says_so_and_who_never_came(
    served_cluster: FakeCluster, tmp_path: Path, seen_admitted: bool
) -> None:
    """docs/probes.md recommends Kueue's waitForPodsReady: with its timeout (1 s here) shorter than the Pending
    timeout (5 s), Kueue evicts the JobSet first (Kueue v0.10.6 workload_controller.go, reconcileNotReadyTimeout:
    Evicted, PodsReadyTimeout), JobSet suspends its Job and the Job controller deletes the pods. The finding says
    Kueue evicted it, with the Workload's words, and who had not come when it did; also when the run never saw the
    JobSet admitted (its pods' deletion, not its first look, is what it learns of the admission by)."""
    served_cluster.put("pods", gpu_pod("trainer-0", "gpu-03"))
    gang = FakeGang(served_cluster, pods_ready_timeout=1.0).install().start()
    if not seen_admitted:
        hold_first_look_until_evicted(served_cluster, gang)
    try:
        fabric, _ = all_reduce(served_cluster, tmp_path, GANG, pending_s=5)
    finally:
        gang.close()
    (error,) = fabric.errors
    assert "Kueue evicted JobSet gpucert-" in error.message
    assert "(PodsReadyTimeout: Exceeded the PodsReady timeout gpucert/jobset-gpucert-" in error.message
    assert "not every rank was ready within Kueue's waitForPodsReady.timeout" in error.message
    assert "process 3 (Unschedulable: 0/4 nodes are available:" in error.message
    assert "no process reached gpu-03" in error.message
    assert "processes 0, 1, 2 (gpu-01, gpu-02, gpu-04) started and waited for them until stopped" in error.message
    assert "still Pending" not in error.message  # Kueue's timeout came first, not gpucert's
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)


def test_preflight_names_a_node_in_no_topology_domain(served_cluster: FakeCluster, tmp_path: Path) -> None:
    spec = load_spec(spec_file(tmp_path, {**GANG, "topologyKey": RACK}))
    check = Preflight(spec, open_target(spec).kube)  # type: ignore[attr-defined]
    problems = {n: check.node_problems(node(n, extra_labels={RACK: "r1"} if n != "gpu-04" else None)) for n in NODES}
    assert {n: [p[0] for p in ps] for n, ps in problems.items()} == {n: [] for n in NODES[:3]} | {
        "gpu-04": ["topology domain"]
    }
    ((_, said, fix),) = problems["gpu-04"]
    assert said == f"no {RACK} label: no all-reduce across nodes would measure it"
    assert fix == f"kubectl label node gpu-04 {RACK}=DOMAIN, or remove target.gang.topologyKey"


def test_without_target_gang_no_crd_is_asked_for(served_cluster: FakeCluster, tmp_path: Path) -> None:
    FakeGang(served_cluster).install()
    target = open_target(load_spec(spec_file(tmp_path, None)))
    plan = MeasurePlan(run_id="gang-1", probes=(Probe.NCCL,), dcgm_level=1)
    jobs = FabricJobs(target.cluster, plan, lambda ev: None, gpus_per_node=8)  # type: ignore[attr-defined]
    assert Gang.detect(jobs) is None
    assert served_cluster.requests == []


def test_not_admitted_in_time_is_the_all_reduce_error_no_rank_started_and_nothing_left(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    gang = FakeGang(served_cluster, quota_gpus=24).install().start()  # three nodes' worth: never all four
    try:
        fabric, seconds = all_reduce(served_cluster, tmp_path, {**GANG, "admissionTimeoutSeconds": 1})
    finally:
        gang.close()
    assert not fabric.collected
    (error,) = fabric.errors
    assert "not admitted by Kueue in 1 s (LocalQueue gpucert" in error.message
    assert "insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 8 more needed" in error.message
    assert "target.gang.admissionTimeoutSeconds" in error.message
    (js,) = created(served_cluster, "jobsets")
    assert EXCLUSIVE_TOPOLOGY not in js["metadata"]["annotations"]  # no topologyKey: placed wherever the nodes are
    assert seconds < 15  # the admission deadline, not the Pending timeout or a rendezvous left waiting
    # JobSet v0.8.2 makes the child Job with the JobSet, suspended as it is (fakegang.py): it made no pod
    (job,) = created(served_cluster, "jobs")
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert created(served_cluster, "pods") == []  # all ranks or none: no rank waited for peers
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)
    used = {verb(m, p) for m, p in served_cluster.requests}
    assert not_granted(used) == set(), "a request deploy/rbac.yaml does not grant"
    assert unused(used, {"gpucert-gang", "gpucert-gang-crds"}) == set(), "a grant no request needs"
    groups = ("apiextensions.k8s.io", "jobset.x-k8s.io", "kueue.x-k8s.io")
    spec = load_spec(tmp_path / "spec.yaml")
    asked = {a for a in needed_access(spec) if a[0] in groups}
    assert asked == {u for u in used if u[0] in groups}  # what `gpucert preflight` checks it may do


def test_an_admitted_jobset_whose_job_stays_suspended_says_so_and_counts_no_rank_as_started(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """JobSet v0.8.2 creates the child Job suspended before Kueue admits the JobSet and resumes it after
    (jobset_controller.go, constructJob lines 724-726, resumeJobsIfNecessary): a JobSet controller that never
    resumes it leaves an admitted JobSet whose suspended Job made no pod. That is no rank started, and the finding
    says which Job is still suspended."""
    gang = FakeGang(served_cluster, resumes=False).install().start()
    try:
        fabric, seconds = all_reduce(served_cluster, tmp_path, GANG, pending_s=1)
    finally:
        gang.close()
    (error,) = fabric.errors
    assert "still Pending after 1 s: Kueue admitted JobSet gpucert-" in error.message
    said = "-ranks-0 is still suspended, so no rank was started: the JobSet controller did not resume it"
    assert said in error.message
    assert "process 0 (no pod was created)" in error.message
    assert "started and waited" not in error.message
    assert "no process reached gpu-01, gpu-02, gpu-03, gpu-04" in error.message
    (js,) = [e[4] for e in served_cluster.events if e[1] == "jobsets" and e[3] == "MODIFIED"][-1:]
    assert js["spec"]["suspend"] is False  # Kueue did admit it
    (job,) = created(served_cluster, "jobs")
    assert job["spec"]["suspend"] is True
    assert created(served_cluster, "pods") == []
    assert seconds < 10
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)


def test_a_jobset_kueue_never_takes_up_is_said_to_be_one(served_cluster: FakeCluster, tmp_path: Path) -> None:
    gang = FakeGang(served_cluster, takes_jobsets=False).install().start()
    try:
        fabric, _ = all_reduce(served_cluster, tmp_path, {**GANG, "admissionTimeoutSeconds": 1})
    finally:
        gang.close()
    (error,) = fabric.errors
    assert "not admitted by Kueue in 1 s" in error.message
    assert "Kueue made no Workload for it; is `jobset.x-k8s.io/jobset` among Kueue's integrations" in error.message
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)


def test_a_local_queue_that_does_not_exist_is_said_and_nothing_is_made(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    FakeGang(served_cluster).install(queue=None)
    for n in NODES:
        served_cluster.put("nodes", node(n))
    target = open_target(load_spec(spec_file(tmp_path, GANG)))
    plan = MeasurePlan(run_id="gang-1", probes=(Probe.NCCL,), dcgm_level=1)
    pairs = target.measure_fabrics([NODES[:2], NODES[2:]], plan)  # two all-reduces side by side (pairs)
    for fabric in pairs:
        (error,) = fabric.errors
        assert "Kueue has no LocalQueue 'gpucert' in namespace gpucert" in error.message
        assert "(deploy/kueue/localqueue.yaml) or name an existing one in target.gang.localQueue" in error.message
    assert created(served_cluster, "jobsets") == []
    assert created(served_cluster, "configmaps") == []
    assert sum("/localqueues/" in p for _, p in served_cluster.requests) == 1  # asked once, not once per pair


def test_jobset_and_kueue_are_detected_once_a_run_not_once_a_batch(served_cluster: FakeCluster, tmp_path: Path) -> None:
    """Issue 28: two rounds of two batches (fabricParallel 2: one pair at a time) ask for the two CRDs once."""
    FakeGang(served_cluster).install(queue=None)  # no LocalQueue: each all-reduce is refused before anything is made
    for n in NODES:
        served_cluster.put("nodes", node(n))
    path = spec_file(tmp_path, GANG)
    doc = yaml.safe_load(path.read_text())
    doc["target"]["fabricParallel"] = 2  # issue 25: maxParallel no longer cuts a fabric round into batches
    path.write_text(yaml.safe_dump(doc))
    target = open_target(load_spec(path))
    plan = MeasurePlan(run_id="gang-1", probes=(Probe.NCCL,), dcgm_level=1)
    for _ in range(2):
        pairs = target.measure_fabrics([NODES[:2], NODES[2:]], plan)
        assert all("Kueue has no LocalQueue" in f.errors[0].message for f in pairs)
    asked = [p.rstrip("?") for _, p in served_cluster.requests if "customresourcedefinitions" in p]
    at = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert asked == [f"{at}/jobsets.jobset.x-k8s.io", f"{at}/workloads.kueue.x-k8s.io"]  # it was 4 batches x 2


def test_with_a_topology_key_each_domain_runs_its_own_all_reduce_and_a_node_without_the_label_is_a_finding(
    served_cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/probes.md: with target.gang.topologyKey, one all-reduce per domain of the label. gpu-01 and gpu-02 are
    rack r1 (one JobSet, placed in r1 alone), gpu-03 is alone in r2 (no ring can run: its check says so), gpu-04
    has no rack label (its own finding, never a silent drop). Each domain's ring has its own key and evidence."""
    racks = {"gpu-01": "r1", "gpu-02": "r1", "gpu-03": "r2"}
    for n in NODES:
        served_cluster.put("nodes", node(n, extra_labels={RACK: racks[n]} if n in racks else None))
    spec = load_spec(spec_file(tmp_path, {**GANG, "topologyKey": RACK}))
    with runner.new_run(tmp_path / "reports", spec, "measure") as folder:
        pass
    target = open_target(spec)
    gang, kubelet = FakeGang(served_cluster).install().start(), FakeKubelet(served_cluster).start()
    try:
        runner.measure(target, runner.plan(target, spec, folder), spec, folder)
    finally:
        kubelet.close()
        gang.close()
    ev = Evaluation(folder, spec, load_baseline(spec.resolve(spec.pools[0].baseline)))
    keys = sorted(str(k) for k in ev.plan.required if k.check == "nccl.all_reduce.multinode")
    assert keys == [f"nccl.all_reduce.multinode@fleet[{d}]" for d in ("domain r1", "domain r2", "no domain")]
    (js,) = created(served_cluster, "jobsets")  # r1's ring alone: r2 has one node, gpu-04 no domain
    assert js["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY] == RACK
    assert js["metadata"]["annotations"]["gpucert.io/nodes"] == "gpu-01,gpu-02"
    domains = folder.path / "evidence" / "multinode" / "default" / "domains"
    r1 = FabricEvidence.model_validate_json((domains / "r1" / "nccl.json").read_text())
    assert (r1.nodes, r1.errors, r1.admission) == (["gpu-01", "gpu-02"], [], "kueue")
    assert not (folder.path / "evidence" / "multinode" / "default" / "nccl.json").exists()  # no ring across racks
    found = {d: ev.decide(CheckKey("nccl.all_reduce.multinode", None, None, d)) for d in ("domain r1", "domain r2")}
    assert found["domain r1"].message.startswith(f"{RACK}=r1: 2 nodes x ")
    assert "(gpu-01, gpu-02) as a JobSet through Kueue (target.gang):" in found["domain r1"].message
    assert found["domain r2"].status.value == "error"
    assert found["domain r2"].message == (  # the spec's labels, and their fix, not a measurement that failed
        f"{RACK}=r2: the all-reduce across nodes did not run: the topology domain has one node (gpu-03), and an "
        f"all-reduce across nodes needs two: label another node into it (kubectl label node NODE {RACK}=r2) or "
        "remove target.gang.topologyKey"
    )
    lone = ev.decide(CheckKey("nccl.all_reduce.multinode", None, None, "no domain"))
    assert lone.status.value == "error"
    assert lone.message.startswith(f"gpu-04 has no {RACK} label (target.gang.topologyKey): in no topology domain")
    assert f"kubectl label node NODE {RACK}=DOMAIN" in lone.message
    assert leftovers(served_cluster) == dict.fromkeys(LEFT, 0)
    # the suites decide each ring's key (test_pool_nccl_all_reduce_multinode[domain r1], ...): the verdict has them
    argv = ["evaluate", str(tmp_path / "spec.yaml"), "--evidence", str(folder.path), "--reports", str(tmp_path / "e")]
    cli.main(argv)
    (verdict,) = (tmp_path / "e").glob("*/verdict.json")
    said = {f["message"].partition(":")[0] for f in json.loads(verdict.read_text())["findings"]}
    assert said >= {f"{RACK}=r1", f"{RACK}=r2", f"gpu-04 has no {RACK} label (target.gang.topologyKey)"}
    html = verdict.with_name("report.html").read_text()  # the domain's curve, saying how it was admitted
    assert f"NCCL all-reduce across nodes ({RACK}=r1)" in html
    assert "2 nodes x 2 GPUs, admitted by Kueue" in html
    # recorded evidence is checked as it is imported: a domain's ring that is not one is refused, naming the
    # recorded file (not the copy in the new run folder, as when the evaluation found it later)
    (domains / "r1" / "nccl.json").write_text("{}")
    assert cli.main([*argv[:-1], str(tmp_path / "e2")]) == 2
    assert f"{domains / 'r1' / 'nccl.json'}: schema is None" in capsys.readouterr().err  # the user's file


def test_exclusive_placement_only_where_every_node_is_in_one_domain(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    """A collective across domains (a fabric pair between racks, the soak's ring of a pool) runs on its named nodes
    without JobSet's exclusive-topology annotation, which no placement across domains could meet; where the label
    says one domain, it is placed there alone. Nothing is refused for the topology."""
    FakeGang(served_cluster).install()
    racks = {"gpu-01": "r1", "gpu-02": "r1", "gpu-03": "r2"}
    for n in NODES:
        served_cluster.put("nodes", node(n, extra_labels={RACK: racks[n]} if n in racks else None))
    target = open_target(load_spec(spec_file(tmp_path, {**GANG, "topologyKey": RACK})))
    plan = MeasurePlan(run_id="gang-1", probes=(Probe.NCCL,), dcgm_level=1)
    jobs = FabricJobs(target.cluster, plan, lambda ev: None, gpus_per_node=8)  # type: ignore[attr-defined]
    gang = Gang(jobs, target.cluster.options.gang)  # type: ignore[attr-defined]
    annotated = {
        ",".join(nodes): EXCLUSIVE_TOPOLOGY in gang.body("x", nodes, "")["metadata"]["annotations"]
        for nodes in (["gpu-01", "gpu-02"], ["gpu-02", "gpu-03"], ["gpu-03", "gpu-04"])
    }
    assert annotated == {"gpu-01,gpu-02": True, "gpu-02,gpu-03": False, "gpu-03,gpu-04": False}
    assert gang.problem() == ""  # the LocalQueue is asked, the topology refuses nothing


def test_the_crd_schema_refuses_what_the_api_would_drop_or_reject() -> None:
    """The validator is not vacuous: a field JobSet v0.8.2 does not declare, and a wrong type, are refused."""
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "x"},
        "spec": {"suspended": True, "replicatedJobs": [{"name": "ranks", "replicas": "1", "template": {"spec": {}}}]},
    }
    said = crds.problems(js)
    assert any("'suspended' was unexpected" in p for p in said), said
    assert any(p.startswith("spec.replicatedJobs.0.replicas: '1' is not of type 'integer'") for p in said), said


@pytest.mark.parametrize(
    ("gang", "key", "says"),
    [
        ({"localQueue": "Team_A"}, "target.gang.localQueue", "is not a LocalQueue name"),
        ({"localQueue": "q", "topologyKey": "rack label"}, "target.gang.topologyKey", "is not a node label key"),
        (
            {"localQueue": "q", "admissionTimeoutSeconds": 0},
            "target.gang.admissionTimeoutSeconds",
            "out of range; write a whole number of at least 1",
        ),
        ({"topologyKey": "example.com/rack"}, "target.gang.localQueue", "required"),
    ],
)
def test_a_gang_section_the_cluster_could_not_use_is_refused_naming_the_key(
    tmp_path: Path, gang: dict[str, Any], key: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as exc:
        load_spec(spec_file(tmp_path, gang))
    assert key in str(exc.value)
    assert str(tmp_path / "spec.yaml") in str(exc.value)


def test_a_service_account_that_may_not_read_crds_is_told_which_grant_is_missing(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    FakeGang(served_cluster).install()
    served_cluster.denied.add(("apiextensions.k8s.io", "customresourcedefinitions", "get"))
    with pytest.raises(ClusterAccessError) as exc:
        all_reduce(served_cluster, tmp_path, GANG)
    said = str(exc.value)
    assert "cannot get customresourcedefinition jobsets.jobset.x-k8s.io" in said
    assert "deploy/rbac.yaml" in said
    assert "target.gang needs to read the JobSet and Kueue CRDs" in said
    assert created(served_cluster, "configmaps") == []  # asked before anything is made


def test_the_local_queue_deploy_offers_is_one_kueue_accepts_and_the_one_the_docs_name() -> None:
    doc = yaml.safe_load((ROOT / "deploy" / "kueue" / "localqueue.yaml").read_text())
    assert crds.problems(doc) == []  # Kueue v0.10.6's LocalQueue schema
    assert doc["metadata"] == {"name": "gpucert", "namespace": NS}
    assert "localQueue: gpucert" in (ROOT / "docs" / "probes.md").read_text()
    assert crds.problems({**doc, "spec": {"clusterQueue": "gpus", "queue": "x"}}) != []
