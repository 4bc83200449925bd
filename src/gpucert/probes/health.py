"""NVML readings per GPU through nvidia-ml-py: identity, ECC, remapped rows, PCIe link, clock-event reasons,
temperature against the slowdown threshold, power against its limit, NVLink state, XID events.

A reading the device does not support is None and named in `not_supported`, never zero. `pynvml` is imported
lazily and passed around as a module, so the same code reads a real GPU or the tests' recorded answers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from gpucert.evidence import EccCounts, GpuEvidence, Health, PcieLink, RemappedRows, SystemFacts, XidEvent
from gpucert.probes.device import missing_gpu_extra

__all__ = ["open_nvml", "read_gpu", "read_system", "watch_xids"]

T = TypeVar("T")


def open_nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise missing_gpu_extra("nvidia-ml-py (NVML)", exc) from None
    pynvml.nvmlInit()
    return pynvml


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Reader:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.not_supported: list[str] = []

    def get(self, name: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            if isinstance(exc, self.nvml.NVMLError_NotSupported):
                self.not_supported.append(name)
                return None
            raise


def read_system(nvml: Any) -> SystemFacts:
    import os
    import platform

    cuda = nvml.nvmlSystemGetCudaDriverVersion_v2()  # e.g. 12080 for CUDA 12.8
    os_name = (
        platform.freedesktop_os_release().get("PRETTY_NAME") if hasattr(platform, "freedesktop_os_release") else None
    )
    return SystemFacts(
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
        cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
        kernel=os.uname().release,
        os=os_name,
    )


def read_gpu(nvml: Any, index: int, xids: list[XidEvent] | None = None) -> GpuEvidence:
    """Identity and health of GPU `index`; `xids` are the XID events seen while the probes ran."""
    n = nvml
    h = n.nvmlDeviceGetHandleByIndex(index)
    r = _Reader(n)

    def ecc(counter: int, error: int) -> int | None:
        return r.get(f"ecc.{counter}.{error}", lambda: int(n.nvmlDeviceGetTotalEccErrors(h, error, counter)))

    remap = r.get("remapped_rows", lambda: n.nvmlDeviceGetRemappedRows(h))  # (corr, unc, pending, failure)
    reasons_fn = (
        getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    power_mw = r.get("power", lambda: n.nvmlDeviceGetPowerUsage(h))
    limit_mw = r.get("power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
    links = []
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        state = r.get(f"nvlink.{link}", partial(n.nvmlDeviceGetNvLinkState, h, link))
        if state is None:
            break
        links.append(bool(state))
    mem = n.nvmlDeviceGetMemoryInfo(h)
    health = Health(
        ecc=EccCounts(
            volatile_corrected=ecc(n.NVML_VOLATILE_ECC, n.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            volatile_uncorrected=ecc(n.NVML_VOLATILE_ECC, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            aggregate_corrected=ecc(n.NVML_AGGREGATE_ECC, n.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            aggregate_uncorrected=ecc(n.NVML_AGGREGATE_ECC, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ),
        remapped_rows=RemappedRows(
            correctable=int(remap[0]), uncorrectable=int(remap[1]), pending=bool(remap[2]), failure=bool(remap[3])
        )
        if remap is not None
        else RemappedRows(),
        pcie=_pcie(r, n, h, under_load=False),
        clock_event_reasons=r.get("clock_event_reasons", lambda: int(reasons_fn(h))),
        temperature_c=r.get("temperature", lambda: float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))),
        slowdown_temperature_c=r.get(
            "slowdown_temperature",
            lambda: float(n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
        ),
        power_w=power_mw / 1000 if power_mw is not None else None,
        power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
        xid=list(xids or []),
        nvlink_active=links or None,
        not_supported=r.not_supported,
    )
    return GpuEvidence(
        index=index,
        uuid=_text(n.nvmlDeviceGetUUID(h)),
        serial=r.get("serial", lambda: _text(n.nvmlDeviceGetSerial(h))),
        pci_bus_id=_text(n.nvmlDeviceGetPciInfo(h).busId),
        product=_text(n.nvmlDeviceGetName(h)),
        memory_mib=int(mem.total) // 2**20,
        vbios=r.get("vbios", lambda: _text(n.nvmlDeviceGetVbiosVersion(h))),
        health=health,
    )


def _pcie(r: _Reader, n: Any, h: Any, *, under_load: bool) -> PcieLink:
    return PcieLink(
        current_generation=r.get("pcie.current_generation", lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        current_width=r.get("pcie.current_width", lambda: n.nvmlDeviceGetCurrPcieLinkWidth(h)),
        max_generation=r.get("pcie.max_generation", lambda: n.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        max_width=r.get("pcie.max_width", lambda: n.nvmlDeviceGetMaxPcieLinkWidth(h)),
        under_load=under_load,
    )


def pcie_under_load(nvml: Any, index: int) -> PcieLink:
    """The link as trained while traffic flows: an idle GPU trains its link down on purpose, so read it now."""
    return _pcie(_Reader(nvml), nvml, nvml.nvmlDeviceGetHandleByIndex(index), under_load=True)


class watch_xids:  # noqa: N801 - a context manager read like a function
    """Collect XID critical-error events on every GPU while the probes run (NVML event set)."""

    def __init__(self, nvml: Any, count: int) -> None:
        self.nvml = nvml
        self.count = count
        self.events: dict[int, list[XidEvent]] = {i: [] for i in range(count)}
        self._set: Any = None

    def __enter__(self) -> watch_xids:
        n = self.nvml
        try:
            self._set = n.nvmlEventSetCreate()
            for i in range(self.count):
                n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(i), n.nvmlEventTypeXidCriticalError, self._set)
        except n.NVMLError:
            self._set = None  # not supported (some vGPU and MIG setups): no events, not a failure
        return self

    def poll(self) -> None:
        if self._set is None:
            return
        n = self.nvml
        while True:
            try:
                data = n.nvmlEventSetWait_v2(self._set, 0)
            except n.NVMLError_Timeout:
                return
            index = n.nvmlDeviceGetIndex(data.device)
            self.events.setdefault(index, []).append(XidEvent(code=int(data.eventData)))

    def __exit__(self, *exc: object) -> None:
        self.poll()
        if self._set is not None:
            self.nvml.nvmlEventSetFree(self._set)
