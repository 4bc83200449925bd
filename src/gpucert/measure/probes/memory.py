"""HBM bandwidth: device-to-device copy over buffers several times the L2, counted as read + write bytes."""

from __future__ import annotations

from gpucert.measure.evidence import Measurement
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.timing import Budget, time_region

__all__ = ["DEFAULT_BYTES", "copy_bandwidth"]

DEFAULT_BYTES = 2 << 30  # 2 GiB per buffer: ~40x an H100's 50 MiB L2


def copy_bandwidth(device: Device, budget: Budget, nbytes: int = DEFAULT_BYTES) -> Measurement:
    src, dst = device.empty(nbytes), device.empty(nbytes)
    device.fill(src, 1)
    moved = 2 * nbytes  # every byte is read once and written once
    seconds = time_region(device, lambda: device.copy(dst, src), budget)
    return Measurement(
        unit="GB/s",
        samples=[moved / t / 1e9 for t in seconds],
        params={"bytes": nbytes, "bytes_moved_per_rep": moved, "l2_bytes": device.l2_bytes, "device": device.name},
    )
