"""Pods that real admission accepts, and the nodes whose GPUs a probe cannot have: the fake API server refuses pods
as a real one does (Pod Security by the namespace's labels, a missing RuntimeClass, a policy webhook), and a refusal
is every affected node's finding at once, quoting the API, with nothing created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.errors import AdmissionError
from gpucert.measure.targets import open_target
from gpucert.measure.targets.kubernetes.api import KubeApi
from gpucert.plan import run as runner
from gpucert.spec.cluster import load_spec

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import node
from .test_probe_jobs import NS, leftovers, measure, spec_file

WEBSITE = "kubernetes/website, content/en/blog/_posts/2021-12-09-pod-security-admission-beta.md"


def namespace(level: str | None, name: str = NS) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": name}
    if level is not None:
        labels["pod-security.kubernetes.io/enforce"] = level
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


@pytest.fixture
def three(served_cluster: FakeCluster) -> FakeCluster:
    for i in range(1, 4):
        served_cluster.put("nodes", node(f"gpu-{i:02d}"))
    return served_cluster


def dry_run(name: str, container: dict[str, Any]) -> str:
    """`kubectl run --dry-run=server` of a one-container pod: the API's Forbidden message ("" if admitted)."""
    kube = KubeApi.connect("fake", None)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}
    try:
        kube.call("create", "pods", kube.core.create_namespaced_pod, namespace="verify", body=body, dry_run="All")
    except AdmissionError as exc:
        return exc.said
    return ""


