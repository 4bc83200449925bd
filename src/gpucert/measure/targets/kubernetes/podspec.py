"""What gpucert's pods are made of, and the least each kind needs from the cluster: kubernetes_jobs.py and
kubernetes_fabric.py build their pods here, and `gpucert preflight` reads the same requirements.

Pod Security (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
- probe pods meet `restricted`: non-root (the image's numeric USER), no privilege escalation, every capability
  dropped, seccomp RuntimeDefault, configMap and emptyDir volumes only. CUDA, NVML, CuPy and `dcgmi diag` levels 1
  to 4 need none of what `restricted` forbids: the container toolkit injects the GPU device nodes. What DCGM runs
  only as root are the EUD tests (`eud`, `cpu_eud`; "Both tests require root execution", DCGM's EUD plugin page,
  docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/eud.html), which gpucert neither runs nor
  installs (deploy/Dockerfile has no EUD package).
- all-reduce pods across nodes meet `restricted` as well unless the spec asks for RDMA (`fabricResources`: pinning
  the buffers the adapters read needs IPC_LOCK, which Linux grants an added capability only to root) or the host's
  network (`fabricHostNetwork`): either makes them `privileged` (IPC_LOCK is not in `baseline`'s default set,
  hostNetwork is a host namespace).

Requests equal limits (Guaranteed QoS: evicted last, never OOM-killed by a LimitRange's default), sized from the
plan: the spec's `target.resources` overrides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpucert.measure.probes.pcie import DEFAULT_BYTES as PCIE_BYTES
from gpucert.spec.cluster import ClusterSpec, KubernetesTargetSpec

__all__ = [
    "CORDON_TOLERATION",
    "PLAN_PATH",
    "SCRATCH",
    "fabric_level",
    "fabric_security",
    "pod_spec",
    "probe_resources",
    "spec_tolerations",
]

PLAN_PATH = "/etc/gpucert/plan.json"
SCRATCH = "/var/cache/gpucert"  # a writable emptyDir: CuPy's kernel cache (the image's user has no other)
# a cordoned node is still measured: gpucert chose it (recertification cordons the node it measures)
CORDON_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
GIB = 1 << 30
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def probe_resources(options: KubernetesTargetSpec, gpus: int, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Requests = limits: a CPU per GPU (NCCL's and the copy probes' host threads) and one for the harness; per
    GPU its CUDA context and the PCIe probe's two pinned host buffers, and 4 GiB for Python, CuPy and NCCL."""
    cpu = str(gpus + 1)
    memory = f"{(4 * GIB + gpus * (GIB + 2 * PCIE_BYTES)) // GIB}Gi"
    if options.resources is not None:
        cpu = options.resources.cpu or cpu
        memory = options.resources.memory or memory
    amounts = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus), **(extra or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def spec_tolerations(spec: ClusterSpec) -> list[dict[str, str]]:
    """The target's tolerations, then one for each taint a pool declares (once each)."""
    assert isinstance(spec.target, KubernetesTargetSpec)
    out = list(spec.target.tolerations)
    for pool in spec.pools:
        for taint in pool.taints:
            if taint.toleration() not in out:
                out.append(taint.toleration())
    return out


def fabric_level(options: KubernetesTargetSpec, rdma: bool | None = None) -> tuple[str, str]:
    """The Pod Security level the all-reduce pods need, and why (`rdma`: they request an RDMA resource; by default
    when target.fabricResources names one)."""
    why = []
    if options.fabric_resources if rdma is None else rdma:
        named = "target.fabricResources" if rdma is None else "the pool's fabric.rails.resource"
        why.append(f"IPC_LOCK for RDMA ({named})")
    if options.fabric_host_network:
        why.append("hostNetwork (target.fabricHostNetwork)")
    return ("privileged", " and ".join(why)) if why else ("restricted", "")


def fabric_security(options: KubernetesTargetSpec, rdma: bool | None = None) -> dict[str, Any]:
    """The all-reduce container's securityContext: the probe's, or root with IPC_LOCK alone for RDMA (`rdma`: it
    requests an RDMA resource; by default when target.fabricResources names one)."""
    if not (options.fabric_resources if rdma is None else rdma):
        return dict(RESTRICTED_CONTAINER)
    return {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_spec(
    options: KubernetesTargetSpec,
    tolerations: Sequence[dict[str, str]],
    plan_configmap: str,
    gpus: int,
    extra_args: Sequence[str] = (),
    *,
    env: Sequence[dict[str, Any]] = (),
    limits: dict[str, str] | None = None,
    ports: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The probe pod's spec: `python -m gpucert.measure.probes` on `gpus` GPUs of its node, the plan from the ConfigMap.

    A writable emptyDir holds CuPy's kernel cache (the image runs as a user without a home) and DCGM's working
    directory (its software test fails where it cannot create a file), and /dev/shm is memory-backed: a
    container's default 64 MiB is too small for NCCL's shared-memory segments.
    """
    container: dict[str, Any] = {
        "name": "probe",
        "image": options.image,
        "command": [
            *("python", "-m", "gpucert.measure.probes", "--plan", PLAN_PATH, "--node", "$(NODE_NAME)", "--framed"),
            *extra_args,
        ],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "CUPY_CACHE_DIR", "value": f"{SCRATCH}/cupy"},
            {"name": "DCGM_HOME_DIR", "value": f"{SCRATCH}/dcgm"},  # dcgmi diag's working directory and logs
            {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"},
            *env,
        ],
        "resources": probe_resources(options, gpus, limits),
        "securityContext": dict(RESTRICTED_CONTAINER),
        "volumeMounts": [
            {"name": "plan", "mountPath": "/etc/gpucert", "readOnly": True},
            {"name": "scratch", "mountPath": SCRATCH},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    if ports:
        container["ports"] = list(ports)
    tolerations = list(tolerations)
    if CORDON_TOLERATION not in tolerations:
        tolerations.append(CORDON_TOLERATION)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": dict(RESTRICTED_POD),
        "tolerations": tolerations,
        "containers": [container],
        "volumes": [
            {"name": "plan", "configMap": {"name": plan_configmap}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    if options.runtime_class_name:
        pod["runtimeClassName"] = options.runtime_class_name
    if options.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in options.image_pull_secrets]
    return pod
