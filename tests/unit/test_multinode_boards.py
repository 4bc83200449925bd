"""The multi-node all-reduce starts its CUDA devices as the single-node probes do: each matched to its NVML record by
PCI bus id, so a device that cannot start is named by its board (NVML index, bus id, serial), not its CUDA ordinal.
A CUDA ordinal is a position among the devices CUDA lists (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), NVML's index
is not; the bus id is what both report for the same board (cudaDeviceGetPCIBusId, nvmlDeviceGetPciInfo)."""

from __future__ import annotations

import pytest

from gpucert.measure.probes import health as nvml_probe
from gpucert.measure.probes import runner
from gpucert.measure.probes.boards import start_in_board_order
from gpucert.measure.probes.device import NumpyDevice
from gpucert.measure.probes.multinode import run_multinode

from .fake_cupy import FakeCupy
from .fake_nvml import eight_gpus, fake_nvml
from .test_probe_node import plan

GPUS = eight_gpus()[:2]  # NVML: GPU 0 on bus 0x18, GPU 1 on bus 0x2A


class Swapped(NumpyDevice):
    """CUDA numbered the two boards the other way round from NVML (CUDA writes a 4-digit PCI domain), and
    `broken` ordinals cannot start."""

    buses = (GPUS[1].bus_id[4:], GPUS[0].bus_id[4:])
    broken: tuple[int, ...] = ()

    def __init__(self, ordinal: int) -> None:
        if ordinal in self.broken:
            raise RuntimeError("cudaErrorECCUncorrectable")
        super().__init__(ordinal, pci_bus_id=self.buses[ordinal])

    @staticmethod
    def bus_id_of(ordinal: int) -> str | None:
        return Swapped.buses[ordinal]


class BrokenFirst(Swapped):
    broken = (0,)


def test_a_device_that_cannot_start_is_named_by_its_board(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCupy([]).install(monkeypatch)  # `import cupy` succeeds; the devices are the stand-ins above
    monkeypatch.setattr(runner, "CupyDevice", BrokenFirst)
    monkeypatch.setattr(nvml_probe, "open_nvml", lambda: fake_nvml(*GPUS))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    p = plan(2, ["nccl"]).model_copy(update={"device": "cupy"})
    fabric = run_multinode(p, rank=0, processes=1, host="localhost", port=0, timeout_s=1)
    assert fabric is not None
    assert not fabric.collected
    message = fabric.errors[0].message
    assert f"GPU 1 (PCI {GPUS[1].bus_id}, serial {GPUS[1].serial}) could not be started" in message
    assert "cudaErrorECCUncorrectable" in message


def test_devices_come_in_nvmls_order() -> None:
    devices = start_in_board_order(2, Swapped, fake_nvml(*GPUS))
    assert [d.pci_bus_id for d in devices] == [GPUS[0].bus_id[4:], GPUS[1].bus_id[4:]]  # ranks follow the boards


def test_a_device_nvml_does_not_list_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"CUDA device 0 \(PCI 0000:2A:00.0\) has no NVML device with that bus id"):
        start_in_board_order(1, Swapped, fake_nvml(GPUS[0]))


def test_without_nvml_a_device_is_named_by_its_bus_id() -> None:
    with pytest.raises(RuntimeError, match=r"CUDA device 0 \(PCI 0000:2A:00.0\) could not be started"):
        start_in_board_order(2, BrokenFirst, None)


class TwoOfThree(NumpyDevice):
    """CUDA lists two of NVML's three boards (board 1 is missing from CUDA's list): ordinal 0 is board 0, ordinal 1
    is board 2, and ordinal 2 does not exist, so CUDA cannot name its bus either (cudaErrorInvalidDevice)."""

    buses = (eight_gpus()[0].bus_id[4:], eight_gpus()[2].bus_id[4:])

    def __init__(self, ordinal: int) -> None:
        if ordinal >= len(self.buses):
            raise RuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
        super().__init__(ordinal, pci_bus_id=self.buses[ordinal])

    @staticmethod
    def bus_id_of(ordinal: int) -> str | None:
        return TwoOfThree.buses[ordinal] if ordinal < len(TwoOfThree.buses) else None


def test_a_cuda_device_that_names_no_board_is_charged_to_the_board_cuda_lacks() -> None:
    from gpucert.measure.probes.runner import run_plan

    ev = run_plan(plan(3, ["memory"]), nvml=fake_nvml(*eight_gpus()[:3]), open_device=TwoOfThree)
    err = ev.error_for("memory", 1, "memory.bandwidth")
    assert err is not None
    assert "has no CUDA device with its bus id (PCI 00000000:2A:00.0)" in err.message
    assert "CUDA device 2 could not be started: RuntimeError: cudaErrorInvalidDevice" in err.message
    assert ev.error_for("memory", 2, "memory.bandwidth") is None  # board 2 (CUDA's ordinal 1) was measured
    assert "memory.bandwidth" in ev.gpus[2].measurements
