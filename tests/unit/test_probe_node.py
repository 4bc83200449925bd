"""The runner on a node that misbehaves as real GPU nodes do: a GPU that cannot start, a hung copy, a far-socket
CPU, throttling under load, CuPy that cannot load, CUDA numbering GPUs differently from NVML.

Each runs the real runner with the NumPy device doing the arithmetic (copies copy, GEMMs multiply) and the tests'
fake NVML answering for the GPUs; only the failures are injected.
"""

from __future__ import annotations

import builtins
import os
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from gpucert.evaluate.rules.health import throttle
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.probes.device import NumpyDevice, prepare_cuda_environment
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.spec.baseline import load_baseline

from .fake_nvml import NVMLError_NoPermission, eight_gpus, fake_nvml

HW_THERMAL = 270  # NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN
BASELINES = Path(__file__).resolve().parents[2] / "baselines" / "gpus"


def plan(gpus: int, probes: list[str] | None = None, **budget: float) -> ProbePlan:
    return ProbePlan.model_validate(
        {
            "run_id": "r",
            "node": "gpu-07",
            "device": "numpy",
            "gpus": gpus,
            "probes": probes or ["health", "memory", "compute", "pcie", "p2p", "nccl"],
            "budget": {"warmup_s": 0, "measure_s": 0.005, "min_reps": 3, "max_reps": 3, **budget},
            "sizes": {
                "memory_bytes": 1 << 16,
                "gemm_n": 16,
                "pcie_bytes": 1 << 14,
                "p2p_bytes": 1 << 14,
                "nccl_sizes": [1 << 12],
            },
        }
    )


def test_a_gpu_that_cannot_start_is_that_gpus_error_and_keeps_its_health() -> None:
    gpus = eight_gpus()[:4]
    gpus[2].ecc = {(0, 1): 2}  # volatile uncorrected: what explains the failure

    def open_device(i: int) -> NumpyDevice:
        if i == 2:
            raise RuntimeError("cudaErrorECCUncorrectable: uncorrectable ECC error encountered")
        return NumpyDevice(i)

    ev = run_plan(plan(4), nvml=fake_nvml(*gpus), open_device=open_device)
    g2 = ev.gpus[2]
    assert g2.serial == gpus[2].serial
    assert g2.product == "NVIDIA H100 80GB HBM3"
    assert g2.health is not None
    assert g2.health.ecc.volatile_uncorrected == 2
    assert g2.measurements == {}
    for probe in ("memory", "compute", "pcie"):
        err = ev.error_for(probe, 2, f"{probe}.x")
        assert err is not None
        assert "GPU 2 could not be started: RuntimeError: cudaErrorECCUncorrectable" in err.message
    for i in (0, 1, 3):  # the other GPUs are measured
        assert set(ev.gpus[i].measurements) >= {"memory.bandwidth", "compute.gemm.bf16", "pcie.h2d"}
        assert ev.error_for("memory", i, "memory.bandwidth") is None
    assert ev.p2p is not None
    broken = {(p.src, p.dst) for p in ev.p2p.pairs if p.error}
    assert broken == {(a, b) for a in range(4) for b in range(4) if a != b and 2 in (a, b)}
    assert all(p.samples for p in ev.p2p.pairs if p.error is None)
    nccl = ev.error_for("nccl")
    assert nccl is not None
    assert "needs every GPU" in nccl.message
    assert "GPU 2 could not be started" in nccl.message


