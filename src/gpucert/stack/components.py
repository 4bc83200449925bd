"""Where each stack component's version is read from on a GPU Operator install.

A component runs as a DaemonSet pod on every GPU node; its version is the tag of one container's image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_SOURCES",
    "GPU_OPERATOR_NAMESPACE",
    "OPERATOR_DEPENDENCIES",
    "ComponentSource",
    "version_from_image",
]

GPU_OPERATOR_NAMESPACE = "gpu-operator"


@dataclass(frozen=True, slots=True)
class ComponentSource:
    """Where a component's version is read.

    From pods in `namespace` (those labelled `app=<app>`, or owned by DaemonSet `daemonset`): the tag of
    `container`'s image, with the pod's start and Ready times. Or, with `label`, from a node label alone.
    """

    app: str | None = None
    container: str | None = None
    namespace: str = GPU_OPERATOR_NAMESPACE
    daemonset: str | None = None
    label: str | None = None

    def matches(self, pod_namespace: str, labels: dict[str, str], owners: list[tuple[str, str]]) -> bool:
        if self.label is not None or pod_namespace != self.namespace:
            return False
        if self.daemonset is not None:
            return ("DaemonSet", self.daemonset) in owners
        return self.app is not None and labels.get("app") == self.app


# names and containers as the GPU Operator (v24/v25) deploys them
DEFAULT_SOURCES: dict[str, ComponentSource] = {
    "driver": ComponentSource("nvidia-driver-daemonset", "nvidia-driver-ctr"),
    "container-toolkit": ComponentSource("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr"),
    "device-plugin": ComponentSource("nvidia-device-plugin-daemonset", "nvidia-device-plugin"),
    "gpu-feature-discovery": ComponentSource("gpu-feature-discovery", "gpu-feature-discovery"),
    "dcgm": ComponentSource("nvidia-dcgm", "nvidia-dcgm-ctr"),
    "dcgm-exporter": ComponentSource("nvidia-dcgm-exporter", "nvidia-dcgm-exporter"),
    "mig-manager": ComponentSource("nvidia-mig-manager", "nvidia-mig-manager"),
    "operator-validator": ComponentSource("nvidia-operator-validator", "nvidia-operator-validator"),
    # GPUDirect RDMA's legacy path: with driver.rdma.enabled the operator adds this container to the driver's own
    # DaemonSet (NVIDIA/gpu-operator, controllers/object_controls.go, transformPeerMemoryContainer); its image is
    # the driver's, so its version is the driver's. DOCA-OFED runs under the Network Operator, in its own namespace
    # and a DaemonSet named per OS: pin it with a `source` (app: mofed-<os><version>, container: mofed-container).
    "nvidia-peermem": ComponentSource("nvidia-driver-daemonset", "nvidia-peermem-ctr"),
}

# what each component waits for on a GPU Operator install: the operator's validator init containers hold the
# toolkit until the driver validates (driver-validation) and the others until the toolkit does (toolkit-validation)
OPERATOR_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "container-toolkit": ("driver",),
    "device-plugin": ("container-toolkit",),
    "gpu-feature-discovery": ("container-toolkit",),
    "dcgm": ("container-toolkit",),
    "dcgm-exporter": ("container-toolkit",),
    "mig-manager": ("container-toolkit",),
    "nvidia-peermem": ("driver",),
}

# `570.124.06-ubuntu22.04` -> 570.124.06, `v0.17.0` -> 0.17.0, `4.1.1-4.0.4-ubuntu22.04` -> 4.1.1-4.0.4
_TAG_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*(?:-\d+(?:\.\d+)+)?)")


def version_from_image(image: str) -> str | None:
    """The release in an image reference's tag, or None when the tag carries none (a digest, `latest`)."""
    ref = image.split("@", 1)[0]
    name_end = ref.rfind("/")
    colon = ref.rfind(":")
    if colon <= name_end:
        return None
    m = _TAG_VERSION.match(ref[colon + 1 :])
    return m.group(1) if m else None
