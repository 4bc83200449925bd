"""CupyDevice against a CuPy whose behaviour follows CuPy 14.2's source (see fake_cupy): the cuBLAS handle lives and
dies in the thread that runs the GEMMs; each GPU's pinned host buffer is fresh memory on its own NUMA node, not a
block of CuPy's pinned pool; a CUDA device that cannot start is charged to its own board."""

from __future__ import annotations

import gc
import os
import types
from functools import partial
from pathlib import Path

import pytest

from gpucert.measure.probes.affinity import pinned as _pinned
from gpucert.measure.probes.device import CupyDevice, NumpyDevice
from gpucert.measure.probes.hostmem import first_touched, page_nodes, registered
from gpucert.measure.probes.runner import run_plan
from gpucert.measure.probes.watchdog import within

from .fake_cupy import CublasError, FakeCupy
from .fake_nvml import eight_gpus, fake_nvml
from .test_probe_node import plan

BUSES = ["0000:1B:00.0", "0000:43:00.0"]
ARRAY = types.SimpleNamespace(data=types.SimpleNamespace(ptr=1))


def gemms(dev: CupyDevice, dtype: str) -> None:
    """What compute.gemm_throughput does with the device: a block of GEMMs on the device's BLAS."""
    with dev.blas():
        for _ in range(2):
            dev.gemm(ARRAY, ARRAY, ARRAY, 16, dtype)


def test_gemms_run_on_a_handle_made_and_destroyed_in_their_own_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCupy(BUSES)
    fake.install(monkeypatch)
    dev = within(5, partial(CupyDevice, 0), "starting GPU 0")  # the opener's watchdog thread, which then ends
    gc.collect()
    for dtype in ("bf16", "fp64"):  # each GEMM metric in a watchdog thread of its own, as the runner runs them
        within(5, partial(gemms, dev, dtype), f"compute.gemm.{dtype} on GPU 0")
    gc.collect()
    assert len(fake.gemms) == 4
    made_in = dict(fake.made)
    assert all(made_in[h] == thread for h, thread in fake.gemms)  # the GEMM's thread made its handle
    assert fake.live == set()  # and every handle made was destroyed, once
    assert sorted(fake.destroyed) == sorted(made_in)


def test_cupys_own_handle_dies_with_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the device does not use `Device.cublas_handle`: CuPy's is gone once the thread that took it ends."""
    fake = FakeCupy(BUSES)
    fake.install(monkeypatch)
    handle = within(5, lambda: fake.module.cuda.Device(0).cublas_handle, "taking CuPy's handle")
    gc.collect()
    with pytest.raises(CublasError, match="NOT_INITIALIZED"):
        fake.gemm_ex(handle)


def test_a_gemm_outside_its_blas_block_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCupy(BUSES).install(monkeypatch)
    dev = CupyDevice(0)
    with pytest.raises(RuntimeError, match=r"inside `with device.blas\(\):`"):
        dev.gemm(ARRAY, ARRAY, ARRAY, 16, "fp16")


def test_each_gpus_host_buffer_is_fresh_memory_pinned_where_its_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCupy(BUSES)
    fake.install(monkeypatch)
    cpus = sorted(os.sched_getaffinity(0))
    for i, dev in enumerate([CupyDevice(0), CupyDevice(1)]):
        where = {cpus[-1 - i % len(cpus)]}  # each GPU's NUMA node's CPUs (here: one CPU each)
        host = _pinned(where, partial(dev.host_pinned, 1 << 16))
        ptr = int(host.ctypes.data)
        assert fake.registered[ptr] == (1 << 16, where)  # page-locked by the thread pinned to the GPU's node
        del host
        gc.collect()
        assert fake.unregistered[-1] == ptr  # unlocked when dropped, before the memory is unmapped
    assert fake.pool_blocks == []  # CuPy's pinned pool never handed out a buffer


def test_registered_memory_is_unregistered_once() -> None:
    calls: list[tuple[str, int]] = []
    runtime = types.SimpleNamespace(
        hostRegister=lambda p, n, f: calls.append(("register", p)), hostUnregister=lambda p: calls.append(("un", p))
    )
    buf = registered(first_touched(1 << 14), runtime)
    ptr = int(buf.ctypes.data)
    buf[:] = 3  # usable as a host array
    del buf
    gc.collect()
    assert calls == [("register", ptr), ("un", ptr)]


def cpu_nodes(cpus: set[int]) -> list[int]:
    found = {int(p.name[4:]) for c in cpus for p in Path(f"/sys/devices/system/cpu/cpu{c}").glob("node[0-9]*")}
    return sorted(found)


def test_the_pcie_evidence_says_which_numa_node_the_host_buffer_was_on() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    gpus = eight_gpus()[:2]
    gpus[0].cpus, gpus[1].cpus = {cpus[-1]}, {cpus[0]}
    ev = run_plan(plan(2, ["pcie"]), nvml=fake_nvml(*gpus))
    for g, fg in zip(ev.gpus, gpus, strict=True):
        nodes = g.measurements["pcie.h2d"].params["host_numa_nodes"]
        want = cpu_nodes(fg.cpus)
        if not want:
            pytest.skip("this machine's /sys does not say which node a CPU is on")
        assert nodes == want


def test_page_nodes_reads_the_kernels_answer() -> None:
    here = {sorted(os.sched_getaffinity(0))[0]}
    buf = _pinned(here, partial(first_touched, 1 << 20))
    want = cpu_nodes(here)
    if not want:
        pytest.skip("this machine's /sys does not say which node a CPU is on")
    assert page_nodes(buf) == want  # first touched from `here`: every sampled page on its node


class Failing(NumpyDevice):
    """CUDA ordinal 0 is the board NVML calls GPU 1 (CUDA numbered them differently), and it cannot start."""

    cuda_buses = (eight_gpus()[1].bus_id[4:], eight_gpus()[0].bus_id[4:])

    def __init__(self, ordinal: int) -> None:
        if ordinal == 0:
            raise RuntimeError("cudaErrorECCUncorrectable")
        super().__init__(ordinal, pci_bus_id=self.cuda_buses[ordinal])

    @staticmethod
    def bus_id_of(ordinal: int) -> str | None:
        return Failing.cuda_buses[ordinal]


def test_a_device_that_cannot_start_is_charged_to_its_own_board() -> None:
    ev = run_plan(plan(2, ["memory"]), nvml=fake_nvml(*eight_gpus()[:2]), open_device=Failing)
    err = ev.error_for("memory", 1, "memory.bandwidth")
    assert err is not None
    assert "could not be started: RuntimeError: cudaErrorECCUncorrectable" in err.message
    assert "memory.bandwidth" in ev.gpus[0].measurements  # the other board (CUDA ordinal 1) was measured
    assert ev.error_for("memory", 0, "memory.bandwidth") is None


def test_cupy_device_finds_a_bus_id_without_starting_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCupy(BUSES).install(monkeypatch)
    assert CupyDevice.bus_id_of(1) == BUSES[1]
