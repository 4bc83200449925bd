"""The probe runner: one node's plan in, one evidence document out.

`python -m gpucert.probes --plan plan.json` runs it in a probe pod and prints the document; the `local` target
runs the same function in-process. A probe that fails is recorded in `errors` and the others still run.
"""

from __future__ import annotations

import hashlib
import platform
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpucert import __version__
from gpucert.checks import GEMM_DTYPES
from gpucert.errors import GpucertError
from gpucert.evidence import DcgmEvidence, GpuEvidence, Measurement, NodeEvidence, ProbeError, SystemFacts
from gpucert.probes import compute, memory, nccl, p2p, pcie
from gpucert.probes.device import CupyDevice, Device, NumpyDevice
from gpucert.probes.timing import Budget
from gpucert.spec import Probe

__all__ = ["PLAN_SCHEMA", "ProbePlan", "devices_for", "run_plan"]

PLAN_SCHEMA = "gpucert.io/probe-plan/v1"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetSpec(_M):
    warmup_s: float = 0.2
    measure_s: float = 1.0
    min_reps: int = 5
    max_reps: int = 100


class Sizes(_M):
    memory_bytes: int = memory.DEFAULT_BYTES
    gemm_n: int = compute.DEFAULT_N
    pcie_bytes: int = pcie.DEFAULT_BYTES
    p2p_bytes: int = p2p.DEFAULT_BYTES
    nccl_sizes: list[int] = Field(default_factory=lambda: list(nccl.DEFAULT_SIZES))


class DcgmPlan(_M):
    level: int = 2
    host: str | None = None
    timeout_s: float = 7200


class ProbePlan(_M):
    schema_: Literal["gpucert.io/probe-plan/v1"] = Field("gpucert.io/probe-plan/v1", alias="schema")
    run_id: str
    node: str
    target: str = "local"
    probes: list[Probe] = Field(default_factory=lambda: list(Probe))
    device: Literal["cupy", "numpy"] = "cupy"
    gpus: int | None = None  # how many devices: all visible GPUs when None (numpy: 1)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    sizes: Sizes = Field(default_factory=Sizes)
    dcgm: DcgmPlan = Field(default_factory=DcgmPlan)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def devices_for(plan: ProbePlan) -> list[Device]:
    if plan.device == "numpy":
        return [NumpyDevice(i) for i in range(plan.gpus or 1)]
    try:
        import cupy
    except ImportError:
        CupyDevice(0)  # raises the ConfigError that names the extra to install
        raise
    count = plan.gpus if plan.gpus is not None else cupy.cuda.runtime.getDeviceCount()
    return [CupyDevice(i) for i in range(count)]


def _cpu_identity(node: str, index: int) -> GpuEvidence:
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return GpuEvidence(index=index, uuid=f"CPU-{uuid.UUID(digest[:32])}", product="CPU (numpy device)")


