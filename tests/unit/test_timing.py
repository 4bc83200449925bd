"""The timing protocol against a model of a GPU stream on a virtual clock: what the events bracket, to the digit."""

from __future__ import annotations

from typing import Any

import pytest

from gpucert.measure.probes import memory, pcie
from gpucert.measure.probes.device import NumpyDevice
from gpucert.measure.probes.timing import Budget

# ---- the timing protocol against a stream model: launch latency stays outside the timed region -----------------


class StreamModel(NumpyDevice):
    """A GPU stream on a virtual clock: each call costs the host `launch_s`; the device runs queued work in order,
    starting each piece when both it is free and the host has launched it; events stamp the device's time."""

    def __init__(self, launch_s: float, copy_s: float, fill_s: float) -> None:
        super().__init__(l2_bytes=1 << 10)
        self.launch_s, self.copy_s, self.fill_s = launch_s, copy_s, fill_s
        self.host = self.gpu = 0.0

    def _queue(self, seconds: float) -> float:
        self.host += self.launch_s
        self.gpu = max(self.gpu, self.host) + seconds
        return self.gpu

    def fill(self, buf: Any, value: float) -> None:
        self._queue(self.fill_s)

    def copy(self, dst: Any, src: Any) -> None:
        self._queue(self.copy_s)

    h2d = d2h = copy

    def record(self, event: Any) -> None:
        event[0] = self._queue(0.0)

    def elapsed_s(self, start: Any, end: Any) -> float:
        self.host = max(self.host, end[0])  # waiting for the end event
        return float(end[0] - start[0])

    def synchronize(self) -> None:
        self.host = max(self.host, self.gpu)


def test_large_copies_are_timed_without_their_launch() -> None:
    one_rep = Budget(0.0, 0.0, 5, 5)
    mem = memory.copy_bandwidth(StreamModel(launch_s=10e-6, copy_s=1e-3, fill_s=50e-6), one_rep, nbytes=1 << 20)
    assert mem.samples == [pytest.approx(2 * (1 << 20) / 1e-3 / 1e9)] * 5  # not 1.01 ms: the launch is hidden
    h2d = pcie.host_copy_bandwidth(StreamModel(10e-6, 4e-3, 50e-6), "h2d", one_rep, nbytes=1 << 20)
    assert h2d.samples == [pytest.approx((1 << 20) / 4e-3 / 1e9)] * 5
