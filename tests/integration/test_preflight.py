"""`gpucert preflight` against the fake API server: a cluster ready for the run, then each prerequisite broken one
at a time; preflight names exactly that one and its fix, and `certify` stops before it creates anything."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucert.cli import main as cli

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import gpu_pod, node
from .rbac import not_granted, roles_of, unused, verb
from .test_admission import namespace
from .test_probe_jobs import NS, spec_file

RDMA = {"rdma/rdma_shared_device_a": "1"}
RUNTIME = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


@pytest.fixture
def ready(served_cluster: FakeCluster) -> FakeCluster:
    """Three GPU nodes with RDMA, the run namespace labelled as deploy/ labels it, the nvidia RuntimeClass."""
    for i in range(1, 4):
        n = node(f"gpu-0{i}")
        n["status"]["allocatable"].update(RDMA)
        served_cluster.put("nodes", n)
    served_cluster.put("namespaces", namespace("restricted"))
    served_cluster.put("runtimeclasses", RUNTIME)
    return served_cluster


def preflight(spec: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["preflight", str(spec), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


def failing(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["item"]: c for c in doc["checks"] if c["status"] == "fail"}


def test_a_ready_cluster_is_ready_and_preflight_is_read_only(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path, runtimeClassName="nvidia", multinode={"maxNodes": 3})
    before = len(ready.events)
    code, doc = preflight(spec, capsys)
    assert (code, failing(doc)) == (0, {})
    assert doc["ready"] is True
    items = {c["item"] for c in doc["checks"]}
    assert {"create jobs.batch in namespace gpucert", "get pods/log in namespace gpucert"} <= items
    assert "the probe pods: Pod Security `restricted`" in items
    assert "3 of 3 nodes" in items
    assert len(ready.events) == before  # nothing created: dry runs only
    methods = {m for m, p in ready.requests}
    assert methods <= {"GET", "POST"}
    posts = {p.split("?")[0] for m, p in ready.requests if m == "POST"}
    assert posts <= {"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", f"/api/v1/namespaces/{NS}/pods"}
    assert all("dryRun=All" in p for m, p in ready.requests if m == "POST" and "/pods" in p)
    # deploy/rbac.yaml grants what preflight reads, and its preflight role nothing more
    used = {verb(m, p) for m, p in ready.requests if "selfsubjectaccessreviews" not in p}
    assert not_granted(used, roles_of(NS, "gpucert")) == set()
    assert unused(used, {"gpucert-preflight"}) == set()


def pod_lists(c: FakeCluster) -> list[str]:
    """The queries of the lists of pods across all namespaces."""
    return [p.partition("?")[2] for m, p in c.requests if m == "GET" and p.partition("?")[0] == "/api/v1/pods"]


def test_the_gpu_pods_of_every_node_come_from_one_list_of_the_clusters_pods(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: one list of the cluster's unfinished pods for the preflight, grouped by node, where it was one list
    a node; a finished pod holds no GPU, and a run told to wait for busy nodes needs no list at all."""
    for i in range(4, 10):
        ready.put("nodes", node(f"gpu-0{i}"))
    ready.put("pods", gpu_pod("trainer-0", "gpu-01"))
    done = gpu_pod("trainer-done", "gpu-02")
    done["status"]["phase"] = "Succeeded"
    ready.put("pods", done)
    code, doc = preflight(spec_file(tmp_path), capsys)
    assert (code, list(failing(doc))) == (1, ["gpu-01: GPU pods"])
    assert "8 of 9 nodes" in {c["item"] for c in doc["checks"]}
    (query,) = pod_lists(ready)  # nine nodes, one list (it was nine)
    assert "status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed" in query
    ready.requests.clear()
    code, doc = preflight(spec_file(tmp_path, busyTimeoutSeconds=600), capsys)
    assert (code, failing(doc)) == (0, {})
    assert pod_lists(ready) == []


def deny_jobs(c: FakeCluster) -> None:
    c.denied.add(("batch", "jobs", "create"))


def mig(c: FakeCluster) -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu.slices.gi": "1"}
    c.put("nodes", node("gpu-02", extra_labels=labels), "MODIFIED")


def replicated(c: FakeCluster) -> None:
    c.put("nodes", node("gpu-02", extra_labels={"nvidia.com/gpu.replicas": "4"}), "MODIFIED")


