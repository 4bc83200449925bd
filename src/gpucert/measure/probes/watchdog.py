"""A deadline for each probe: the probe runs in a thread that can be abandoned.

A hung GPU or NCCL call never returns, and nothing can interrupt it from Python; left alone it would hold the
probe pod until the Job's deadline killed it, and everything measured would go with it. Here the call runs in a
daemon thread; past its deadline the runner records the probe's error and goes on, and the process leaves with
`os._exit` (see `__main__`) rather than wait for a thread, or a CUDA context, that will never finish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["ProbeTimeout", "abandoned", "within"]

T = TypeVar("T")
_abandoned: list[str] = []


class ProbeTimeout(TimeoutError):
    """The probe did not finish in time; its thread was abandoned."""


def abandoned() -> list[str]:
    """What this process gave up waiting for (the threads may still be running)."""
    return list(_abandoned)


def within(seconds: float, fn: Callable[[], T], what: str) -> T:
    """`fn()`, or ProbeTimeout once `seconds` pass; its own exception is raised as if called directly."""
    box: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=run, name=f"gpucert probe: {what}", daemon=True)
    worker.start()
    if not done.wait(seconds):
        _abandoned.append(what)
        raise ProbeTimeout(f"{what} did not finish in {seconds:g} s (a hung GPU or NCCL call); abandoned")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
