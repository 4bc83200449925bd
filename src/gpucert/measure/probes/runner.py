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
import platform
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from gpucert._version import __version__
from gpucert.errors import GpucertError
from gpucert.measure.evidence import (
    DcgmEvidence,
    GpuEvidence,
    Measurement,
    NodeEvidence,
    ProbeError,
    SystemFacts,
    ThrottleWindow,
)
from gpucert.measure.probes import compute, memory, nccl, p2p, pcie
from gpucert.measure.probes import health as nvml_probe
from gpucert.measure.probes.affinity import cpu_list as _cpu_list
from gpucert.measure.probes.affinity import pinned as _pinned
from gpucert.measure.probes.boards import start_in_board_order
from gpucert.measure.probes.deadline import dcgm_seconds
from gpucert.measure.probes.device import CupyDevice, Device, NumpyDevice, missing_gpu_extra, prepare_cuda_environment
from gpucert.measure.probes.preflight import run_preflight, summary
from gpucert.measure.probes.stream import GPU_PROBES, METRICS, Done, Emit, NodeHeader
from gpucert.measure.probes.timing import Budget
from gpucert.measure.probes.watchdog import ProbeTimeout, within
from gpucert.spec.cluster import Probe

__all__ = ["PLAN_SCHEMA", "ProbePlan", "devices_for", "run_plan"]

PLAN_SCHEMA = "gpucert.io/probe-plan/v1"
T = TypeVar("T")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetSpec(_M):
    warmup_s: float = 0.2
    measure_s: float = 1.0
    min_reps: int = 5
    max_reps: int = 100
    # what a probe may take past its time budget before its thread is abandoned (a hung GPU or NCCL call)
    watchdog_s: float = 120.0


class Sizes(_M):
    memory_bytes: int = memory.DEFAULT_BYTES
    gemm_n: int = compute.DEFAULT_N
    pcie_bytes: int = pcie.DEFAULT_BYTES
    p2p_bytes: int = p2p.DEFAULT_BYTES
    nccl_sizes: list[int] = Field(default_factory=lambda: list(nccl.DEFAULT_SIZES))


class DcgmPlan(_M):
    level: int = 2
    host: str | None = None
    timeout_s: float | None = None  # None: the level's time (deadline.dcgm_seconds), inside the Job's deadline


class ProbePlan(_M):
    schema_: Literal["gpucert.io/probe-plan/v1"] = Field("gpucert.io/probe-plan/v1", alias="schema")
    run_id: str
    node: str
    target: str = "local"
    probes: list[Probe] = Field(default_factory=lambda: list(Probe))
    device: Literal["cupy", "numpy"] = "cupy"
    gpus: int | None = None  # how many devices: all visible GPUs when None (numpy: 1)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    # per probe, at least this many repetitions (the spec's certify.samples): more than budget.min_reps
    samples: dict[Probe, int] = Field(default_factory=dict)
    sizes: Sizes = Field(default_factory=Sizes)
    dcgm: DcgmPlan = Field(default_factory=DcgmPlan)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


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


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, (ProbeTimeout, GpucertError)) else f"{type(exc).__name__}: {exc}"


