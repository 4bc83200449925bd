"""The probe runner: one node's plan in, one evidence document out.

`python -m gpucert.measure.probes --plan plan.json` runs it in a probe pod; the `local` target runs the same function
in-process. The order on a GPU node:
1. the preflight (`preflight`): NVML, CuPy, a kernel, cuBLAS, NCCL, dcgmi, a writable home and cache; a failure
   is the node's one error, naming its cause and fix, and no probe runs;
2. NVML: the system, and each GPU's identity and health at idle (so a GPU that cannot start is still named and
   its health explains why);
3. DCGM's diagnostic, before this process creates any CUDA context or holds any GPU memory;
4. each GPU is started (a GPU whose context cannot be created is that GPU's error) and matched
   to its NVML device by PCI bus id;
5. per GPU: HBM copy, GEMM per dtype, PCIe pinned to the GPU's NUMA node; then P2P and the all-reduce;
6. NVML again: health after the load, XIDs seen meanwhile, throttling while each probe ran.
Every probe runs under a watchdog and each result is emitted (framed) as soon as it exists; a probe that fails
is recorded in `errors` (per GPU where it is one GPU's) and the others still run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucert._version import __version__
from gpucert.measure.evidence import DcgmEvidence, GpuEvidence, NodeEvidence, NodeFabric, ProbeError, SystemFacts
from gpucert.measure.probes import health as nvml_probe
from gpucert.measure.probes.between_gpus import between_gpus
from gpucert.measure.probes.boards import start_in_board_order
from gpucert.measure.probes.deadline import dcgm_seconds
from gpucert.measure.probes.device import CupyDevice, Device, NumpyDevice, missing_gpu_extra, prepare_cuda_environment
from gpucert.measure.probes.fabric_devinfo import read_devinfo
from gpucert.measure.probes.fabric_gdr import gpu_dmabuf, nic_dmabuf_facts
from gpucert.measure.probes.fabric_sysfs import read_node_fabric
from gpucert.measure.probes.node_run import NodeRun
from gpucert.measure.probes.per_gpu import open_devices, per_gpu
from gpucert.measure.probes.preflight import run_preflight, summary
from gpucert.measure.probes.probe_plan import PLAN_SCHEMA, BudgetSpec, DcgmPlan, ProbePlan, Sizes
from gpucert.measure.probes.stream import Emit, NodeHeader
from gpucert.spec.cluster import Probe

__all__ = ["PLAN_SCHEMA", "BudgetSpec", "DcgmPlan", "ProbePlan", "Sizes", "devices_for", "run_plan"]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def devices_for(
    plan: ProbePlan, *, nvml: Any = None, open_device: Callable[[int], Device] | None = None
) -> list[Device]:
    """Every device of the plan, started, in NVML's order (the multi-node all-reduce: there a GPU that cannot start
    stops it, and the error names its board by NVML index, bus id and serial: `boards.start_in_board_order`)."""
    if plan.device == "numpy" and open_device is None:
        return [NumpyDevice(i) for i in range(plan.gpus or 1)]
    if open_device is None:
        prepare_cuda_environment()
        try:
            import cupy  # the GPU extra, or the one-line error that says to install it
        except ImportError as exc:
            raise missing_gpu_extra("CuPy", exc) from None
        if nvml is None:
            with contextlib.suppress(Exception):  # without NVML a device is named by its bus id alone
                nvml = nvml_probe.open_nvml()
    if plan.gpus is not None:
        count = plan.gpus
    else:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    return start_in_board_order(count, open_device or CupyDevice, nvml)


def _cpu_identity(node: str, index: int) -> GpuEvidence:
    """The CPU standing in for GPU `index` (the NumPy device without NVML): never a GPU's identity."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return GpuEvidence(index=index, uuid=f"CPU-{uuid.UUID(digest[:32])}", product="CPU (numpy device)")