def test_the_fake_refuses_pods_with_the_api_servers_words(served_cluster: FakeCluster) -> None:
    """The three refusals the Kubernetes blog recorded from a real API server (WEBSITE), word for word."""
    served_cluster.put("namespaces", namespace("restricted", "verify"))
    kubectl_run_privileged = {"name": "test", "image": "busybox", "securityContext": {"privileged": True}}
    assert dry_run("test", kubectl_run_privileged) == (
        'pods "test" is forbidden: violates PodSecurity "restricted:latest": privileged (container "test" must not '
        'set securityContext.privileged=true), allowPrivilegeEscalation != false (container "test" must set '
        'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "test" must set '
        'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "test" must set '
        'securityContext.runAsNonRoot=true), seccompProfile (pod or container "test" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    escalating = {"name": "busybox", "image": "busybox", "securityContext": {"allowPrivilegeEscalation": True}}
    assert dry_run("busybox-privileged", escalating).startswith(
        'pods "busybox-privileged" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
        '!= false (container "busybox" must set securityContext.allowPrivilegeEscalation=false), unrestricted '
    )
    adding = {
        "name": "busybox",
        "image": "busybox",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}},
    }
    assert dry_run("busybox-baseline", adding) == (
        'pods "busybox-baseline" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities '
        '(container "busybox" must set securityContext.capabilities.drop=["ALL"]; container "busybox" must not '
        'include "CHOWN" in securityContext.capabilities.add), runAsNonRoot != true (pod or container "busybox" '
        'must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "busybox" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    served_cluster.put("namespaces", namespace("baseline", "verify"), "MODIFIED")
    assert dry_run("busybox-baseline", adding) == ""  # CHOWN is in baseline's default set
    assert served_cluster.list("pods") == []  # dry runs are never stored


@pytest.mark.parametrize("level", ["restricted", "baseline", None])
def test_probe_pods_are_admitted_where_pod_security_is_restricted(
    three: FakeCluster, tmp_path: Path, level: str | None
) -> None:
    three.put("namespaces", namespace(level))
    kubelet = FakeKubelet(three).start()
    try:
        _, ev, _ = measure(tmp_path)
    finally:
        kubelet.close()
    assert [ev.reachable(f"gpu-0{i}").status.value for i in (1, 2, 3)] == ["pass"] * 3
    assert kubelet.refused == {}
    pod = next(e[4] for e in three.events if e[1] == "pods")["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def run_measure(cluster: FakeCluster, tmp_path: Path, **kw: Any) -> tuple[Any, FakeKubelet]:
    kubelet = FakeKubelet(cluster).start()
    try:
        _, ev, _ = measure(tmp_path, **kw)
    finally:
        kubelet.close()
    return ev, kubelet


def test_a_policy_webhook_refusing_probe_pods_is_every_nodes_finding_at_once(
    three: FakeCluster, tmp_path: Path
) -> None:
    said = (
        'admission webhook "validate.kyverno.svc" denied the request: policy require-team-label: label team is required'
    )
    three.fail("POST", "pods", 403, message=f'pods "x" is forbidden: {said}')
    ev, _ = run_measure(three, tmp_path)
    for i in (1, 2, 3):
        finding = ev.reachable(f"gpu-0{i}")
        assert finding.status.value == "fail"
        assert said in finding.message
        assert "refused the probe pods at once" in finding.message
    assert not [e for e in three.events if e[1] in ("jobs", "configmaps")]  # nothing was created


def test_rdma_all_reduce_pods_in_a_restricted_namespace_quote_pod_security(three: FakeCluster, tmp_path: Path) -> None:
    three.put("namespaces", namespace("restricted"))
    ev, _ = run_measure(three, tmp_path, multinode={"maxNodes": 3}, fabricResources={"rdma/rdma_shared_device_a": "1"})
    assert ev.reachable("gpu-01").status.value == "pass"  # the probe pods meet restricted
    finding = ev.multinode()
    assert finding.status.value in ("fail", "error")
    assert 'violates PodSecurity "restricted:latest": non-default capabilities' not in finding.message  # restricted
    assert (
        'violates PodSecurity "restricted:latest": runAsUser=0 (container "probe" must not set' not in finding.message
    )
    assert (
        'violates PodSecurity "restricted:latest": unrestricted capabilities (container "probe" must not '
        + ('include "IPC_LOCK" in securityContext.capabilities.add)')
        in finding.message
    )
    assert "pod-security.kubernetes.io/enforce=privileged" in finding.message
    assert not [e for e in three.events if e[1] == "jobs" and e[4]["spec"].get("completionMode") == "Indexed"]


def test_the_runtime_class_goes_on_every_probe_pod_and_a_missing_one_is_named(
    three: FakeCluster, tmp_path: Path
) -> None:
    ev, _ = run_measure(three, tmp_path, runtimeClassName="nvidia")
    finding = ev.reachable("gpu-02")
    assert finding.status.value == "fail"
    assert 'pod rejected: RuntimeClass "nvidia" not found' in finding.message
    assert "target.runtimeClassName" in finding.message
    three.put(
        "runtimeclasses",
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"},
    )
    (tmp_path / "again").mkdir()
    ev, _ = run_measure(three, tmp_path / "again", runtimeClassName="nvidia")
    assert ev.reachable("gpu-02").status.value == "pass"
    pod = next(e[4] for e in three.events if e[1] == "pods")["spec"]
    assert pod["runtimeClassName"] == "nvidia"


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (
            {
                "nvidia.com/mig.strategy": "single",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                "nvidia.com/gpu.slices.gi": "1",
                "nvidia.com/mig.config": "all-1g.10gb",
                "nvidia.com/mig.config.state": "success",
            },
            "MIG mode (nvidia.com/mig.strategy=single, nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb)",
        ),
        (
            {
                "nvidia.com/mig.strategy": "mixed",
                "nvidia.com/mig-1g.10gb.count": "56",
                "nvidia.com/mig.config.state": "success",
            },
            "MIG mode (nvidia.com/mig.strategy=mixed, nvidia.com/mig-1g.10gb.count=56)",
        ),
        (
            {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"},
            "time-sliced GPUs (nvidia.com/gpu.replicas=4",
        ),
    ],
)
def test_a_node_with_shared_gpus_is_refused_with_the_reason(
    three: FakeCluster, tmp_path: Path, labels: dict[str, str], said: str
) -> None:
    shared = node("gpu-02", extra_labels=labels)
    three.put("nodes", shared, "MODIFIED")
    ev, _ = run_measure(three, tmp_path)
    finding = ev.reachable("gpu-02")
    assert finding.status.value == "fail"
    assert said in finding.message
    assert "gpucert certifies whole GPUs only" in finding.message
    assert "unhealthy" not in finding.message  # no longer the guess of a Pending pod
    assert ev.reachable("gpu-01").status.value == "pass"
    assert "gpu-02" not in {
        e[4]["metadata"]["annotations"].get("gpucert.io/node") for e in three.events if e[1] == "jobs"
    }


def test_requests_equal_limits_and_the_spec_overrides_them(three: FakeCluster, tmp_path: Path) -> None:
    ev, _ = run_measure(three, tmp_path, resources={"cpu": "6", "memory": "40Gi"})
    assert ev.reachable("gpu-01").status.value == "pass"
    job = next(e[4] for e in three.events if e[1] == "jobs")
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "6", "memory": "40Gi", "nvidia.com/gpu": "8"}
    # no blockOwnerDeletion: with OwnerReferencesPermissionEnforcement (OpenShift) it needs update on finalizers
    refs = [
        r for e in three.events for r in e[4]["metadata"].get("ownerReferences") or [] if e[1] in ("jobs", "services")
    ]
    assert refs
    assert not any("blockOwnerDeletion" in r for r in refs)
    assert leftovers(three) == {"jobs": 0, "pods": 0, "configmaps": 0, "services": 0}


