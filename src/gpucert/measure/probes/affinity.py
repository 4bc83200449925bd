"""Running a probe on the CPUs of a GPU's NUMA node: the calling thread pinned for the duration of one call."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

__all__ = ["cpu_list", "pinned"]

T = TypeVar("T")


def cpu_list(cpus: set[int]) -> str:
    """0-55,112-167: the form taskset and /sys print."""
    out, run = [], sorted(cpus)
    start = prev = run[0]
    for c in [*run[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        if c is not None:
            start = prev = c
    return ",".join(out)


def pinned(cpus: set[int] | None, fn: Callable[[], T]) -> T:
    """`fn()` on the calling thread pinned to `cpus` (the watchdog's thread: the pin goes with it)."""
    if not cpus:
        return fn()
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return fn()
    finally:
        os.sched_setaffinity(0, before)
