"""A fake `pynvml` (nvidia-ml-py 13) for the probes' tests: the names, constants, error classes and answers of the
real module, for GPUs described in Python, so every NVML path runs without a GPU.

What it reproduces of the real driver: NVLink state answers INVALID_ARGUMENT for a link index past the GPU's own
(18 on an H100, 12 on an A100) while the module's NVML_NVLINK_MAX_LINKS is 36; errors are NVMLError subclasses
named as pynvml names them (`NVMLError_InvalidArgument`, ...) whose `str()` is NVML's text; field values carry
their own return code. `test_fake_nvml_matches_the_real_module` checks names and constants against nvidia-ml-py.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, GPU_IS_LOST, UNKNOWN = 0, 2, 3, 4, 10, 15, 999
_TEXT = {
    INVALID_ARGUMENT: "Invalid Argument",
    NOT_SUPPORTED: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    TIMEOUT: "Timeout",
    GPU_IS_LOST: "GPU is lost",
    UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    value = UNKNOWN

    def __init__(self, value: int | None = None) -> None:
        super().__init__()
        if value is not None:
            self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"error {self.value}")


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801 - pynvml's names
    value = INVALID_ARGUMENT


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    value = NOT_SUPPORTED


class NVMLError_NoPermission(NVMLError):  # noqa: N801
    value = NO_PERMISSION


class NVMLError_Timeout(NVMLError):  # noqa: N801
    value = TIMEOUT


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    value = GPU_IS_LOST


class NVMLError_Unknown(NVMLError):  # noqa: N801
    value = UNKNOWN


@dataclass
class FakeGpu:
    """One GPU as NVML would answer for it; `fail` maps an nvml function name to the error it raises."""

    uuid: str = "GPU-6f1e7f3a-8a21-4c3b-9d55-0c6b0e4f8a10"
    serial: str = "1654922041276"
    bus_id: str = "00000000:18:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total: int = 85520809984
    nvlinks: int = 18
    down_links: set[int] = field(default_factory=set)  # links whose state is inactive
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)  # (link, counter) -> cumulative count
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)  # (counter, error) -> count
    remap: tuple[int, int, int, int] = (0, 0, 0, 0)
    reasons: int = 0x1
    cpus: set[int] = field(default_factory=lambda: {0})
    throttle_ns: dict[int, int] = field(default_factory=dict)  # field id -> cumulative ns
    fail: dict[str, type[NVMLError]] = field(default_factory=dict)


class _Value:
    def __init__(self, ull: int) -> None:
        self.ullVal = ull


class _FieldValue:
    def __init__(self, field_id: int, ret: int, value: int) -> None:
        self.fieldId, self.nvmlReturn, self.value = field_id, ret, _Value(value)


def _call(name: str, h: FakeGpu, value: Any) -> Any:
    if name in h.fail:
        raise h.fail[name]()
    return value() if callable(value) else value


def _link_state(h: FakeGpu, link: int) -> int:
    if "nvmlDeviceGetNvLinkState" in h.fail:
        raise h.fail["nvmlDeviceGetNvLinkState"]()
    if link >= h.nvlinks:  # what the driver answers past this GPU's own links
        raise NVMLError_InvalidArgument()
    return 0 if link in h.down_links else 1


def _link_errors(h: FakeGpu, link: int, counter: int) -> int:
    _call("nvmlDeviceGetNvLinkErrorCounter", h, None)
    if link >= h.nvlinks or not 0 <= counter < 5:  # nvmlNvLinkErrorCounter_t has 5 counters
        raise NVMLError_InvalidArgument()
    return h.nvlink_errors.get((link, counter), 0)


def _field_values(h: FakeGpu, ids: list[int]) -> list[_FieldValue]:
    _call("nvmlDeviceGetFieldValues", h, None)
    return [_FieldValue(i, SUCCESS if i in h.throttle_ns else NOT_SUPPORTED, h.throttle_ns.get(i, 0)) for i in ids]


def _affinity(h: FakeGpu, words: int, scope: int = 0) -> list[int]:
    _call("nvmlDeviceGetCpuAffinityWithinScope", h, None)
    mask = [0] * words
    for c in h.cpus:
        mask[c // 64] |= 1 << (c % 64)
    return mask


# pynvml's names the probes read: its exceptions and enum values, then each device query of a handle
_CONSTANTS: dict[str, Any] = {
    "NVMLError": NVMLError,
    "NVMLError_InvalidArgument": NVMLError_InvalidArgument,
    "NVMLError_NotSupported": NVMLError_NotSupported,
    "NVMLError_NoPermission": NVMLError_NoPermission,
    "NVMLError_Timeout": NVMLError_Timeout,
    "NVMLError_GpuIsLost": NVMLError_GpuIsLost,
    "NVMLError_Unknown": NVMLError_Unknown,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AGGREGATE_ECC": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_NVLINK_MAX_LINKS": 36,
    "NVML_NVLINK_ERROR_DL_REPLAY": 0,
    "NVML_NVLINK_ERROR_DL_RECOVERY": 1,
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": 2,
    "NVML_NVLINK_ERROR_DL_CRC_DATA": 3,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1,
    "NVML_AFFINITY_SCOPE_NODE": 0,
}
_DEVICE_QUERIES: dict[str, Any] = {
    "nvmlDeviceGetTotalEccErrors": lambda h, error, counter: _call(
        "nvmlDeviceGetTotalEccErrors", h, h.ecc.get((counter, error), 0)
    ),
    "nvmlDeviceGetRemappedRows": lambda h: _call("nvmlDeviceGetRemappedRows", h, h.remap),
    "nvmlDeviceGetCurrentClocksEventReasons": lambda h: _call("nvmlDeviceGetCurrentClocksEventReasons", h, h.reasons),
    "nvmlDeviceGetPowerUsage": lambda h: _call("nvmlDeviceGetPowerUsage", h, 71234),
    "nvmlDeviceGetEnforcedPowerLimit": lambda h: _call("nvmlDeviceGetEnforcedPowerLimit", h, 700000),
    "nvmlDeviceGetNvLinkState": _link_state,
    "nvmlDeviceGetNvLinkErrorCounter": _link_errors,
    "nvmlDeviceGetMemoryInfo": lambda h: _call(
        "nvmlDeviceGetMemoryInfo", h, types.SimpleNamespace(total=h.memory_total)
    ),
    "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: _call("nvmlDeviceGetCurrPcieLinkGeneration", h, 1),
    "nvmlDeviceGetCurrPcieLinkWidth": lambda h: _call("nvmlDeviceGetCurrPcieLinkWidth", h, 16),
    "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: _call("nvmlDeviceGetMaxPcieLinkGeneration", h, 5),
    "nvmlDeviceGetMaxPcieLinkWidth": lambda h: _call("nvmlDeviceGetMaxPcieLinkWidth", h, 16),
    "nvmlDeviceGetTemperature": lambda h, s: _call("nvmlDeviceGetTemperature", h, 33),
    "nvmlDeviceGetTemperatureThreshold": lambda h, t: _call("nvmlDeviceGetTemperatureThreshold", h, 87),
    "nvmlDeviceGetUUID": lambda h: _call("nvmlDeviceGetUUID", h, h.uuid.encode()),
    "nvmlDeviceGetSerial": lambda h: _call("nvmlDeviceGetSerial", h, h.serial),
    "nvmlDeviceGetPciInfo": lambda h: _call("nvmlDeviceGetPciInfo", h, types.SimpleNamespace(busId=h.bus_id.encode())),
    "nvmlDeviceGetName": lambda h: _call("nvmlDeviceGetName", h, h.name),
    "nvmlDeviceGetVbiosVersion": lambda h: _call("nvmlDeviceGetVbiosVersion", h, "96.00.99.00.01"),
    "nvmlDeviceGetFieldValues": _field_values,
    "nvmlDeviceGetCpuAffinityWithinScope": _affinity,
}


def fake_nvml(*gpus: FakeGpu) -> Any:
    """A module object answering like pynvml for `gpus` (handles are the GPU objects themselves)."""
    devs = list(gpus) or [FakeGpu()]

    def handle(i: int) -> FakeGpu:
        if not 0 <= i < len(devs):
            raise NVMLError_InvalidArgument()
        if "nvmlDeviceGetHandleByIndex" in devs[i].fail:
            raise devs[i].fail["nvmlDeviceGetHandleByIndex"]()
        return devs[i]

    m = types.ModuleType("pynvml")
    m.__dict__.update(
        _CONSTANTS,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: len(devs),
        nvmlSystemGetDriverVersion=lambda: "570.124.06",
        nvmlSystemGetCudaDriverVersion_v2=lambda: 12080,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlEventSetCreate=lambda: (_ for _ in ()).throw(NVMLError_NotSupported()),
        **_DEVICE_QUERIES,
    )
    return m


def eight_gpus(**changes: Any) -> list[FakeGpu]:
    """Eight H100s on PCI buses 0x18.. (as an HGX board numbers them), each with its own serial and UUID."""
    buses = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
    return [
        FakeGpu(
            uuid=f"GPU-{i:08x}-8a21-4c3b-9d55-0c6b0e4f8a10",
            serial=f"16549220{i:05d}",
            bus_id=f"00000000:{b:02X}:00.0",
            **changes,
        )
        for i, b in enumerate(buses)
    ]