def run_plan(
    plan: ProbePlan,
    nvml: Any = None,
    *,
    emit: Emit | None = None,
    open_device: Callable[[int], Device] | None = None,
    env: Mapping[str, str] | None = None,
    isolate_preflight: bool = True,
) -> NodeEvidence:
    """Run every probe of the plan on this node's devices and return the node's evidence.

    `nvml` is pynvml (opened here when None on a GPU; given with the NumPy device, the tests' fake NVML);
    `emit(key, part)` receives each part as it is measured (see `stream`); `open_device(ordinal)` starts one
    device (CupyDevice or NumpyDevice by default); `env` is the environment the preflight checks (this process's
    by default), `isolate_preflight` False runs its GPU steps here (the tests' fake CuPy). The preflight runs
    first: when it fails, that is the node's one error and no probe runs.
    """
    started = _now()
    emit = emit or (lambda key, part: None)
    on_gpu = plan.device == "cupy"
    if on_gpu:
        for note in prepare_cuda_environment():
            print(f"gpucert.measure.probes: {note}", file=sys.stderr)
    pre = run_preflight(set(plan.probes), on_gpu, nvml=nvml, env=env, isolate=isolate_preflight, fabric=plan.fabric)
    nvml = pre.nvml
    node = NodeRun(plan, nvml, emit)
    count = plan.gpus if plan.gpus is not None else int(nvml.nvmlDeviceGetCount()) if nvml is not None else 1
    if on_gpu and nvml is None:
        count = plan.gpus or 0
    header = NodeHeader(
        run_id=plan.run_id,
        node=plan.node,
        target=plan.target,
        probe_version=__version__,
        started=started,
        probes=plan.probes,
        gpus=count,
    )
    emit("node", header)
    system = _identify(node, count)
    nvlink_before = nvml_probe.nvlink_counters_of(nvml, node.gpus) if Probe.HEALTH in node.probes else {}

    def finish(**parts: Any) -> NodeEvidence:
        gpus = [g.model_copy(update={"measurements": node.measured.get(i, {})}) for i, g in sorted(node.gpus.items())]
        return NodeEvidence(
            node=plan.node,
            target=plan.target,
            probe_version=__version__,
            started=started,
            finished=_now(),
            system=system,
            gpus=gpus,
            errors=node.rec.errors,
            preflight=pre.steps,
            **parts,
        )

    if pre.failed:  # the node's one finding (probe.preflight): no probe runs, so none fails on its own
        node.rec.error(ProbeError(probe="preflight", message=summary(pre.failed)))
        return finish(collected=False)
    opener: Callable[[int], Device] = open_device or (CupyDevice if on_gpu else NumpyDevice)
    # first: no CUDA context of ours yet, no GPU memory held in CuPy's pools
    dcgm_ev = _dcgm(node, system) if Probe.DCGM in node.probes else None
    watcher = nvml_probe.watch_xids(nvml, count) if nvml is not None else None
    with watcher if watcher is not None else contextlib.nullcontext():
        devices = open_devices(node, count, opener)
        links = per_gpu(node, devices)
        p2p_ev, nccl_ev = between_gpus(node, devices, count, on_gpu)
    if nvml is not None and Probe.HEALTH in node.probes:
        _health_after(node, count, watcher.events if watcher is not None else {}, nvlink_before, links)
    return finish(p2p=p2p_ev, nccl=nccl_ev, dcgm=dcgm_ev, fabric=_fabric(node) if plan.fabric else None)


def _fabric(node: NodeRun) -> NodeFabric | None:
    """The node's RDMA ports (their MTUs from one `ibv_devinfo`), where its GPUs and HCAs sit on PCIe and the
    peer-memory module, read from sysfs ($GPUCERT_SYSFS, /sys by default): a fabric plan's node-side reading
    (the counters' window is the fabric stage's, around its traffic)."""
    root = Path(os.environ.get("GPUCERT_SYSFS", "/sys"))
    buses = {i: g.pci_bus_id for i, g in node.gpus.items() if g.pci_bus_id}
    fabric = node.rec.attempt("fabric", lambda: read_node_fabric(root, buses, mtus=read_devinfo()))
    if fabric is not None and fabric.gdr is not None:
        fabric = fabric.model_copy(update={"gdr": fabric.gdr.model_copy(update=_dmabuf(node))})
    if fabric is not None:
        node.emit("fabric", fabric)
    return fabric