class _Recorder:
    def __init__(self, emit: Emit) -> None:
        self.errors: list[ProbeError] = []
        self.emit = emit

    def error(self, err: ProbeError) -> None:
        self.errors.append(err)
        self.emit(f"error/{len(self.errors)}", err)

    def attempt(self, probe: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except FileNotFoundError as exc:
            self.error(ProbeError(probe=probe, message=str(exc), unavailable=True))
        except Exception as exc:
            self.error(ProbeError(probe=probe, message=_why(exc)))
        return None


class _Node:
    """One run of a plan: what was learned so far, and how each probe is run and recorded."""

    def __init__(self, plan: ProbePlan, nvml: Any, emit: Emit) -> None:
        self.plan, self.nvml, self.emit = plan, nvml, emit
        b = plan.budget
        self.budget = Budget(b.warmup_s, b.measure_s, b.min_reps, b.max_reps)
        self.budgets = {
            probe: Budget(b.warmup_s, b.measure_s, max(b.min_reps, n), max(b.max_reps, n))
            for probe, n in plan.samples.items()
        }
        self.limit_s = b.watchdog_s + b.warmup_s + b.measure_s  # one timed region, and the work around it
        self.rec = _Recorder(emit)
        self.probes = set(plan.probes)
        self.gpus: dict[int, GpuEvidence] = {}
        self.measured: dict[int, dict[str, Measurement]] = {}
        self.windows: dict[int, list[ThrottleWindow]] = {}
        self.unusable: dict[int, str] = {}  # GPU -> why no more probes run on it

    def budget_for(self, probe: Probe) -> Budget:
        """The timing budget of one probe: the plan's, with at least the repetitions the spec asks of it."""
        return self.budgets.get(probe, self.budget)

    def loaded(self, indices: list[int], label: str, fn: Callable[[], T]) -> T:
        """`fn()` with NVML's throttle counters of `indices` read before and after: the throttling under load."""
        before = {i: nvml_probe.throttle_counters(self.nvml, i) for i in indices} if self.nvml else {}
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            seconds = time.perf_counter() - t0
            for i, start in before.items():
                end = nvml_probe.throttle_counters(self.nvml, i)
                if start is not None and end is not None:
                    delta = {k: max(0, end[k] - start[k]) for k in end if k in start}
                    self.windows.setdefault(i, []).append(
                        ThrottleWindow(probe=label, seconds=seconds, reasons_ns=delta)
                    )

    def gpu_error(self, probe: Probe, index: int, message: str, metric: str | None = None) -> None:
        self.rec.error(ProbeError(probe=probe.value, gpu=index, metric=metric, message=message))

    def measure(self, index: int, probe: Probe, metric: str, fn: Callable[[], Measurement]) -> None:
        """One measurement of one GPU, under the watchdog; a hang leaves the GPU out of what follows."""
        if index in self.unusable:
            self.gpu_error(probe, index, f"GPU {index} {self.unusable[index]}: {metric} was not run", metric)
            return
        try:
            m = self.loaded([index], metric, lambda: within(self.limit_s, fn, f"{metric} on GPU {index}"))
        except ProbeTimeout as exc:
            self.unusable[index] = f"hung in {metric}"
            self.gpu_error(probe, index, str(exc), metric)
            return
        except Exception as exc:
            self.gpu_error(probe, index, f"GPU {index}: {metric}: {_why(exc)}", metric)
            return
        self.measured.setdefault(index, {})[metric] = m
        self.emit(f"gpu/{index}/{metric}", m)


def _open_devices(node: _Node, count: int, opener: Callable[[int], Device]) -> dict[int, Device]:  # noqa: C901
    """Start each GPU; key it by its NVML index, matched by PCI bus id, never by its CUDA ordinal. A GPU that cannot
    start is that GPU's error on every per-GPU probe. A CUDA device that names no board (no bus id, or one NVML does
    not list) is charged to no board by number: the boards left without a device carry its failure."""
    devices: dict[int, Device] = {}
    orphans: list[str] = []  # what CUDA devices that name no NVML board said
    for ordinal in range(count):
        try:
            dev = within(node.limit_s, partial(opener, ordinal), f"starting GPU {ordinal}")
        except Exception as exc:  # charged to the board with this ordinal's bus id
            bus = getattr(opener, "bus_id_of", lambda o: None)(ordinal)
            twin = [i for i, g in node.gpus.items() if nvml_probe.same_bus(g.pci_bus_id, bus)]
            if twin or node.nvml is None or not hasattr(opener, "bus_id_of"):  # a CPU stand-in: by ordinal
                node.unusable[twin[0] if twin else ordinal] = f"could not be started: {_why(exc)}"
            else:
                orphans.append(
                    f"CUDA device {ordinal}{f' (PCI {bus})' if bus else ''} could not be started: {_why(exc)}"
                )
            continue
        index = ordinal
        if node.nvml is not None and dev.pci_bus_id is not None:
            match = [i for i, g in node.gpus.items() if nvml_probe.same_bus(g.pci_bus_id, dev.pci_bus_id)]
            if not match:
                orphans.append(f"CUDA device {ordinal} ({dev.pci_bus_id}) has no NVML device with that bus id")
                continue
            index = match[0]
        devices[index] = dev
    if node.nvml is not None:
        for i, g in sorted(node.gpus.items()):
            if i not in devices and i not in node.unusable:
                bus = f" (PCI {g.pci_bus_id})" if g.pci_bus_id else ""
                node.unusable[i] = f"has no CUDA device with its bus id{bus}" + (
                    f": {'; '.join(orphans)}" if orphans else ""
                )
    for index, why in sorted(node.unusable.items()):
        for probe in (p for p in GPU_PROBES if p in node.probes):
            node.gpu_error(probe, index, f"GPU {index} {why}")
    return devices


def _per_gpu(node: _Node, devices: dict[int, Device]) -> dict[int, Any]:  # noqa: C901
    """Memory, GEMM per dtype and PCIe on each GPU in turn; returns each GPU's PCIe link read under load."""
    plan, links = node.plan, {}
    for i, dev in sorted(devices.items()):
        if Probe.MEMORY in node.probes:
            (metric,) = METRICS[Probe.MEMORY]
            budget = node.budget_for(Probe.MEMORY)
            node.measure(i, Probe.MEMORY, metric, partial(memory.copy_bandwidth, dev, budget, plan.sizes.memory_bytes))
        if Probe.COMPUTE in node.probes:
            budget = node.budget_for(Probe.COMPUTE)
            for metric in METRICS[Probe.COMPUTE]:
                dtype = metric.rpartition(".")[2]
                node.measure(
                    i, Probe.COMPUTE, metric, partial(compute.gemm_throughput, dev, dtype, budget, plan.sizes.gemm_n)
                )
        cpus = nvml_probe.numa_cpus(node.nvml, i) if node.nvml is not None else None
        if Probe.PCIE in node.probes:
            budget = node.budget_for(Probe.PCIE)
            for metric in METRICS[Probe.PCIE]:
                direction = metric.rpartition(".")[2]
                fn = partial(_pcie_near, cpus, dev, direction, budget, plan.sizes.pcie_bytes)
                node.measure(i, Probe.PCIE, metric, fn)
        if node.nvml is not None and Probe.HEALTH in node.probes and i not in node.unusable:
            # in every plan with `health`, with or without the PCIe probe: the link is read while a transfer is in
            # flight, because an idle link trains down on purpose (Gen1 on most boards)
            read = partial(_pinned, cpus, partial(_link_under_load, node, dev, i))
            links[i] = node.rec.attempt("health", partial(within, node.limit_s, read, f"PCIe link of GPU {i}"))
    if Probe.PCIE in node.probes and len(devices) > 1:
        _pcie_together(node, {i: d for i, d in devices.items() if i not in node.unusable})
    for probe in GPU_PROBES:
        if probe in node.probes:
            node.emit(f"done/{probe.value}", Done(probe=probe))
    return links


def _pcie_together(node: _Node, devices: dict[int, Device]) -> None:
    """PCIe with every GPU copying at once, each direction: evidence beside the judged one-at-a-time figures."""

    def place(i: int, fn: Callable[[], T]) -> T:
        return _pinned(nvml_probe.numa_cpus(node.nvml, i) if node.nvml is not None else None, fn)

    budget, nbytes = node.budget_for(Probe.PCIE), node.plan.sizes.pcie_bytes
    for direction in ("h2d", "d2h"):
        metric = f"pcie.{direction}.concurrent"
        fn = partial(pcie.all_at_once, devices, direction, budget, nbytes, place)
        try:
            got = node.loaded(sorted(devices), metric, partial(within, node.limit_s, fn, f"{metric} on every GPU"))
        except Exception as exc:
            for i in devices:
                node.gpu_error(Probe.PCIE, i, f"GPU {i}: {metric}: {_why(exc)}", metric)
            if isinstance(exc, ProbeTimeout):  # any of them may be wedged: every GPU is left out of what follows
                node.unusable.update({i: f"hung in {metric}" for i in devices if i not in node.unusable})
                return
            continue
        for i, m in got.items():
            node.measured.setdefault(i, {})[metric] = m
            node.emit(f"gpu/{i}/{metric}", m)


def _pcie_near(cpus: set[int] | None, dev: Device, direction: str, budget: Budget, nbytes: int) -> Measurement:
    """The PCIe probe on the CPUs of the GPU's NUMA node, its pinned host buffer allocated (first touched) there."""
    m = _pinned(cpus, partial(pcie.host_copy_bandwidth, dev, direction, budget, nbytes))
    where = (
        _cpu_list(cpus) if cpus else "not pinned: no CPU of the GPU's NUMA node (NVML affinity) is known to this pod"
    )
    return m.model_copy(update={"params": {**m.params, "cpus": where}})


def _link_under_load(node: _Node, dev: Device, index: int) -> Any:
    host, buf = dev.host_pinned(node.plan.sizes.pcie_bytes), dev.empty(node.plan.sizes.pcie_bytes)
    dev.h2d(buf, host)
    try:
        return nvml_probe.pcie_under_load(node.nvml, index)
    finally:
        dev.synchronize()


def _between_gpus(node: _Node, devices: dict[int, Device], count: int, on_gpu: bool) -> tuple[Any, Any]:  # noqa: C901
    plan, probes = node.plan, node.probes
    p2p_ev = nccl_ev = None
    if count < 2:  # nothing to measure between GPUs: their checks skip with this reason
        for probe in sorted({Probe.P2P, Probe.NCCL} & probes):
            node.rec.error(
                ProbeError(
                    probe=probe.value,
                    unavailable=True,
                    message="this node has one GPU: nothing to measure between GPUs",
                )
            )
        return None, None
    every = sorted(set(devices) | set(node.unusable))
    if Probe.P2P in probes:

        def run_pair(fn: Callable[[], Any], what: str) -> Any:
            return within(node.limit_s, fn, what)

        p2p_ev = node.rec.attempt(
            "p2p",
            lambda: node.loaded(
                sorted(devices),
                "p2p.bandwidth",
                lambda: p2p.peer_matrix(
                    devices, node.budget_for(Probe.P2P), plan.sizes.p2p_bytes, unusable=node.unusable, run=run_pair
                ),
            ),
        )
        if p2p_ev is not None:
            for pair in p2p_ev.pairs:
                if pair.error is not None:
                    node.gpu_error(Probe.P2P, pair.src, f"peer copy GPU {pair.src} -> GPU {pair.dst}: {pair.error}")
            node.emit("p2p", p2p_ev)
    if Probe.NCCL in probes:
        if node.unusable:
            why = "; ".join(f"GPU {i} {w}" for i, w in sorted(node.unusable.items()))
            node.rec.error(ProbeError(probe="nccl", message=f"the all-reduce needs every GPU of the node: {why}"))
        else:
            ordered = [devices[i] for i in every]

            def sweep() -> Any:
                coll = nccl.CupyNccl(ordered) if on_gpu else nccl.NumpyCollective(len(ordered))
                return nccl.all_reduce_sweep(coll, node.budget_for(Probe.NCCL), plan.sizes.nccl_sizes)

            b = plan.budget  # one watchdog margin for the communicators and the sweep, plus each size's budget
            limit = b.watchdog_s + len(plan.sizes.nccl_sizes) * (b.warmup_s + b.measure_s)
            nccl_ev = node.rec.attempt(
                "nccl", lambda: node.loaded(every, "nccl.all_reduce", lambda: within(limit, sweep, "the all-reduce"))
            )
            if nccl_ev is not None:
                node.emit("nccl", nccl_ev)
    return p2p_ev, nccl_ev


def run_plan(  # noqa: C901, PLR0912, PLR0915
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
    pre = run_preflight(set(plan.probes), on_gpu, nvml=nvml, env=env, isolate=isolate_preflight)
    nvml = pre.nvml
    node = _Node(plan, nvml, emit)
    count = plan.gpus if plan.gpus is not None else int(nvml.nvmlDeviceGetCount()) if nvml is not None else 1
    if on_gpu and nvml is None:
        count = plan.gpus or 0
    emit(
        "node",
        NodeHeader(
            run_id=plan.run_id,
            node=plan.node,
            target=plan.target,
            probe_version=__version__,
            started=started,
            probes=plan.probes,
            gpus=count,
        ),
    )
    system = SystemFacts(kernel=platform.release(), os=platform.platform())
    if nvml is not None:
        system = node.rec.attempt("health", lambda: nvml_probe.read_system(nvml)) or system
    emit("system", system)
    for i in range(count):
        node.gpus[i] = nvml_probe.read_gpu(nvml, i) if nvml is not None else _cpu_identity(plan.node, i)
        emit(f"gpu/{i}", node.gpus[i])
    nvlink_before = nvml_probe.nvlink_counters_of(nvml, node.gpus) if Probe.HEALTH in node.probes else {}

    def finish(**parts: Any) -> NodeEvidence:
        return NodeEvidence(
            node=plan.node,
            target=plan.target,
            probe_version=__version__,
            started=started,
            finished=_now(),
            system=system,
            gpus=[
                g.model_copy(update={"measurements": node.measured.get(i, {})}) for i, g in sorted(node.gpus.items())
            ],
            errors=node.rec.errors,
            preflight=pre.steps,
            **parts,
        )

    if pre.failed:  # the node's one finding (probe.preflight): no probe runs, so none fails on its own
        node.rec.error(ProbeError(probe="preflight", message=summary(pre.failed)))
        return finish(collected=False)
    opener: Callable[[int], Device] = open_device or (CupyDevice if on_gpu else NumpyDevice)
    dcgm_ev: DcgmEvidence | None = None
    if Probe.DCGM in node.probes:  # first: no CUDA context of ours yet, no GPU memory held in CuPy's pools
        from gpucert.measure.probes.dcgm import run_diag

        serials = {g.index: g.serial for g in node.gpus.values()}  # every board: DCGM's entries are tied by serial
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
            emit("dcgm", dcgm_ev)
    watcher = nvml_probe.watch_xids(nvml, count) if nvml is not None else None
    with watcher if watcher is not None else contextlib.nullcontext():
        devices = _open_devices(node, count, opener)
        links = _per_gpu(node, devices)
        p2p_ev, nccl_ev = _between_gpus(node, devices, count, on_gpu)
    if nvml is not None and Probe.HEALTH in node.probes:
        nvlink_after = nvml_probe.nvlink_counters_of(nvml, node.gpus)
        for i in range(count):  # after the load: ECC, remapped rows, XIDs and throttling are what the load left
            xids = watcher.events.get(i, []) if watcher is not None else []
            g = nvml_probe.read_gpu(nvml, i, xids)
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
            emit(f"gpu/{i}", g)
    return finish(p2p=p2p_ev, nccl=nccl_ev, dcgm=dcgm_ev)