def mps(c: FakeCluster) -> None:
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "mps"}
    c.put("nodes", node("gpu-02", extra_labels=labels), "MODIFIED")


def no_execute(c: FakeCluster) -> None:
    n = c.get("nodes", None, "gpu-03")
    assert n is not None
    n["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}]
    c.put("nodes", n, "MODIFIED")


def cordoned(c: FakeCluster) -> None:
    n = c.get("nodes", None, "gpu-02")
    assert n is not None
    n["spec"]["unschedulable"] = True
    c.put("nodes", n, "MODIFIED")


def short(c: FakeCluster) -> None:
    c.put("nodes", node("gpu-02", allocatable=7), "MODIFIED")


def busy(c: FakeCluster) -> None:
    c.put("pods", gpu_pod("trainer-0", "gpu-01"))


BROKEN: list[tuple[str, Callable[[FakeCluster], None], dict[str, Any], str, str]] = [
    ("a missing verb", deny_jobs, {}, "create jobs.batch in namespace gpucert", "deploy/rbac.yaml"),
    ("a missing namespace", lambda c: c.delete("namespaces", None, NS), {}, "namespace gpucert", "deploy/rbac.yaml"),
    (
        "a restricted namespace for RDMA all-reduce pods",
        lambda c: None,
        {"multinode": {"maxNodes": 3}, "fabricResources": RDMA},
        "the all-reduce pods (IPC_LOCK for RDMA (target.fabricResources)): Pod Security `privileged`",
        "pod-security.kubernetes.io/enforce=privileged",
    ),
    ("a MIG node", mig, {}, "gpu-02: shared GPUs", "nvidia.com/mig.config=all-disabled"),
    ("a replicated node", replicated, {}, "gpu-02: shared GPUs", "without time-slicing"),
    ("an MPS node", mps, {}, "gpu-02: shared GPUs", "without MPS sharing"),
    ("a NoExecute taint", no_execute, {}, "gpu-03: taint", "pools[0].taints"),
    (
        "a missing runtime class",
        lambda c: c.delete("runtimeclasses", None, "nvidia"),
        {"runtimeClassName": "nvidia"},
        "RuntimeClass nvidia",
        "correct target.runtimeClassName",
    ),
    ("a cordoned node", cordoned, {}, "gpu-02: cordoned", "kubectl uncordon gpu-02"),
    ("a node short of GPUs", short, {}, "gpu-02: short of GPUs", "kubectl describe node gpu-02"),
    ("a node whose GPUs are held", busy, {}, "gpu-01: GPU pods", "target.busyTimeoutSeconds"),
    (
        "an image not pinned",
        lambda c: None,
        {"image": "registry.local/gpucert-probe:0.1.0"},
        "registry.local/gpucert-probe:0.1.0",
        "target.imagePin: tag",
    ),
    (
        "a pull secret that is not there",
        lambda c: None,
        {"imagePullSecrets": ["regcred"]},
        "imagePullSecret regcred",
        "gpucert may not read secrets",
    ),
]


@pytest.mark.parametrize(("what", "breaks", "target", "item", "fix"), BROKEN, ids=[b[0] for b in BROKEN])
def test_each_prerequisite_broken_alone_is_named_with_its_fix_and_certify_stops(
    ready: FakeCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    breaks: Callable[[FakeCluster], None],
    target: dict[str, Any],
    item: str,
    fix: str,
) -> None:
    multinode = target.pop("multinode", None)
    spec = spec_file(tmp_path, multinode, **target)
    breaks(ready)
    code, doc = preflight(spec, capsys)
    bad = {c["item"]: c for c in doc["checks"] if c["status"] != "ok"}
    assert list(bad) == [item], what
    assert fix in bad[item]["fix"] + bad[item]["detail"]
    if bad[item]["status"] == "warn":  # what gpucert may not look at is said, and does not stop the run
        assert code == 0
        return
    assert code == 1
    before = len(ready.events)
    kubelet = FakeKubelet(ready).start()
    try:
        code = cli.main(["certify", str(spec), "--reports", str(tmp_path / "reports")])
    finally:
        kubelet.close()
    out = capsys.readouterr()
    assert code == 2
    assert "not started: preflight found 1 problem" in out.err
    assert "NOT READY: 1 problem(s) would stop the run" in out.out
    assert item.split()[0] in out.out  # the table, folded to the terminal's width, names it
    assert len(ready.events) == before  # nothing created
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_skip_preflight_goes_ahead_and_the_verdict_says_so(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cordoned(ready)
    spec = spec_file(tmp_path)
    kubelet = FakeKubelet(ready).start()
    try:
        code = cli.main(["certify", str(spec), "--reports", str(tmp_path / "reports"), "--skip-preflight", "-q"])
    finally:
        kubelet.close()
    out = capsys.readouterr().out
    assert code in (0, 1)
    verdict = json.loads(next((tmp_path / "reports").glob("*/verdict.json")).read_text())
    assert verdict["preflight"] == {"skipped": True}
    assert "preflight: skipped (--skip-preflight)" in out.replace("\n", " ")


def test_certify_records_the_preflight_it_passed(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet = FakeKubelet(ready).start()
    try:
        cli.main(["certify", str(spec_file(tmp_path)), "--reports", str(tmp_path / "reports"), "-q"])
    finally:
        kubelet.close()
    verdict = json.loads(next((tmp_path / "reports").glob("*/verdict.json")).read_text())
    assert verdict["preflight"]["skipped"] is False


def test_a_spec_that_is_not_a_cluster_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    assert cli.main(["preflight", str(root / "examples" / "demo.yaml")]) == 2
    assert "preflight checks a live cluster" in capsys.readouterr().err


def test_preflight_of_one_node_checks_as_recertify_does(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cordoned(ready)  # a repaired node comes back cordoned: recertify expects it, and cordons it itself
    spec = spec_file(tmp_path)
    code, doc = preflight(spec, capsys, "--node", "gpu-02", "--drain")
    assert (code, failing(doc)) == (0, {})
    items = {c["item"] for c in doc["checks"]}
    assert {"patch nodes cluster-wide", "create leases.coordination.k8s.io in namespace gpucert"} <= items
    assert "create pods/eviction cluster-wide" in items
    assert "1 of 1 nodes" in items
    code, doc = preflight(spec, capsys, "--node", "gpu-09")
    assert code == 1
    assert failing(doc)["GPU nodes"]["detail"] == "no node matches gpu-09"


def test_without_a_dry_run_the_namespace_labels_decide(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RBAC that allows no dry run: the level each pod kind needs against the namespace's enforce label."""
    ready.denied.add(("", "pods", "create"))
    spec = spec_file(tmp_path, {"maxNodes": 3}, fabricResources=RDMA)
    code, doc = preflight(spec, capsys)
    assert code == 1
    bad = failing(doc)
    assert set(bad) == {
        "create pods in namespace gpucert",
        "the all-reduce pods (IPC_LOCK for RDMA (target.fabricResources)): Pod Security `privileged`",
    }
    assert (
        "pod-security.kubernetes.io/enforce=privileged"
        in bad["the all-reduce pods (IPC_LOCK for RDMA (target.fabricResources)): Pod Security `privileged`"]["fix"]
    )


def test_without_a_dry_run_a_namespace_without_a_label_is_not_judged_privileged(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No enforce label: the level is the cluster's default (the PodSecurity plugin's AdmissionConfiguration,
    `defaults.enforce`, kubernetes.io/docs/tasks/configure-pod-container/enforce-standards-admission-controller/),
    which the API does not show. Every default admits `restricted` pods; RDMA's `privileged` ones are not known."""
    ready.denied.add(("", "pods", "create"))
    ready.put("namespaces", namespace(None), "MODIFIED")
    spec = spec_file(tmp_path, {"maxNodes": 3}, fabricResources=RDMA)
    code, doc = preflight(spec, capsys)
    assert code == 1  # RBAC allows no dry run: that alone fails
    rows = {c["item"]: c for c in doc["checks"]}
    probe = rows["the probe pods: Pod Security `restricted`"]
    assert probe["status"] == "ok"
    fabric = rows["the all-reduce pods (IPC_LOCK for RDMA (target.fabricResources)): Pod Security `privileged`"]
    assert fabric["status"] == "warn"
    assert "has no pod-security.kubernetes.io/enforce label" in fabric["detail"]
    assert "pod-security.kubernetes.io/enforce=privileged" in fabric["fix"]


def test_a_grant_taken_away_is_refused_by_the_fake_as_by_the_authorizer(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`denied` takes the grant away from the requests themselves, not only from SelfSubjectAccessReviews: a run
    that skipped preflight meets the authorizer's 403 (k8s.io/apiserver responsewriters/errors.go forbiddenMessage,
    through apierrors.NewForbidden: `jobs.batch is forbidden: User ... cannot create resource "jobs" in API group
    "batch" in the namespace "gpucert"`) and says so; nothing passes, no Job exists."""
    ready.denied.add(("batch", "jobs", "create"))
    kubelet = FakeKubelet(ready).start()
    try:
        code = cli.main(["certify", str(spec_file(tmp_path)), "--reports", str(tmp_path / "r"), "--skip-preflight"])
    finally:
        kubelet.close()
    out = capsys.readouterr()
    assert code != 0
    assert not ready.list("jobs", NS)
    said = (
        'jobs.batch is forbidden: User "system:serviceaccount:gpucert:gpucert" cannot create resource "jobs" in API '
        'group "batch" in the namespace "gpucert"'
    )
    text = (out.out + out.err).replace("\n", " ")
    assert f"forbidden for user gpucert-ci of context fake ({said})" in text


def test_a_node_that_is_not_ready_is_named_with_a_repair_not_a_toleration(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NotReady node, as the node lifecycle controller leaves it: Ready=Unknown and the not-ready / unreachable
    taints (k8s.io/api core/v1 well_known_taints.go; TaintNodesByCondition). Preflight says it is not Ready and that
    the node wants repair; it does not advise declaring the controller's taints in pools[].taints."""
    n = ready.get("nodes", None, "gpu-03")
    assert n is not None
    n["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        }
    ]
    n["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    ]
    ready.put("nodes", n, "MODIFIED")
    code, doc = preflight(spec_file(tmp_path), capsys)
    assert code == 1
    bad = failing(doc)
    assert set(bad) == {"gpu-03: not Ready", "gpu-03: taint"}
    assert (
        "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)" in bad["gpu-03: not Ready"]["detail"]
    )
    assert "pools[" not in bad["gpu-03: taint"]["fix"]
    assert "repair it" in bad["gpu-03: taint"]["fix"]


@pytest.mark.parametrize(
    ("toleration", "said"),
    [
        ({"key": "nvidia.com/gpu", "operator": "exists"}, "operator 'exists' is not Equal or Exists"),
        ({"key": "dedicated", "operator": "Exists", "value": "ml"}, "value must be empty when operator is Exists"),
        ({"operator": "Equal", "value": "ml"}, "operator must be Exists when key is empty"),
        ({"key": "dedicated", "effect": "NoExecut"}, "effect 'NoExecut' is not one of"),
    ],
)
def test_a_toleration_the_api_server_would_refuse_is_bad_input(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], toleration: dict[str, str], said: str
) -> None:
    """A real API server refuses such a pod with 422 Invalid (kubernetes pkg/apis/core/validation/validation.go,
    ValidateTolerations), which a Job's controller meets only after the Job exists; the spec is refused first."""
    spec = spec_file(tmp_path, tolerations=[toleration])
    assert cli.main(["preflight", str(spec)]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "tolerations" in err
    assert str(spec) in err


def test_a_pod_the_api_server_finds_invalid_is_that_pods_row_not_the_api_server(
    ready: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run answered 422 Invalid (apierrors.NewInvalid: `Pod "NAME" is invalid: FIELD: ...`, reason Invalid):
    the pod's row quotes it and points at the spec; the API server itself answered and is not the problem."""
    said = (
        'Pod "gpucert-preflight" is invalid: spec.containers[0].resources.requests: Invalid value: "9": must be less '
        "than or equal to cpu limit of 8"
    )
    ready.fail("POST", "pods", 422, message=said)
    code, doc = preflight(spec_file(tmp_path), capsys)
    assert code == 1
    bad = failing(doc)
    assert list(bad) == ["the probe pods: Pod Security `restricted`"]
    row = bad["the probe pods: Pod Security `restricted`"]
    assert said in row["detail"]
    assert "target.resources" in row["fix"]