def _dmabuf(node: NodeRun) -> dict[str, object]:
    """DMA-BUF asked of the GPUs and the NICs, with why any of them was not asked (never a guessed "no")."""
    on_gpu = node.plan.device == "cupy"
    gpus = gpu_dmabuf(sorted(node.gpus)) if on_gpu else {}
    nics, nic_why = nic_dmabuf_facts()
    unasked = {"nics": nic_why} if nic_why else {}
    if len(gpus) < len(node.gpus):
        unasked["gpus"] = (
            "CuPy could not be imported, or the driver does not know CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (CUDA 11.7+)"
            if on_gpu
            else "the probe ran on the NumPy device (no CUDA to ask)"
        )
    return {"dmabuf_gpu": gpus, "dmabuf_nic": nics, "kernel": platform.release(), "unasked": unasked}


def _identify(node: NodeRun, count: int) -> SystemFacts:
    """The system, and each GPU's identity and health at idle (a CPU's stand-in identity without NVML), emitted."""
    nvml, plan = node.nvml, node.plan
    system = SystemFacts(kernel=platform.release(), os=platform.platform())
    if nvml is not None:
        system = node.rec.attempt("health", lambda: nvml_probe.read_system(nvml)) or system
    node.emit("system", system)
    for i in range(count):
        node.gpus[i] = nvml_probe.read_gpu(nvml, i) if nvml is not None else _cpu_identity(plan.node, i)
        node.emit(f"gpu/{i}", node.gpus[i])
    return system


def _dcgm(node: NodeRun, system: SystemFacts) -> DcgmEvidence | None:
    """DCGM's diagnostic of every board, its entries tied to boards by serial."""
    from gpucert.measure.probes.dcgm import run_diag

    plan = node.plan
    serials = {g.index: g.serial for g in node.gpus.values()}
    dcgm_s = plan.dcgm.timeout_s or dcgm_seconds(plan.dcgm.level)
    dcgm_ev = node.rec.attempt(
        "dcgm",
        lambda: run_diag(
            plan.dcgm.level,
            serials=serials,
            host=plan.dcgm.host,
            timeout_s=dcgm_s,
            cuda_driver_version=system.cuda_driver_version,
        ),
    )
    if dcgm_ev is not None:
        node.emit("dcgm", dcgm_ev)
    return dcgm_ev


def _health_after(
    node: NodeRun,
    count: int,
    xid_events: Mapping[int, list[Any]],
    nvlink_before: Mapping[int, Any],
    links: Mapping[int, Any],
) -> None:
    """After the load: ECC, remapped rows, XIDs and throttling are what the load left; NVLink errors meanwhile."""
    nvml = node.nvml
    nvlink_after = nvml_probe.nvlink_counters_of(nvml, node.gpus)
    for i in range(count):
        g = nvml_probe.read_gpu(nvml, i, xid_events.get(i, []))
        if g.health is not None:
            update: dict[str, Any] = {"throttle_under_load": node.windows.get(i, [])}
            after = nvlink_after.get(i)
            if i in nvlink_before and after is not None:
                t0, c0 = nvlink_before[i]
                update["nvlink_errors"] = nvml_probe.nvlink_errors_between(c0, after[1], after[0] - t0)
            if links.get(i) is not None:
                update["pcie"] = links[i]
            g = g.model_copy(update={"health": g.health.model_copy(update=update)})
        node.gpus[i] = g
        node.emit(f"gpu/{i}", g)
