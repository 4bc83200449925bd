"""PCIe bandwidth per GPU: pinned host <-> device copies, one direction at a time, bytes counted once."""

from __future__ import annotations

from gpucert.evidence import Measurement
from gpucert.probes.device import Device
from gpucert.probes.hostmem import page_nodes
from gpucert.probes.timing import Budget, time_region

__all__ = ["DEFAULT_BYTES", "host_copy_bandwidth"]

DEFAULT_BYTES = 1 << 30  # 1 GiB: far past the size where DMA setup costs show


def host_copy_bandwidth(device: Device, direction: str, budget: Budget, nbytes: int = DEFAULT_BYTES) -> Measurement:
    host, dev = device.host_pinned(nbytes), device.empty(nbytes)
    host[:] = 7
    if direction == "h2d":
        seconds = time_region(device, lambda: device.h2d(dev, host), budget)
    elif direction == "d2h":
        seconds = time_region(device, lambda: device.d2h(host, dev), budget)
    else:
        raise ValueError(f"direction must be h2d or d2h, got {direction!r}")
    return Measurement(
        unit="GB/s",
        samples=[nbytes / t / 1e9 for t in seconds],  # each byte crosses the link once
        params={
            "bytes": nbytes,
            "pinned": True,
            "direction": direction,
            "device": device.name,
            "host_numa_nodes": page_nodes(host),  # where the host buffer's pages are, as the kernel reports them
        },
    )