def pools_spec(tmp_path: Path, taints: list[dict[str, str]]) -> Path:
    doc = yaml.safe_load(spec_file(tmp_path).read_text())
    doc["apiVersion"] = "gpucert.io/v1alpha2"
    expect, baseline = doc.pop("expect"), doc["certify"].pop("baseline")
    doc["pools"] = [{"name": "train", "expect": expect, "baseline": baseline, "taints": taints}]
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_no_execute_taints_a_pool_declares_are_tolerated(three: FakeCluster, tmp_path: Path) -> None:
    tainted = node("gpu-03")
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}]
    three.put("nodes", tainted, "MODIFIED")
    declared = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}]
    for taints, result in (([], "fail"), (declared, "pass")):
        (tmp_path / result).mkdir()
        spec = load_spec(pools_spec(tmp_path / result, taints))
        kubelet = FakeKubelet(three).start()
        try:
            with runner.new_run(tmp_path / result / "reports", spec, "measure") as folder:
                pass
            t = open_target(spec)
            runner.measure(t, runner.plan(t, spec, folder), spec, folder)
        finally:
            kubelet.close()
        evidence = json.loads((folder.path / "evidence" / "gpu-03.json").read_text())
        assert evidence["collected"] is (result == "pass"), evidence.get("errors")
        if result == "fail":  # the scheduler's words: the taint nobody tolerated
            assert "untolerated taint {nvidia.com/gpu: present}" in evidence["errors"][0]["message"]
    job = [e[4] for e in three.events if e[1] == "jobs"][-1]
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoExecute"} in job["spec"][
        "template"
    ]["spec"]["tolerations"]


PSA = "kubernetes/pod-security-admission 8f84a87 (July 2026), policy"


def test_the_fakes_baseline_refuses_what_real_pod_security_refuses() -> None:
    """Baseline's checks of AppArmor, /proc mount, SELinux, seccomp and sysctls: each case and its words are the
    upstream unit tests' (PSA: check_appArmorProfile_test.go, check_procMount_baseline_test.go,
    check_seLinuxOptions_test.go, check_sysctls_test.go; seccomp as check_seccompProfile_baseline.go words it), in
    registry.go's order; `restricted` refuses them too (none of them is overridden away)."""
    from .fakeadmission import violations

    def c(name: str, **sc: Any) -> dict[str, Any]:
        return {"name": name, "securityContext": sc}

    assert violations("baseline", {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}) == (
        'forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined")'
    )
    proc = [c("a"), c("b", procMount="Default"), c("d", procMount="Unmasked"), c("e", procMount="other")]
    assert violations("baseline", {"containers": proc}) == (
        'procMount (containers "d", "e" must not set securityContext.procMount to "Unmasked", "other")'
    )
    selinux = {
        "securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
        "containers": [
            c("a", seLinuxOptions={"type": "container_t"}),
            c("d", seLinuxOptions={"type": "container_engine_t"}),
            c("e", seLinuxOptions={"type": "bar"}),
            c("f", seLinuxOptions={"user": "bar"}),
            c("g", seLinuxOptions={"role": "baz"}),
        ],
    }
    assert violations("baseline", selinux) == (
        'seLinuxOptions (pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", '
        '"foo"; user may not be set; role may not be set)'
    )
    unconfined = {"containers": [c("a", seccompProfile={"type": "Unconfined"}), c("b")]}
    assert violations("baseline", unconfined) == (
        'seccompProfile (container "a" must not set securityContext.seccompProfile.type to "Unconfined")'
    )
    sysctl = {"securityContext": {"sysctls": [{"name": "a"}, {"name": "net.ipv4.tcp_syncookies"}, {"name": "b"}]}}
    assert violations("baseline", sysctl) == "forbidden sysctls (a, b)"
    every = {
        "securityContext": {"sysctls": [{"name": "kernel.msgmax"}], "appArmorProfile": {"type": "Unconfined"}},
        "containers": [c("x", procMount="Unmasked", seLinuxOptions={"type": "spc_t"})],
    }
    assert violations("baseline", every) == (
        'forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined"), procMount (container '
        '"x" must not set securityContext.procMount to "Unmasked"), seLinuxOptions (container "x" set forbidden '
        'securityContext.seLinuxOptions: type "spc_t"), forbidden sysctls (kernel.msgmax)'
    )
    restricted = violations("restricted", every)
    for reason in ("forbidden AppArmor profile", "procMount", "seLinuxOptions", "forbidden sysctls"):
        assert f"{reason} (" in restricted


def test_host_network_all_reduce_pods_are_refused_for_their_defaulted_host_ports_too(
    three: FakeCluster, tmp_path: Path
) -> None:
    """With hostNetwork the API server defaults each container port's hostPort to its containerPort before
    admission (kubernetes pkg/apis/core/v1/defaults.go, defaultHostNetworkPorts), so `baseline` refuses the
    all-reduce pods for the host namespace and for the rendezvous port, in check order (PSA registry.go)."""
    three.put("namespaces", namespace("baseline"))
    ev, _ = run_measure(three, tmp_path, multinode={"maxNodes": 3}, fabricHostNetwork=True)
    finding = ev.multinode()
    assert finding.status.value in ("fail", "error")
    assert (
        'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPort (container "probe" '
        "uses hostPort "
    ) in finding.message