def test_placeholder_identity_is_never_written_for_a_gpu() -> None:
    gpus = eight_gpus()[:2]
    gpus[1].fail = {"nvmlDeviceGetSerial": NVMLError_NoPermission}
    ev = run_plan(plan(2, ["health", "memory"]), nvml=fake_nvml(*gpus))
    assert [g.product for g in ev.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [g.uuid for g in ev.gpus] == [g.uuid for g in gpus]
    assert ev.gpus[1].serial is None
    assert ev.gpus[1].health is not None
    assert "serial" in ev.gpus[1].health.unavailable


class Marked(NumpyDevice):
    """A device that says which CUDA ordinal it is, on its own PCI bus."""

    def __init__(self, ordinal: int, bus: str) -> None:
        super().__init__(ordinal, pci_bus_id=bus)
        self.name = f"cuda{ordinal}"


def test_cuda_devices_are_matched_to_nvml_by_pci_bus_id() -> None:
    gpus = eight_gpus()[:3]
    # CUDA numbered these GPUs in another order than NVML (fastest first): the bus ids say which is which
    cuda_order = [gpus[2].bus_id[4:], gpus[0].bus_id[4:], gpus[1].bus_id[4:]]  # CUDA writes a 4-digit domain
    ev = run_plan(plan(3, ["memory"]), nvml=fake_nvml(*gpus), open_device=lambda i: Marked(i, cuda_order[i]))
    by_index = {g.index: g.measurements["memory.bandwidth"].params["device"] for g in ev.gpus}
    assert by_index == {2: "cuda0", 0: "cuda1", 1: "cuda2"}
    assert [g.pci_bus_id for g in ev.gpus] == [g.bus_id for g in gpus]


def test_a_cuda_device_without_its_nvml_twin_is_an_error() -> None:
    gpus = eight_gpus()[:2]
    ev = run_plan(plan(2, ["memory"]), nvml=fake_nvml(*gpus), open_device=lambda i: Marked(i, f"0000:F{i}:00.0"))
    err = ev.error_for("memory", 0, "memory.bandwidth")
    assert err is not None
    assert "(0000:F0:00.0) has no NVML device with that bus id" in err.message


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning to a NUMA node needs two CPUs to tell apart")
def test_pcie_runs_on_the_cpus_of_the_gpus_numa_node() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    gpus = eight_gpus()[:2]
    gpus[0].cpus, gpus[1].cpus = {cpus[-1]}, {cpus[0]}  # GPU 1 sits on the other socket
    seen: dict[int, set[int]] = {}

    class Watching(NumpyDevice):
        def h2d(self, dst: Any, src: Any) -> None:
            seen.setdefault(self.index, os.sched_getaffinity(0))  # the one-at-a-time copy, which comes first
            super().h2d(dst, src)

    streamed: dict[str, Any] = {}
    ev = run_plan(
        plan(2, ["pcie"]), nvml=fake_nvml(*gpus), open_device=Watching, emit=lambda k, m: streamed.setdefault(k, m)
    )
    assert seen == {0: {cpus[-1]}, 1: {cpus[0]}}
    assert ev.gpus[1].measurements["pcie.h2d"].params["cpus"] == str(cpus[0])
    assert streamed["gpu/1/pcie.h2d"].params["cpus"] == str(cpus[0])  # the streamed part says so too
    assert os.sched_getaffinity(0) == set(cpus)  # the main thread was never pinned


def test_a_hung_probe_is_abandoned_and_the_rest_measured() -> None:
    release = threading.Event()

    class Hanging(NumpyDevice):
        def copy(self, dst: Any, src: Any) -> None:
            if self.index == 1:
                release.wait(30)  # a kernel that never completes
            super().copy(dst, src)

    try:
        ev = run_plan(
            plan(3, ["memory", "compute"], watchdog_s=0.5), nvml=fake_nvml(*eight_gpus()[:3]), open_device=Hanging
        )
    finally:
        release.set()
    err = ev.error_for("memory", 1, "memory.bandwidth")
    assert err is not None
    assert "memory.bandwidth on GPU 1 did not finish in 0.505 s" in err.message
    skipped = ev.error_for("compute", 1, "compute.gemm.bf16")
    assert skipped is not None
    assert "hung in memory.bandwidth" in skipped.message  # nothing more is queued on a wedged GPU
    assert set(ev.gpus[0].measurements) == set(ev.gpus[2].measurements) >= {"memory.bandwidth", "compute.gemm.fp64"}


def test_throttling_under_load_is_read_around_each_probe() -> None:
    gpus = eight_gpus()[:2]
    for g in gpus:
        g.throttle_ns = {HW_THERMAL: 1_000, 74: 0}

    class Heating(NumpyDevice):
        def gemm(self, a: Any, b: Any, c: Any, n: int, dtype: str) -> None:
            if self.index == 1 and dtype == "bf16":
                gpus[1].throttle_ns[HW_THERMAL] += 2_000_000  # 2 ms of HW thermal slowdown per GEMM
            super().gemm(a, b, c, n, dtype)

    ev = run_plan(plan(2, ["health", "compute"]), nvml=fake_nvml(*gpus), open_device=Heating)
    h1, h0 = ev.gpus[1].health, ev.gpus[0].health
    assert h1 is not None
    assert h0 is not None
    windows = {w.probe: w for w in h1.throttle_under_load}
    assert set(windows) == {f"compute.gemm.{t}" for t in ("fp16", "bf16", "tf32", "fp32", "fp64")}
    assert windows["compute.gemm.bf16"].reasons_ns["hw_thermal"] == 2_000_000 * 4  # warm-up + 3 repetitions
    assert windows["compute.gemm.fp16"].reasons_ns["hw_thermal"] == 0
    h100 = load_baseline(BASELINES / "H100-SXM5-80GB.yaml")
    finding = throttle(h1, h100, "gpu-07", 1)
    assert finding.status.value == "fail"
    assert "hw_thermal" in finding.message
    assert "compute.gemm.bf16" in finding.message
    assert throttle(h0, h100, "gpu-07", 0).status.value == "pass"  # idle reasons 0x1 (gpu_idle), no load throttling


def fake_cupy(on_import: Any) -> Any:
    """`import cupy` as CuPy 14 does it (`on_import` runs first); every GPU then fails to open (no device)."""
    module = types.ModuleType("cupy")

    def no_device(index: int) -> Any:
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    module.cuda = types.SimpleNamespace(Device=no_device)  # type: ignore[attr-defined]
    real_import = builtins.__import__

    def importer(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cupy":
            on_import()
            return module
        return real_import(name, *args, **kwargs)

    return importer


def cupy14_cache() -> None:
    """What CuPy 14's `cupy.cuda.compiler` does on import: create the kernel cache directory."""
    cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
    os.makedirs(cache, exist_ok=True)
    (Path(cache) / "probe").write_text("")


def gpu_plan() -> ProbePlan:
    return plan(2, ["health", "memory"]).model_copy(update={"device": "cupy"})


def test_an_unwritable_home_is_the_preflights_finding_and_the_cache_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "file" / "home"))  # like USER 65534's /nonexistent: not creatable
    monkeypatch.setenv("CUPY_CACHE_DIR", "unset")
    monkeypatch.delenv("CUPY_CACHE_DIR")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setattr(builtins, "__import__", fake_cupy(cupy14_cache))
    ev = run_plan(gpu_plan(), nvml=fake_nvml(*eight_gpus()[:2]), isolate_preflight=False)
    assert not ev.collected  # no probe ran: the preflight is the node's one error
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert (Path(os.environ["CUPY_CACHE_DIR"]) / "probe").exists()  # the cache moved where CuPy could write
    steps = {s.step: s for s in ev.preflight}
    assert steps["cache"].ok
    assert not steps["home"].ok
    assert "NotADirectoryError" in steps["home"].detail
    assert "writable $HOME" in (steps["home"].fix or "")
    (err,) = ev.errors
    assert err.probe == "preflight"
    assert "preflight home failed: NotADirectoryError" in err.message


