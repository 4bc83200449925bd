"""The one timing protocol every probe uses (after triton.testing.do_bench and nvbandwidth).

Warm-up and repetitions are time budgets, not counts; device events bracket only the timed region; the L2 is
flushed between repetitions (a write over twice its size), and that write is queued ahead of the start event, so
the device is still busy with it while the host records the event and launches the work: the launch latency
(microseconds, 1-3% of a large copy) stays outside the timed region. Every repetition's time is returned, and the
probes turn each into a sample: statistics happen at evaluate time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Budget", "Clock", "time_region", "time_together"]


class Clock(Protocol):
    """What the timing protocol needs of a device: events, a barrier, and scratch memory to flush the L2."""

    name: str
    l2_bytes: int

    def empty(self, nbytes: int) -> Any: ...
    def fill(self, buf: Any, value: float) -> None: ...
    def event(self) -> Any: ...
    def record(self, event: Any) -> None: ...
    def elapsed_s(self, start: Any, end: Any) -> float: ...
    def synchronize(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Budget:
    warmup_s: float = 0.2
    measure_s: float = 1.0
    min_reps: int = 5
    max_reps: int = 100


def time_region(device: Clock, fn: Callable[[], None], budget: Budget) -> list[float]:
    """Seconds per repetition of `fn` on `device`: warm up for a while, then time each repetition alone.

    A clock without an L2 (`l2_bytes` 0: the host clock of a collective, which synchronises every device before
    each event) gets no lead work.
    """
    scratch: Any = device.empty(2 * device.l2_bytes) if device.l2_bytes else None
    deadline = time.perf_counter() + budget.warmup_s
    fn()
    device.synchronize()
    while time.perf_counter() < deadline:
        fn()
        device.synchronize()
    samples: list[float] = []
    start, end = device.event(), device.event()
    deadline = time.perf_counter() + budget.measure_s
    while len(samples) < budget.max_reps and (len(samples) < budget.min_reps or time.perf_counter() < deadline):
        if scratch is not None:
            # evicts the previous repetition's lines from the L2, and keeps the device busy past the start event
            device.fill(scratch, len(samples))
        device.record(start)
        fn()
        device.record(end)
        samples.append(device.elapsed_s(start, end))
    return samples


def time_together(clocks: Sequence[Clock], fns: Sequence[Callable[[], None]], budget: Budget) -> list[list[float]]:
    """Seconds per repetition of each `fns[k]` on `clocks[k]`, all launched together in every repetition.

    The transfers overlap on the devices (each launch returns at once), so each device's own event pair times its
    own work while the others' runs: what a shared link gives each of its users. Warm-up as in `time_region`; no
    L2 flush (the transfers these time are host or peer copies far larger than the L2).
    """

    def all_of_them() -> None:
        for fn in fns:
            fn()
        for clock in clocks:
            clock.synchronize()

    deadline = time.perf_counter() + budget.warmup_s
    all_of_them()
    while time.perf_counter() < deadline:
        all_of_them()
    pairs = [(c.event(), c.event()) for c in clocks]
    samples: list[list[float]] = [[] for _ in clocks]
    deadline = time.perf_counter() + budget.measure_s
    while len(samples[0]) < budget.max_reps and (len(samples[0]) < budget.min_reps or time.perf_counter() < deadline):
        for clock, fn, (start, end) in zip(clocks, fns, pairs, strict=True):
            clock.record(start)
            fn()
            clock.record(end)
        for k, (clock, (start, end)) in enumerate(zip(clocks, pairs, strict=True)):
            samples[k].append(clock.elapsed_s(start, end))
    return samples
