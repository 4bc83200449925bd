"""Who refused a request, and whether a node's GPUs are whole: read from the API's own words and GFD's labels."""

from __future__ import annotations

import json

import pytest

from gpucert.measure.targets.kubernetes.admission import admission_fix
from gpucert.measure.targets.kubernetes.api import _rbac_denial
from gpucert.measure.targets.kubernetes.podspec import fabric_level, probe_resources
from gpucert.measure.targets.kubernetes.preflight import _tolerates
from gpucert.measure.targets.kubernetes.sharing import refusal, sharing
from gpucert.spec.cluster import GpuSharing
from gpucert.spec.kubernetes import KubernetesTargetSpec


def status(message: str) -> str:
    return json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403, "message": message})


@pytest.mark.parametrize(
    ("message", "rbac"),
    [
        # k8s.io/apiserver endpoints/handlers/responsewriters/errors.go, through apierrors.NewForbidden
        (
            'pods is forbidden: User "system:serviceaccount:gpucert:gpucert" cannot create resource "pods" in API '
            'group "" in the namespace "gpucert"',
            True,
        ),
        ('pods "p" is forbidden: User "u" cannot get resource "pods" in API group "" in the namespace "x"', True),
        ("injected 403", True),
        (
            'pods "p" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0 (container "probe" must not '
            "set runAsUser=0)",
            False,
        ),
        ('pods "p" is forbidden: pod rejected: RuntimeClass "nvidia" not found', False),
        ('pods "p" is forbidden: admission webhook "validate.kyverno.svc" denied the request: no', False),
    ],
)
def test_a_403_is_rbac_or_admission_by_the_apis_words(message: str, rbac: bool) -> None:
    assert _rbac_denial(status(message)) is rbac


# the labels GFD puts on every node of a GPU Operator install, MIG capable but not in MIG mode
WHOLE = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/gpu.replicas": "1",
}


@pytest.mark.parametrize(
    ("extra", "found"),
    [
        ({}, GpuSharing.NONE),
        ({"nvidia.com/gpu.replicas": "0"}, GpuSharing.NONE),  # sharing disabled: GFD writes 0
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}, GpuSharing.MIG),
        ({"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.count": "2"}, GpuSharing.MIG),
        ({"nvidia.com/mig.config.state": "pending"}, GpuSharing.MIG),  # the MIG manager is reconfiguring it
        (
            {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"},
            GpuSharing.TIME_SLICING,
        ),
    ],
)
def test_whole_or_shared_gpus_from_gfd_labels(extra: dict[str, str], found: GpuSharing) -> None:
    assert sharing({**WHOLE, **extra})[0] is found
    why = refusal("n1", {**WHOLE, **extra}, GpuSharing.MIG)
    assert bool(why) is (found is not GpuSharing.NONE)
    if found is GpuSharing.MIG:
        assert "as its pool expects" in why
    if extra.get("nvidia.com/mig.config.state") == "pending":
        assert "wait until the MIG manager has applied all-disabled" in why


def test_each_refusal_says_what_to_change() -> None:
    quota = (
        'pods "p" is forbidden: exceeded quota: gpu-team, requested: memory=28Gi, used: memory=0, limited: memory=16Gi'
    )
    assert "ResourceQuota, or lower target.resources" in admission_fix(quota, "gpucert", "restricted", "the probe pods")
    psa = 'pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)'
    fix = admission_fix(psa, "gpucert", "privileged", "the all-reduce pods")
    assert "kubectl label namespace gpucert --overwrite pod-security.kubernetes.io/enforce=privileged" in fix
    assert psa in fix  # the API's words, quoted


def test_probe_resources_are_guaranteed_and_sized_from_the_gpus() -> None:
    t = KubernetesTargetSpec.model_validate({"kind": "kubernetes"})
    r = probe_resources(t, 4)
    assert r["requests"] == r["limits"] == {"cpu": "5", "memory": "16Gi", "nvidia.com/gpu": "4"}
    t = KubernetesTargetSpec.model_validate({"kind": "kubernetes", "resources": {"memory": "64Gi"}})
    assert probe_resources(t, 4)["limits"]["memory"] == "64Gi"


def test_the_all_reduce_needs_privileged_only_for_rdma_or_the_host_network() -> None:
    plain = KubernetesTargetSpec.model_validate({"kind": "kubernetes"})
    assert fabric_level(plain) == ("restricted", "")
    rdma = KubernetesTargetSpec.model_validate({"kind": "kubernetes", "fabricResources": {"rdma/ib": "1"}})
    assert fabric_level(rdma)[0] == "privileged"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, False),  # the default: not NoExecute
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoExecute"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "other", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
    ],
)
def test_a_toleration_covers_a_taint_as_the_scheduler_decides(toleration: dict[str, str], tolerated: bool) -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}
    assert _tolerates(toleration, taint) is tolerated


def test_gpus_shared_through_mps_are_named_mps_not_time_slicing() -> None:
    """k8s-device-plugin v0.15+ GFD labels a replicated GPU with its strategy (internal/lm/resource.go baseLabeler:
    `nvidia.com/gpu.sharing-strategy`; api/config/v1 sharing.go: none | time-slicing | mps). An MPS node is called
    MPS, its fix names MPS, and a pool that says `expect.gpuSharing: mps` expects it."""
    mps = {
        **WHOLE,
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "mps",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
    }
    assert sharing(mps)[0] is GpuSharing.MPS
    why = refusal("n1", mps, GpuSharing.MPS)
    assert "GPUs shared through MPS (nvidia.com/gpu.sharing-strategy=mps, nvidia.com/gpu.replicas=4" in why
    assert "as its pool expects" in why
    assert "without MPS sharing" in why
    assert "time-sl" not in why
    sliced = {**mps, "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    assert sharing(sliced)[0] is GpuSharing.TIME_SLICING
    assert "which its pool does not expect" in refusal("n1", sliced, GpuSharing.MPS)
