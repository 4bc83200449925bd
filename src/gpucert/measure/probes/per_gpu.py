"""The per-GPU steps of a node's run: start each GPU (matched to its NVML board by PCI bus id), then memory, GEMM
per dtype and PCIe on each GPU in turn, PCIe with every GPU at once, and each GPU's PCIe link read under load."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from gpucert.measure.evidence import Measurement
from gpucert.measure.probes import compute, memory, pcie
from gpucert.measure.probes import health as nvml_probe
from gpucert.measure.probes.affinity import cpu_list, pinned
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.node_run import NodeRun, why
from gpucert.measure.probes.stream import GPU_PROBES, METRICS, Done
from gpucert.measure.probes.timing import Budget
from gpucert.measure.probes.watchdog import ProbeTimeout, within
from gpucert.spec.cluster import Probe

__all__ = ["open_devices", "per_gpu"]

T = TypeVar("T")


def open_devices(node: NodeRun, count: int, opener: Callable[[int], Device]) -> dict[int, Device]:
    """Start each GPU; key it by its NVML index, matched by PCI bus id, never by its CUDA ordinal. A GPU that cannot
    start is that GPU's error on every per-GPU probe. A CUDA device that names no board (no bus id, or one NVML does
    not list) is charged to no board by number: the boards left without a device carry its failure."""
    devices: dict[int, Device] = {}
    orphans: list[str] = []  # what CUDA devices that name no NVML board said
    for ordinal in range(count):
        started = _start(node, ordinal, opener, orphans)
        if started is not None:
            devices[started[0]] = started[1]
    if node.nvml is not None:
        _charge_boards_left(node, devices, orphans)
    for index, reason in sorted(node.unusable.items()):
        for probe in (p for p in GPU_PROBES if p in node.probes):
            node.gpu_error(probe, index, f"GPU {index} {reason}")
    return devices


def _start(
    node: NodeRun, ordinal: int, opener: Callable[[int], Device], orphans: list[str]
) -> tuple[int, Device] | None:
    """CUDA device `ordinal` started and keyed by its NVML index; None when it failed or names no NVML board."""
    try:
        dev = within(node.limit_s, partial(opener, ordinal), f"starting GPU {ordinal}")
    except Exception as exc:  # charged to the board with this ordinal's bus id
        bus = getattr(opener, "bus_id_of", lambda o: None)(ordinal)
        twin = [i for i, g in node.gpus.items() if nvml_probe.same_bus(g.pci_bus_id, bus)]
        if twin or node.nvml is None or not hasattr(opener, "bus_id_of"):  # a CPU stand-in: by ordinal
            node.unusable[twin[0] if twin else ordinal] = f"could not be started: {why(exc)}"
        else:
            orphans.append(f"CUDA device {ordinal}{f' (PCI {bus})' if bus else ''} could not be started: {why(exc)}")
        return None
    if node.nvml is None or dev.pci_bus_id is None:
        return ordinal, dev
    match = [i for i, g in node.gpus.items() if nvml_probe.same_bus(g.pci_bus_id, dev.pci_bus_id)]
    if not match:
        orphans.append(f"CUDA device {ordinal} ({dev.pci_bus_id}) has no NVML device with that bus id")
        return None
    return match[0], dev


def _charge_boards_left(node: NodeRun, devices: dict[int, Device], orphans: list[str]) -> None:
    """Every NVML board no CUDA device started for carries what the devices that named no board said."""
    for i, g in sorted(node.gpus.items()):
        if i not in devices and i not in node.unusable:
            bus = f" (PCI {g.pci_bus_id})" if g.pci_bus_id else ""
            node.unusable[i] = f"has no CUDA device with its bus id{bus}" + (
                f": {'; '.join(orphans)}" if orphans else ""
            )


def per_gpu(node: NodeRun, devices: dict[int, Device]) -> dict[int, Any]:
    """Memory, GEMM per dtype and PCIe on each GPU in turn; returns each GPU's PCIe link read under load."""
    links = {}
    for i, dev in sorted(devices.items()):
        cpus = nvml_probe.numa_cpus(node.nvml, i) if node.nvml is not None else None
        _measure_one(node, i, dev, cpus)
        if node.nvml is not None and Probe.HEALTH in node.probes and i not in node.unusable:
            # in every plan with `health`, with or without the PCIe probe: the link is read while a transfer is in
            # flight, because an idle link trains down on purpose (Gen1 on most boards)
            read = partial(pinned, cpus, partial(_link_under_load, node, dev, i))
            links[i] = node.rec.attempt("health", partial(within, node.limit_s, read, f"PCIe link of GPU {i}"))
    if Probe.PCIE in node.probes and len(devices) > 1:
        _pcie_together(node, {i: d for i, d in devices.items() if i not in node.unusable})
    for probe in GPU_PROBES:
        if probe in node.probes:
            node.emit(f"done/{probe.value}", Done(probe=probe))
    return links