class _Recorder:
    def __init__(self) -> None:
        self.errors: list[ProbeError] = []

    def attempt(self, probe: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except FileNotFoundError as exc:
            self.errors.append(ProbeError(probe=probe, message=str(exc), unavailable=True))
        except (GpucertError, RuntimeError, ValueError, MemoryError, OSError) as exc:
            self.errors.append(ProbeError(probe=probe, message=f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            self.errors.append(ProbeError(probe=probe, message=f"{type(exc).__name__}: {exc}"))
        return None


def run_plan(plan: ProbePlan, nvml: Any = None) -> NodeEvidence:
    """Run every probe of the plan on this node's devices; `nvml` is pynvml (opened here when None on a GPU)."""
    started = _now()
    budget = Budget(plan.budget.warmup_s, plan.budget.measure_s, plan.budget.min_reps, plan.budget.max_reps)
    rec = _Recorder()
    probes = set(plan.probes)
    devices = devices_for(plan)
    on_gpu = plan.device == "cupy"
    if on_gpu and nvml is None:
        from gpucert.probes.health import open_nvml

        nvml = open_nvml()
    from gpucert.probes import health as nvml_probe

    system = SystemFacts(kernel=platform.release(), os=platform.platform())
    gpus: list[GpuEvidence] = [_cpu_identity(plan.node, i) for i in range(len(devices))]
    measurements: list[dict[str, Measurement]] = [{} for _ in devices]
    watcher = nvml_probe.watch_xids(nvml, len(devices)) if on_gpu else None
    if watcher is not None:
        watcher.__enter__()
    try:
        if on_gpu:
            system = rec.attempt("health", lambda: nvml_probe.read_system(nvml)) or system
        for i, dev in enumerate(devices):
            m = measurements[i]
            if Probe.MEMORY in probes:
                r = rec.attempt("memory", partial(memory.copy_bandwidth, dev, budget, plan.sizes.memory_bytes))
                if r is not None:
                    m["memory.bandwidth"] = r
            if Probe.COMPUTE in probes:
                for dtype in GEMM_DTYPES:
                    r = rec.attempt("compute", partial(compute.gemm_throughput, dev, dtype, budget, plan.sizes.gemm_n))
                    if r is not None:
                        m[f"compute.gemm.{dtype}"] = r
            if Probe.PCIE in probes:
                for direction in ("h2d", "d2h"):
                    r = rec.attempt(
                        "pcie", partial(pcie.host_copy_bandwidth, dev, direction, budget, plan.sizes.pcie_bytes)
                    )
                    if r is not None:
                        m[f"pcie.{direction}"] = r
        link_under_load = {}
        if on_gpu and Probe.PCIE in probes and Probe.HEALTH in probes:
            # read each link while a transfer is in flight: idle links train down on purpose
            for i, dev in enumerate(devices):
                host, buf = dev.host_pinned(plan.sizes.pcie_bytes), dev.empty(plan.sizes.pcie_bytes)
                dev.h2d(buf, host)
                link_under_load[i] = rec.attempt("health", partial(nvml_probe.pcie_under_load, nvml, i))
                dev.synchronize()
        p2p_ev = nccl_ev = None
        if len(devices) < 2:  # nothing to measure between GPUs: their checks skip with this reason
            for probe in sorted({Probe.P2P, Probe.NCCL} & probes):
                rec.errors.append(
                    ProbeError(
                        probe=probe.value,
                        unavailable=True,
                        message="this node has one GPU: nothing to measure between GPUs",
                    )
                )
        else:
            if Probe.P2P in probes:
                p2p_ev = rec.attempt("p2p", partial(p2p.peer_matrix, devices, budget, plan.sizes.p2p_bytes))
            if Probe.NCCL in probes:
                coll: Callable[[], Any] = (
                    (lambda: nccl.CupyNccl(devices)) if on_gpu else (lambda: nccl.NumpyCollective(len(devices)))
                )
                nccl_ev = rec.attempt("nccl", lambda: nccl.all_reduce_sweep(coll(), budget, plan.sizes.nccl_sizes))
    finally:
        if watcher is not None:
            watcher.__exit__(None, None, None)
    if on_gpu and Probe.HEALTH in probes:
        for i in range(len(devices)):
            xids = watcher.events.get(i, []) if watcher is not None else []
            g = rec.attempt("health", partial(nvml_probe.read_gpu, nvml, i, xids))
            if g is not None:
                if link_under_load.get(i) is not None and g.health is not None:
                    g = g.model_copy(update={"health": g.health.model_copy(update={"pcie": link_under_load[i]})})
                gpus[i] = g
    gpus = [g.model_copy(update={"measurements": measurements[i]}) for i, g in enumerate(gpus)]
    dcgm_ev: DcgmEvidence | None = None
    if Probe.DCGM in probes:
        from gpucert.probes.dcgm import run_diag

        serials = {g.index: g.serial for g in gpus if g.serial}
        dcgm_ev = rec.attempt(
            "dcgm",
            lambda: run_diag(plan.dcgm.level, serials=serials, host=plan.dcgm.host, timeout_s=plan.dcgm.timeout_s),
        )
    return NodeEvidence(
        node=plan.node,
        target=plan.target,
        probe_version=__version__,
        started=started,
        finished=_now(),
        system=system,
        gpus=gpus,
        p2p=p2p_ev,
        nccl=nccl_ev,
        dcgm=dcgm_ev,
        errors=rec.errors,
    )
