"""Which board a CUDA device is: its NVML record, found by PCI bus id, named by NVML index, bus id and serial.

CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID (which `device.prepare_cuda_environment`
sets), and even then a CUDA ordinal is a position in CUDA_VISIBLE_DEVICES, not NVML's index: the bus id is what both
report for the same board. A failure is charged to the board it names, never to a number that means another one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpucert.measure.probes.device import Device
from gpucert.measure.probes.health import same_bus

__all__ = ["Board", "nvml_boards", "start_in_board_order"]


@dataclass(frozen=True, slots=True)
class Board:
    index: int  # NVML's
    bus_id: str | None
    serial: str | None

    def __str__(self) -> str:
        return f"GPU {self.index} (PCI {self.bus_id or 'unknown'}, serial {self.serial or 'unknown'})"


def _read(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # an unreadable field leaves the board named by what could be read
        return None


def _text(v: Any) -> str | None:
    return None if v is None else v.decode() if isinstance(v, bytes) else str(v)


def nvml_boards(nvml: Any) -> list[Board]:
    """Every GPU NVML lists, by index, with its bus id and serial (None where NVML will not say)."""
    out = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        h = _read(nvml.nvmlDeviceGetHandleByIndex, i)
        pci = _read(nvml.nvmlDeviceGetPciInfo, h) if h is not None else None
        serial = _read(nvml.nvmlDeviceGetSerial, h) if h is not None else None
        out.append(Board(i, _text(getattr(pci, "busId", None)), _text(serial)))
    return out


def _board(boards: list[Board], bus: str | None) -> Board | None:
    return next((b for b in boards if same_bus(b.bus_id, bus)), None)


def start_in_board_order(count: int, opener: Callable[[int], Device], nvml: Any = None) -> list[Device]:
    """Start CUDA devices 0..count-1 and return them in NVML's order; raise RuntimeError naming the board (NVML
    index, bus id, serial) of a device that cannot start, or of one NVML has no record of.

    `opener(ordinal)` starts one device; its `bus_id_of(ordinal)`, where it has one, names the board without
    starting it. Without NVML (`nvml` None) a device is named by its ordinal and bus id.
    """
    boards = nvml_boards(nvml) if nvml is not None else []
    started: list[tuple[int, Device]] = []
    for ordinal in range(count):
        bus = getattr(opener, "bus_id_of", lambda o: None)(ordinal)
        board = _board(boards, bus)
        who = str(board) if board else f"CUDA device {ordinal}" + (f" (PCI {bus})" if bus else "")
        try:
            dev = opener(ordinal)
        except Exception as exc:
            raise RuntimeError(f"{who} could not be started: {type(exc).__name__}: {exc}") from exc
        board = _board(boards, dev.pci_bus_id)
        if boards and board is None:
            raise RuntimeError(f"CUDA device {ordinal} (PCI {dev.pci_bus_id}) has no NVML device with that bus id")
        started.append((board.index if board else ordinal, dev))
    return [dev for _, dev in sorted(started, key=lambda pair: pair[0])]