def _measure_one(node: NodeRun, i: int, dev: Device, cpus: set[int] | None) -> None:
    """The per-GPU probes of the plan on GPU `i`: memory, GEMM per dtype, PCIe from the GPU's NUMA node."""
    sizes = node.plan.sizes
    if Probe.MEMORY in node.probes:
        (metric,) = METRICS[Probe.MEMORY]
        budget = node.budget_for(Probe.MEMORY)
        node.measure(i, Probe.MEMORY, metric, partial(memory.copy_bandwidth, dev, budget, sizes.memory_bytes))
    if Probe.COMPUTE in node.probes:
        budget = node.budget_for(Probe.COMPUTE)
        for metric in METRICS[Probe.COMPUTE]:
            dtype = metric.rpartition(".")[2]
            node.measure(i, Probe.COMPUTE, metric, partial(compute.gemm_throughput, dev, dtype, budget, sizes.gemm_n))
    if Probe.PCIE in node.probes:
        budget = node.budget_for(Probe.PCIE)
        for metric in METRICS[Probe.PCIE]:
            direction = metric.rpartition(".")[2]
            node.measure(i, Probe.PCIE, metric, partial(_pcie_near, cpus, dev, direction, budget, sizes.pcie_bytes))


def _pcie_together(node: NodeRun, devices: dict[int, Device]) -> None:
    """PCIe with every GPU copying at once, each direction: evidence beside the judged one-at-a-time figures."""

    def place(i: int, fn: Callable[[], T]) -> T:
        return pinned(nvml_probe.numa_cpus(node.nvml, i) if node.nvml is not None else None, fn)

    budget, nbytes = node.budget_for(Probe.PCIE), node.plan.sizes.pcie_bytes
    for direction in ("h2d", "d2h"):
        metric = f"pcie.{direction}.concurrent"
        fn = partial(pcie.all_at_once, devices, direction, budget, nbytes, place)
        try:
            got = node.loaded(sorted(devices), metric, partial(within, node.limit_s, fn, f"{metric} on every GPU"))
        except Exception as exc:
            for i in devices:
                node.gpu_error(Probe.PCIE, i, f"GPU {i}: {metric}: {why(exc)}", metric)
            if isinstance(exc, ProbeTimeout):  # any of them may be wedged: every GPU is left out of what follows
                node.unusable.update({i: f"hung in {metric}" for i in devices if i not in node.unusable})
                return
            continue
        for i, m in got.items():
            node.record(i, metric, m)


def _pcie_near(cpus: set[int] | None, dev: Device, direction: str, budget: Budget, nbytes: int) -> Measurement:
    """The PCIe probe on the CPUs of the GPU's NUMA node, its pinned host buffer allocated (first touched) there."""
    m = pinned(cpus, partial(pcie.host_copy_bandwidth, dev, direction, budget, nbytes))
    where = cpu_list(cpus) if cpus else "not pinned: no CPU of the GPU's NUMA node (NVML affinity) is known to this pod"
    return m.model_copy(update={"params": {**m.params, "cpus": where}})


def _link_under_load(node: NodeRun, dev: Device, index: int) -> Any:
    host, buf = dev.host_pinned(node.plan.sizes.pcie_bytes), dev.empty(node.plan.sizes.pcie_bytes)
    dev.h2d(buf, host)
    try:
        return nvml_probe.pcie_under_load(node.nvml, index)
    finally:
        dev.synchronize()
