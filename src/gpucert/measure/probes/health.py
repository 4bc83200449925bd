"""NVML readings per GPU through nvidia-ml-py: identity, ECC, remapped rows, PCIe link, clock-event reasons,
temperature against the slowdown threshold, power against its limit, NVLink state, XID events, the cumulative
throttle counters read around each loaded probe, the NVLink error counters read around the whole load, and the CPUs
of the GPU's NUMA node.

Every reading is independent: one NVML refuses is None and named (`not_supported`, or `unavailable` with NVML's
error), never zero, and the others stand. A GPU whose identity cannot be read keeps its fields empty: no
placeholder identity is ever written. `pynvml` is imported lazily and passed around as a module, so the same code
reads a real GPU or the tests' fake.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpucert.errors import ConfigError
from gpucert.measure.evidence import (
    EccCounts,
    GpuEvidence,
    Health,
    NvlinkErrors,
    PcieLink,
    RemappedRows,
    SystemFacts,
    XidEvent,
)
from gpucert.measure.probes.device import missing_gpu_extra
from gpucert.measure.probes.preflight import NVML_FIXES

__all__ = [
    "NVLINK_ERROR_COUNTERS",
    "THROTTLE_COUNTERS",
    "numa_cpus",
    "nvlink_counters_of",
    "nvlink_error_counters",
    "nvlink_errors_between",
    "open_nvml",
    "pcie_under_load",
    "read_gpu",
    "read_system",
    "same_bus",
    "throttle_counters",
    "watch_xids",
]

T = TypeVar("T")

# NVML field ids of the cumulative throttle counters (nanoseconds a reason held the clocks down, nvml.h):
# NVML_FI_DEV_PERF_POLICY_* (74..81) and NVML_FI_DEV_CLOCKS_EVENT_REASON_* (269..271, drivers R550 and later)
THROTTLE_COUNTERS = {
    74: "sw_power_cap",
    75: "thermal",
    76: "sync_boost",
    77: "board_limit",
    79: "reliability",
    269: "sw_thermal",
    270: "hw_thermal",
    271: "hw_power_brake",
}


# NVML's per-link NVLink error counters (nvmlNvLinkErrorCounter_t, nvml.h; nvidia-ml-py 13: NVML_NVLINK_ERROR_DL_*)
NVLINK_ERROR_COUNTERS = {
    "replay": "NVML_NVLINK_ERROR_DL_REPLAY",
    "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
}


# on this machine (the local target) rather than in a probe pod
HOST_NVML_FIXES = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1, the NVIDIA driver's NVML library, is not installed on this "
    "machine: install the NVIDIA driver",
}


def open_nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise missing_gpu_extra("nvidia-ml-py (NVML)", exc) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # no libnvidia-ml.so.1, no driver loaded, no permission: say which, and the fix
        name = type(exc).__name__
        fix = {**NVML_FIXES, **HOST_NVML_FIXES}.get(name, "check the NVIDIA driver on this machine (nvidia-smi)")
        raise ConfigError(
            f"NVML could not start ({name}: {exc}): {fix}; or set target.device: numpy for a CPU smoke run"
        ) from None
    return pynvml


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _end_of_links(nvml: Any, exc: BaseException) -> bool:
    """NVML's answer for a link index past the GPU's own (18 on H100/H200, 12 on A100): the list is complete."""
    return isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument))


class _Reader:
    """Reads one value at a time; a refusal is recorded by name and the reading is None."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.not_supported: list[str] = []
        self.unavailable: dict[str, str] = {}

    def get(self, name: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            if isinstance(exc, self.nvml.NVMLError_NotSupported):
                self.not_supported.append(name)
            else:
                self.unavailable[name] = _why(exc)
            return None


def read_system(nvml: Any) -> SystemFacts:
    import platform

    r = _Reader(nvml)
    cuda = r.get("cuda_driver_version", nvml.nvmlSystemGetCudaDriverVersion_v2)  # e.g. 12080 for CUDA 12.8
    driver = r.get("driver_version", nvml.nvmlSystemGetDriverVersion)
    os_name = (
        platform.freedesktop_os_release().get("PRETTY_NAME") if hasattr(platform, "freedesktop_os_release") else None
    )
    return SystemFacts(
        driver_version=_text(driver) if driver is not None else None,
        cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda is not None else None,
        kernel=os.uname().release,
        os=os_name,
    )


def _nvlinks(r: _Reader, n: Any, h: Any) -> list[bool | None] | None:
    links: list[bool | None] = []
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        try:
            links.append(bool(n.nvmlDeviceGetNvLinkState(h, link)))
        except n.NVMLError as exc:
            if _end_of_links(n, exc):
                if not links:
                    r.not_supported.append(f"nvlink.{link}")
                break
            r.unavailable[f"nvlink.{link}"] = _why(exc)
            links.append(None)
    return links or None


def read_gpu(nvml: Any, index: int, xids: list[XidEvent] | None = None) -> GpuEvidence:
    """Identity and health of NVML device `index`; `xids` are the XID events seen while the probes ran."""
    n = nvml
    r = _Reader(n)
    h = r.get("handle", lambda: n.nvmlDeviceGetHandleByIndex(index))
    if h is None:  # nothing else can be read; the GPU stays in the evidence, unnamed, with the reason
        return GpuEvidence(
            index=index, health=Health(not_supported=r.not_supported, unavailable=r.unavailable, xid=list(xids or []))
        )

    def ecc(counter: int, error: int) -> int | None:
        return r.get(f"ecc.{counter}.{error}", lambda: int(n.nvmlDeviceGetTotalEccErrors(h, error, counter)))

    remap = r.get("remapped_rows", lambda: n.nvmlDeviceGetRemappedRows(h))  # (corr, unc, pending, failure)
    reasons_fn = (
        getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    power_mw = r.get("power", lambda: n.nvmlDeviceGetPowerUsage(h))
    limit_mw = r.get("power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
    mem = r.get("memory", lambda: n.nvmlDeviceGetMemoryInfo(h))
    pci = r.get("pci", lambda: n.nvmlDeviceGetPciInfo(h))
    uuid = r.get("uuid", lambda: _text(n.nvmlDeviceGetUUID(h)))
    product = r.get("name", lambda: _text(n.nvmlDeviceGetName(h)))
    serial = r.get("serial", lambda: _text(n.nvmlDeviceGetSerial(h)))
    vbios = r.get("vbios", lambda: _text(n.nvmlDeviceGetVbiosVersion(h)))
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
        nvlink_active=_nvlinks(r, n, h),
        not_supported=r.not_supported,
        unavailable=r.unavailable,
    )
    return GpuEvidence(
        index=index,
        uuid=uuid,
        serial=serial,
        pci_bus_id=_text(pci.busId) if pci is not None else None,
        product=product,
        memory_mib=int(mem.total) // 2**20 if mem is not None else None,
        vbios=vbios,
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


def throttle_counters(nvml: Any, index: int) -> dict[str, int] | None:
    """NVML's cumulative throttle counters (ns per reason) now; None where the driver keeps none.

    Read before and after a probe, their difference is the throttling that happened while the GPU was loaded;
    a counter the driver does not keep (its field's own return code is not success) is left out.
    """
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        values = nvml.nvmlDeviceGetFieldValues(h, list(THROTTLE_COUNTERS))
    except (nvml.NVMLError, AttributeError):
        return None
    out = {}
    for v in values:
        if int(v.nvmlReturn) == 0 and int(v.fieldId) in THROTTLE_COUNTERS:
            out[THROTTLE_COUNTERS[int(v.fieldId)]] = int(v.value.ullVal)
    return out or None


NvlinkCounts = tuple[dict[int, dict[str, int]], dict[str, str]]


def nvlink_error_counters(nvml: Any, index: int, links: int) -> NvlinkCounts | None:
    """NVML's cumulative NVLink error counters of each of the GPU's `links` links now: (link -> counter -> count,
    "link.counter" -> why NVML refused it); None when the GPU has no link or cannot be opened."""
    if links <= 0:
        return None
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError:
        return None
    counts: dict[int, dict[str, int]] = {}
    refused: dict[str, str] = {}
    for link in range(links):
        for name, constant in NVLINK_ERROR_COUNTERS.items():
            try:
                counts.setdefault(link, {})[name] = int(
                    nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, getattr(nvml, constant))
                )
            except nvml.NVMLError as exc:
                refused[f"{link}.{name}"] = _why(exc)
    return counts, refused


def nvlink_counters_of(nvml: Any, gpus: dict[int, GpuEvidence]) -> dict[int, tuple[float, NvlinkCounts]]:
    """Each GPU's NVLink error counters now (over the links its health reading found), with the time they were
    read: read before the first probe and after the last, their difference is what the links suffered under load."""
    if nvml is None:
        return {}
    out = {}
    for i, g in gpus.items():
        links = len(g.health.nvlink_active or []) if g.health is not None else 0
        counts = nvlink_error_counters(nvml, i, links)
        if counts is not None:
            out[i] = (time.monotonic(), counts)
    return out


def nvlink_errors_between(before: NvlinkCounts, after: NvlinkCounts, seconds: float) -> NvlinkErrors:
    """The errors each link counted between two readings; a counter refused in either reading is unavailable."""
    (c0, r0), (c1, r1) = before, after
    links = {
        link: {name: c1[link][name] - n for name, n in counters.items() if name in c1.get(link, {})}
        for link, counters in c0.items()
    }
    return NvlinkErrors(seconds=round(seconds, 3), links=links, unavailable={**r0, **r1})


def numa_cpus(nvml: Any, index: int) -> set[int] | None:
    """The CPUs of the GPU's NUMA node (NVML's CPU affinity) that this process may run on; None when unknown.

    The PCIe probe runs there: a host buffer on the far socket crosses the inter-socket link and makes a sound GPU
    look like a straggler.
    """
    allowed = os.sched_getaffinity(0)
    words = (max(allowed | {os.cpu_count() or 1}) + 64) // 64
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        scoped = getattr(nvml, "nvmlDeviceGetCpuAffinityWithinScope", None)
        if scoped is not None:
            mask = scoped(h, words, nvml.NVML_AFFINITY_SCOPE_NODE)
        else:
            mask = nvml.nvmlDeviceGetCpuAffinity(h, words)
    except nvml.NVMLError:
        return None
    cpus = {w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1}
    return (cpus & allowed) or None


def same_bus(a: str | None, b: str | None) -> bool:
    """Whether two PCI bus ids name the same device: NVML writes an 8-digit domain, CUDA a 4-digit one."""
    if not a or not b:
        return False

    def parts(bus: str) -> tuple[int, ...]:  # domain:bus:device.function, each hexadecimal
        return tuple(int(x, 16) for x in bus.strip().replace(".", ":").split(":"))

    try:
        return parts(a) == parts(b)
    except ValueError:
        return False


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
