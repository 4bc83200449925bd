"""PCIe bandwidth per GPU: pinned host <-> device copies, one direction at a time, bytes counted once.

Each GPU alone (`host_copy_bandwidth`, the judged `pcie.h2d` / `pcie.d2h`), and every GPU at once
(`all_at_once`, recorded beside them as `pcie.h2d.concurrent` / `pcie.d2h.concurrent`): GPUs that share a PCIe
switch share its uplink, and a down-trained uplink only shows when they all copy together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from gpucert.measure.evidence import Measurement
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.hostmem import page_nodes
from gpucert.measure.probes.timing import Budget, time_region, time_together

__all__ = ["DEFAULT_BYTES", "all_at_once", "host_copy_bandwidth"]

T = TypeVar("T")

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


def _here(index: int, fn: Callable[[], T]) -> T:
    return fn()


def all_at_once(
    devices: Mapping[int, Device],
    direction: str,
    budget: Budget,
    nbytes: int = DEFAULT_BYTES,
    place: Callable[[int, Callable[[], Any]], Any] = _here,
) -> dict[int, Measurement]:
    """Every GPU copying to (h2d) or from (d2h) its own host buffer at the same time; each GPU's bandwidth under
    the others' load. `place(index, fn)` runs `fn` where GPU `index`'s host buffer belongs (its NUMA node)."""
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be h2d or d2h, got {direction!r}")
    order = sorted(devices)
    hosts = {i: place(i, partial(devices[i].host_pinned, nbytes)) for i in order}
    bufs = {i: devices[i].empty(nbytes) for i in order}
    fns = [
        partial(devices[i].h2d, bufs[i], hosts[i]) if direction == "h2d" else partial(devices[i].d2h, hosts[i], bufs[i])
        for i in order
    ]
    seconds = time_together([devices[i] for i in order], fns, budget)
    return {
        i: Measurement(
            unit="GB/s",
            samples=[nbytes / t / 1e9 for t in seconds[k]],
            params={
                "bytes": nbytes,
                "pinned": True,
                "direction": direction,
                "device": devices[i].name,
                "gpus_at_once": len(order),
                "host_numa_nodes": page_nodes(hosts[i]),
            },
        )
        for k, i in enumerate(order)
    }
