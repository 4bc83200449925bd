"""Stack observation from API-shaped objects and the configure rules over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.plan.checks import CheckStatus
from gpucert.spec.cluster import load_spec
from gpucert.stack import rules
from gpucert.stack.compat import cuda_of_driver, min_driver_for_cuda
from gpucert.stack.components import version_from_image
from gpucert.stack.observe import observe_stack

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvcr.io/nvidia/driver:570.124.06-ubuntu22.04", "570.124.06"),
        ("nvcr.io/nvidia/k8s/container-toolkit:v1.17.4-ubuntu20.04", "1.17.4"),
        ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "0.17.0"),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.4-ubuntu22.04", "4.1.1-4.0.4"),
        ("registry.local:5000/driver:550.54.15", "550.54.15"),
        ("registry.local:5000/driver@sha256:abcd", None),
        ("nvcr.io/nvidia/driver:latest", None),
    ],
)
def test_version_from_image(image: str, version: str | None) -> None:
    assert version_from_image(image) == version


def test_compat_table() -> None:
    assert min_driver_for_cuda("12.8") == "570.26"
    assert min_driver_for_cuda("12.4.1") == "550.54.14"
    assert min_driver_for_cuda("10.2") is None
    assert cuda_of_driver("570.124.06") == "12.8"
    assert cuda_of_driver("550.54.14") == "12.4"


def node(name: str, ready: str = "True", kubelet: str = "v1.31.4", labels: dict[str, str] | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.count": "8", **(labels or {})}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "m"}],
            "nodeInfo": {
                "kubeletVersion": kubelet,
                "containerRuntimeVersion": "containerd://1.7.24",
                "kernelVersion": "k",
                "osImage": "os",
            },
        },
    }


def pod(app: str, container: str, image: str, node_name: str, started: str, ready_at: str) -> dict:
    return {
        "metadata": {"name": f"{app}-x", "namespace": "gpu-operator", "labels": {"app": app}},
        "spec": {"nodeName": node_name, "containers": [{"name": container, "image": image}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}],
            "containerStatuses": [{"name": container, "state": {"running": {"startedAt": started}}}],
        },
    }


def test_observe_and_rules() -> None:
    spec = load_spec(ROOT / "examples" / "demo.yaml")
    pods = [
        pod(
            "nvidia-driver-daemonset",
            "nvidia-driver-ctr",
            "nvcr.io/nvidia/driver:570.124.06-ubuntu22.04",
            "a",
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:01:00Z",
        ),
        pod(
            "nvidia-container-toolkit-daemonset",
            "nvidia-container-toolkit-ctr",
            "nvcr.io/nvidia/k8s/container-toolkit:v1.17.4-ubuntu20.04",
            "a",
            "2026-01-01T00:00:30Z",
            "2026-01-01T00:02:00Z",
        ),
        pod("other-app", "c", "x:1.0", "a", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
    ]
    stack = observe_stack([node("a"), node("b", kubelet="v1.30.1"), node("c"), node("d", ready="Unknown")], pods)
    a = stack.nodes["a"]
    assert set(a.components) == {"driver", "container-toolkit"}
    assert rules.version(a, spec.stack, "driver").status is CheckStatus.PASS
    missing = rules.version(a, spec.stack, "device-plugin")
    assert missing.status is CheckStatus.FAIL
    assert "no device-plugin pod" in missing.message
    order = rules.ordering(a, spec.stack)
    assert order.status is CheckStatus.FAIL
    assert "container-toolkit started at 2026-01-01T00:00:30Z, before driver" in order.message
    skew = rules.skew(stack.nodes["b"], stack.nodes)
    assert skew.status is CheckStatus.FAIL
    assert "kubelet v1.30.1 where 2 of 3 nodes run v1.31.4" in skew.message
    assert rules.skew(a, stack.nodes).status is CheckStatus.PASS
    counted = rules.skew_counts(stack.nodes)  # counted once for a fleet whose every node is judged: the same words
    assert rules.skew(stack.nodes["b"], {}, counted) == skew
    assert rules.skew(a, {}, counted).status is CheckStatus.PASS
    assert not stack.nodes["d"].ready
    assert rules.reachable(stack.nodes["d"], "d", None).status is CheckStatus.FAIL
    assert rules.kubernetes_version(stack.nodes["b"], spec.stack).status is CheckStatus.PASS
    assert rules.runtime(a, spec.stack).status is CheckStatus.PASS


def test_compat_rule_catches_an_old_driver_reporting_old_cuda() -> None:
    spec = load_spec(ROOT / "examples" / "demo.yaml")
    labels = {"nvidia.com/cuda.driver-version.full": "570.124.06", "nvidia.com/cuda.runtime-version.full": "12.4"}
    stack = observe_stack([node("a", labels=labels)], [])
    f = rules.compat(stack.nodes["a"], spec.stack)
    assert f.status is CheckStatus.FAIL
    assert "reports CUDA 12.4" in f.message


def test_gpu_count_without_gfd_labels_is_a_finding() -> None:
    spec = load_spec(ROOT / "examples" / "demo.yaml")
    n = node("a")
    n["metadata"]["labels"] = {}
    f = rules.gpu_count(observe_stack([n], []).nodes["a"], spec.pools[0].expect, None)
    assert f.status is CheckStatus.FAIL
    assert "GPU feature discovery has not labelled" in f.message
