"""Kubernetes objects shaped like a GPU Operator v25 install, as the API server serves them in JSON."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

NS = "gpu-operator"
T0 = datetime(2026, 11, 20, 9, 0, 0, tzinfo=UTC)
VERSIONS = {
    "driver": "570.124.06",
    "container-toolkit": "1.17.5",
    "device-plugin": "0.17.1",
    "gpu-feature-discovery": "0.17.1",
    "dcgm-exporter": "4.1.1-4.0.4",
}
# (app label = DaemonSet name, main container, image template, init containers)
DAEMONSETS = {
    "driver": (
        "nvidia-driver-daemonset",
        "nvidia-driver-ctr",
        "nvcr.io/nvidia/driver:{v}-ubuntu22.04",
        ["k8s-driver-manager"],
    ),
    "container-toolkit": (
        "nvidia-container-toolkit-daemonset",
        "nvidia-container-toolkit-ctr",
        "nvcr.io/nvidia/k8s/container-toolkit:v{v}-ubuntu20.04",
        ["driver-validation"],
    ),
    "device-plugin": (
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
        "nvcr.io/nvidia/k8s-device-plugin:v{v}",
        ["toolkit-validation", "config-manager-init"],
    ),
    "gpu-feature-discovery": (
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "nvcr.io/nvidia/k8s-device-plugin:v{v}",
        ["toolkit-validation", "config-manager-init"],
    ),
    "dcgm-exporter": (
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
        "nvcr.io/nvidia/k8s/dcgm-exporter:{v}-ubuntu22.04",
        ["toolkit-validation"],
    ),
}
ORDER = ["driver", "container-toolkit", "device-plugin", "gpu-feature-discovery", "dcgm-exporter"]


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(*parts: str) -> str:
    h = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def node(
    name: str,
    *,
    gpus: int = 8,
    allocatable: int | None = None,
    driver: str = VERSIONS["driver"],
    gpu: bool = True,
    ready: bool = True,
    product: str = "NVIDIA-H100-80GB-HBM3",
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = _node_labels(name, gpu=gpu, gpus=gpus, driver=driver, product=product) | (extra_labels or {})
    return {
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "resourceVersion": "81234",
            "creationTimestamp": iso(T0 - timedelta(days=3)),
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{_uid(name)[:17].replace('-', '')}"},
        "status": _node_status(name, gpu=gpu, gpus=gpus, allocatable=allocatable, ready=ready),
    }


def _node_labels(name: str, *, gpu: bool, gpus: int, driver: str, product: str) -> dict[str, str]:
    """What NFD labels every node with, and GPU feature discovery a GPU node."""
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge" if gpu else "m7i.4xlarge",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-131-generic",
        "feature.node.kubernetes.io/pci-10de.present": "true" if gpu else "false",
    }
    if gpu:
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.deploy.driver": "true",
            "nvidia.com/gpu.deploy.container-toolkit": "true",
            "nvidia.com/gpu.deploy.device-plugin": "true",
            "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
            "nvidia.com/gpu.deploy.dcgm-exporter": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": "81559",
            "nvidia.com/gpu.family": "hopper",
            "nvidia.com/gpu.compute.major": "9",
            "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.machine": "p5.48xlarge",
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.driver-version.major": driver.split(".")[0],
            "nvidia.com/cuda.runtime-version.full": "12.8",
            "nvidia.com/cuda.runtime-version.major": "12",
            "nvidia.com/cuda.runtime-version.minor": "8",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        }
    return labels


def _node_status(name: str, *, gpu: bool, gpus: int, allocatable: int | None, ready: bool) -> dict[str, Any]:
    """Capacity and allocatable (the device plugin's nvidia.com/gpu), the kubelet's conditions, the node's info."""
    alloc = gpus if allocatable is None else allocatable
    resources = {"cpu": "192", "ephemeral-storage": "1937916400Ki", "memory": "2097152000Ki", "pods": "110"}
    ready_cond = {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
        "lastHeartbeatTime": iso(T0 + timedelta(days=10)),
        "lastTransitionTime": iso(T0),
    }
    return {
        "capacity": {**resources, **({"nvidia.com/gpu": str(gpus)} if gpu else {})},
        "allocatable": {**resources, **({"nvidia.com/gpu": str(alloc)} if gpu else {})},
        "conditions": [
            {
                "type": "MemoryPressure",
                "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "message": "kubelet has sufficient memory available",
                "lastTransitionTime": iso(T0),
            },
            {
                "type": "DiskPressure",
                "status": "False",
                "reason": "KubeletHasNoDiskPressure",
                "message": "kubelet has no disk pressure",
                "lastTransitionTime": iso(T0),
            },
            ready_cond,
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.12.34"}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "machineID": _uid("m", name).replace("-", ""),
            "systemUUID": _uid("s", name),
            "bootID": _uid("b", name),
            "kernelVersion": "5.15.0-131-generic",
            "osImage": "Ubuntu 22.04.5 LTS",
            "containerRuntimeVersion": "containerd://1.7.24",
            "kubeletVersion": "v1.31.4",
            "kubeProxyVersion": "v1.31.4",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def pod(component: str, node_name: str, version: str, started: datetime, ready_at: datetime) -> dict[str, Any]:
    app, container, image_t, inits = DAEMONSETS[component]
    image = image_t.format(v=version)
    suffix = hashlib.sha256(f"{app}/{node_name}".encode()).hexdigest()[:5]
    init_statuses = [
        {
            "name": i,
            "image": image,
            "ready": True,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": iso(started - timedelta(seconds=20)),
                    "finishedAt": iso(started),
                }
            },
        }
        for i in inits
    ]
    return {
        "metadata": {
            "name": f"{app}-{suffix}",
            "namespace": NS,
            "uid": _uid(app, node_name),
            "labels": {
                "app": app,
                "app.kubernetes.io/managed-by": "gpu-operator",
                "controller-revision-hash": "7c9d",
                "helm.sh/chart": "gpu-operator-v25.3.0",
                "pod-template-generation": "1",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": app,
                    "uid": _uid("ds", app),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "creationTimestamp": iso(started - timedelta(seconds=40)),
        },
        "spec": {
            "nodeName": node_name,
            "serviceAccountName": app,
            "priorityClassName": "system-node-critical",
            "initContainers": [{"name": i, "image": image} for i in inits],
            "containers": [{"name": container, "image": image, "imagePullPolicy": "IfNotPresent"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.12.34",
            "podIP": "10.0.12.34",
            "qosClass": "BestEffort",
            "startTime": iso(started - timedelta(seconds=40)),
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": iso(started)},
                {"type": "Initialized", "status": "True", "lastTransitionTime": iso(started)},
                {"type": "Ready", "status": "True", "lastTransitionTime": iso(ready_at)},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": iso(ready_at)},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(started - timedelta(seconds=40))},
            ],
            "initContainerStatuses": init_statuses,
            "containerStatuses": [
                {
                    "name": container,
                    "image": image,
                    "imageID": f"{image}@sha256:{'a' * 64}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": iso(started)}},
                }
            ],
        },
    }


def install(
    nodes: list[str],
    *,
    versions: dict[str, dict[str, str]] | None = None,
    early: dict[str, tuple[str, str]] | None = None,
    missing: dict[str, set[str]] | None = None,
) -> list[dict[str, Any]]:
    """The operator's pods on `nodes`, each component started after the one before it was Ready.

    `versions[node][component]` overrides a version; `early[node] = (component, before)` starts `component` 45 s
    before `before` became Ready; `missing[node]` leaves those components' pods out.
    """
    pods: list[dict[str, Any]] = [
        {
            "metadata": {
                "name": "gpu-operator-6d9c7b8f6-x2k4p",
                "namespace": NS,
                "labels": {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gpu-operator-6d9c7b8f6", "uid": _uid("rs")}
                ],
            },
            "spec": {
                "nodeName": "cpu-1",
                "containers": [{"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v25.3.0"}],
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": iso(T0)}],
            },
        }
    ]
    for k, name in enumerate(nodes):
        times: dict[str, tuple[datetime, datetime]] = {}
        t = T0 + timedelta(minutes=2, seconds=7 * k)
        for comp in ORDER:
            start = t + timedelta(seconds=5)
            times[comp] = (start, start + timedelta(seconds=25))
            t = times[comp][1] if comp in ("driver", "container-toolkit", "device-plugin") else t
        if early and name in early:
            comp, before = early[name]
            start = times[before][1] - timedelta(seconds=45)
            times[comp] = (start, start + timedelta(seconds=10))
        for comp in ORDER:
            if missing and comp in missing.get(name, set()):
                continue
            v = (versions or {}).get(name, {}).get(comp, VERSIONS[comp])
            pods.append(pod(comp, name, v, *times[comp]))
        pods.append(
            {  # the validator's one-shot pod: completed, never a component
                "metadata": {
                    "name": f"nvidia-cuda-validator-{k}x7q",
                    "namespace": NS,
                    "labels": {"app": "nvidia-cuda-validator"},
                },
                "spec": {
                    "nodeName": name,
                    "containers": [
                        {
                            "name": "nvidia-cuda-validator",
                            "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0",
                        }
                    ],
                },
                "status": {"phase": "Succeeded"},
            }
        )
    return pods


def gpu_pod(name: str, node: str, gpus: int = 8) -> dict[str, Any]:
    """Someone else's training pod holding `gpus` of the node's GPUs."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-team", "labels": {"app": "trainer"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "train", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Running"},
    }