def test_cupy_failing_to_load_is_the_nodes_error_with_its_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> None:
        raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(builtins, "__import__", fake_cupy(no_driver))
    ev: NodeEvidence = run_plan(gpu_plan(), nvml=fake_nvml(*eight_gpus()[:2]), isolate_preflight=False)
    assert not ev.collected
    (err,) = ev.errors
    assert err.probe == "preflight"
    assert "preflight cupy failed: OSError: libcuda.so.1: cannot open shared object" in err.message
    assert [s.step for s in ev.preflight_failed] == ["cupy"]  # kernel and cuBLAS were not tried without CuPy
    assert [g.serial for g in ev.gpus] == [g.serial for g in eight_gpus()[:2]]  # NVML still named the GPUs


def test_cuda_environment_keeps_a_writable_cache(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert prepare_cuda_environment(env) == []  # a writable home: nothing to change
    assert (tmp_path / ".cupy" / "kernel_cache").is_dir()
    (tmp_path / "file").write_text("")
    bad = str(tmp_path / "file" / "cache")  # under a regular file: not creatable, not even by root
    env = {"HOME": str(tmp_path), "CUPY_CACHE_DIR": bad}
    notes = prepare_cuda_environment(env)
    assert env["CUPY_CACHE_DIR"] != bad
    assert Path(env["CUPY_CACHE_DIR"]).is_dir()
    assert f"({bad} is not writable for this user)" in notes[-1]
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_one_failed_pair_is_that_pairs_error() -> None:
    class BrokenLink(NumpyDevice):
        def peer_copy(self, dst_device: Any, dst: Any, src: Any) -> None:
            if (self.index, dst_device.index) == (1, 2):
                raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
            super().peer_copy(dst_device, dst, src)

    ev = run_plan(plan(3, ["p2p"]), nvml=fake_nvml(*eight_gpus()[:3]), open_device=BrokenLink)
    assert ev.p2p is not None
    bad = [p for p in ev.p2p.pairs if p.error]
    assert [(p.src, p.dst) for p in bad] == [(1, 2)]
    assert "cudaErrorIllegalAddress" in (bad[0].error or "")
    assert len([p for p in ev.p2p.pairs if p.samples]) == 5
    err = ev.error_for("p2p", 1, "p2p.bandwidth")
    assert err is not None
    assert "GPU 1 -> GPU 2" in err.message
    assert ev.error_for("p2p") is None  # not the matrix's error


def test_dcgm_runs_before_any_gpu_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    exe = tmp_path / "dcgmi"
    exe.write_text(f"#!/bin/sh\necho dcgmi >> '{tmp_path / 'order'}'\necho '{{}}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    def opener(i: int) -> NumpyDevice:
        order.append((tmp_path / "order").read_text().strip() if (tmp_path / "order").exists() else "")
        return NumpyDevice(i)

    ev = run_plan(plan(2, ["dcgm", "memory"]), nvml=fake_nvml(*eight_gpus()[:2]), open_device=opener)
    assert order == ["dcgmi", "dcgmi"]  # dcgmi had run by the time the first GPU was opened
    assert ev.dcgm is not None
    assert ev.dcgm.runtime_error == "not a dcgmi diag document (no 'DCGM Diagnostic' key)"
