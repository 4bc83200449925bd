"""Whether a node's GPUs are whole, from the labels GPU Feature Discovery puts on it, and what gpucert makes of a node
whose GPUs are not: a MIG node or a time-sliced one cannot be certified as whole GPUs (a probe pod would wait
Pending for `nvidia.com/gpu` the node no longer advertises, or measure replicas that share one GPU).

The labels, from GFD's resource labeler (k8s-device-plugin, internal/lm/resource.go): with MIG's `single` strategy
`nvidia.com/gpu.product` is `<model>-MIG-<profile>` and `nvidia.com/gpu.slices.gi` is set; with `mixed`, each
profile has its own resource and `nvidia.com/mig-<profile>.count`; a replicated (time-sliced or MPS) GPU has
`nvidia.com/gpu.replicas` above 1 and a `-SHARED` product. The MIG manager says how a reconfiguration went in
`nvidia.com/mig.config.state` (pending, rebooting, success, failed). Since k8s-device-plugin v0.15 GFD also says
which sharing replicates the GPUs, `nvidia.com/gpu.sharing-strategy` (none, time-slicing, mps: api/config/v1
sharing.go). Pure: labels in, words out.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucert.spec.cluster import GpuSharing

__all__ = ["refusal", "sharing"]

MIG_STRATEGY = "nvidia.com/mig.strategy"
MIG_STATE = "nvidia.com/mig.config.state"
REPLICAS = "nvidia.com/gpu.replicas"
PRODUCT = "nvidia.com/gpu.product"
STRATEGY = "nvidia.com/gpu.sharing-strategy"


def _replicas(labels: Mapping[str, str]) -> int:
    try:
        return int(labels.get(REPLICAS, "1"))
    except ValueError:
        return 1


def sharing(labels: Mapping[str, str]) -> tuple[GpuSharing, str]:
    """How the node's GPUs are shared, and the labels that say so."""
    strategy = labels.get(MIG_STRATEGY, "none")
    mixed = sorted(k for k in labels if k.startswith("nvidia.com/mig-") and k.endswith(".count"))
    state = labels.get(MIG_STATE)
    if "-MIG-" in labels.get(PRODUCT, "") or "nvidia.com/gpu.slices.gi" in labels or mixed:
        said = f"{PRODUCT}={labels.get(PRODUCT)}" if not mixed else f"{mixed[0]}={labels[mixed[0]]}"
        return GpuSharing.MIG, f"MIG mode ({MIG_STRATEGY}={strategy}, {said})"
    if state in ("pending", "rebooting", "failed") and strategy != "none":
        return GpuSharing.MIG, f"a MIG reconfiguration that is {state} ({MIG_STATE}={state})"
    if _replicas(labels) > 1 and labels.get(STRATEGY) == "mps":
        return GpuSharing.MPS, f"GPUs shared through MPS ({STRATEGY}=mps, {REPLICAS}={labels[REPLICAS]}: each GPU is "
    if _replicas(labels) > 1:
        return GpuSharing.TIME_SLICING, f"time-sliced GPUs ({REPLICAS}={labels[REPLICAS]}: each GPU is advertised "
    return GpuSharing.NONE, ""


def refusal(node: str, labels: Mapping[str, str], expected: GpuSharing = GpuSharing.NONE) -> str:
    """Why `node` cannot be certified as whole GPUs ("" when it can)."""
    found, said = sharing(labels)
    if found is GpuSharing.NONE:
        return ""
    if found is GpuSharing.MPS:
        said += f"split into {labels[REPLICAS]}, so a pod's nvidia.com/gpu is a share of one GPU's memory and SMs)"
    if found is GpuSharing.TIME_SLICING:
        said += f"{labels[REPLICAS]} times, so a pod's nvidia.com/gpu may share a GPU with others)"
    fix = (
        f"wait until the MIG manager has applied {labels.get('nvidia.com/mig.config', 'its config')} "
        f"({MIG_STATE}=success; failed: see its logs), with all-disabled for the certification"
        if said.startswith("a MIG reconfiguration")
        else "set nvidia.com/mig.config=all-disabled on the node (the MIG manager applies it) for the certification"
        if found is GpuSharing.MIG
        else "give the node a device-plugin config without time-slicing (node label nvidia.com/device-plugin.config)"
        if found is GpuSharing.TIME_SLICING
        else "give the node a device-plugin config without MPS sharing (node label nvidia.com/device-plugin.config)"
    )
    pool = "as its pool expects" if expected is found else "which its pool does not expect (expect.gpuSharing)"
    return f"{node} has {said}, {pool}: gpucert certifies whole GPUs only; {fix}"
