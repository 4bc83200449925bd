"""One run of a probe plan on one node: what was learned so far (identities, measurements, throttle windows, GPUs
left out), and how each probe is run under the watchdog and recorded (emitted as soon as it exists)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpucert.errors import GpucertError
from gpucert.measure.evidence import GpuEvidence, Measurement, ProbeError, ThrottleWindow
from gpucert.measure.probes import health as nvml_probe
from gpucert.measure.probes.probe_plan import ProbePlan
from gpucert.measure.probes.stream import Emit
from gpucert.measure.probes.timing import Budget
from gpucert.measure.probes.watchdog import ProbeTimeout, within
from gpucert.spec.cluster import Probe

__all__ = ["NodeRun", "Recorder", "why"]

T = TypeVar("T")


def why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, (ProbeTimeout, GpucertError)) else f"{type(exc).__name__}: {exc}"


class Recorder:
    def __init__(self, emit: Emit) -> None:
        self.errors: list[ProbeError] = []
        self.emit = emit

    def error(self, err: ProbeError) -> None:
        self.errors.append(err)
        self.emit(f"error/{len(self.errors)}", err)

    def attempt(self, probe: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except FileNotFoundError as exc:
            self.error(ProbeError(probe=probe, message=str(exc), unavailable=True))
        except Exception as exc:
            self.error(ProbeError(probe=probe, message=why(exc)))
        return None


class NodeRun:
    """One run of a plan: what was learned so far, and how each probe is run and recorded."""

    def __init__(self, plan: ProbePlan, nvml: Any, emit: Emit) -> None:
        self.plan, self.nvml, self.emit = plan, nvml, emit
        b = plan.budget
        self.budget = Budget(b.warmup_s, b.measure_s, b.min_reps, b.max_reps)
        self.budgets = {
            probe: Budget(b.warmup_s, b.measure_s, max(b.min_reps, n), max(b.max_reps, n))
            for probe, n in plan.samples.items()
        }
        self.limit_s = b.watchdog_s + b.warmup_s + b.measure_s  # one timed region, and the work around it
        self.rec = Recorder(emit)
        self.probes = set(plan.probes)
        self.gpus: dict[int, GpuEvidence] = {}
        self.measured: dict[int, dict[str, Measurement]] = {}
        self.windows: dict[int, list[ThrottleWindow]] = {}
        self.unusable: dict[int, str] = {}  # GPU -> why no more probes run on it

    def budget_for(self, probe: Probe) -> Budget:
        """The timing budget of one probe: the plan's, with at least the repetitions the spec asks of it."""
        return self.budgets.get(probe, self.budget)

    def loaded(self, indices: list[int], label: str, fn: Callable[[], T]) -> T:
        """`fn()` with NVML's throttle counters of `indices` read before and after: the throttling under load."""
        before = {i: nvml_probe.throttle_counters(self.nvml, i) for i in indices} if self.nvml else {}
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            seconds = time.perf_counter() - t0
            for i, start in before.items():
                end = nvml_probe.throttle_counters(self.nvml, i)
                if start is not None and end is not None:
                    delta = {k: max(0, end[k] - start[k]) for k in end if k in start}
                    self.windows.setdefault(i, []).append(
                        ThrottleWindow(probe=label, seconds=seconds, reasons_ns=delta)
                    )

    def gpu_error(self, probe: Probe, index: int, message: str, metric: str | None = None) -> None:
        self.rec.error(ProbeError(probe=probe.value, gpu=index, metric=metric, message=message))

    def measure(self, index: int, probe: Probe, metric: str, fn: Callable[[], Measurement]) -> None:
        """One measurement of one GPU, under the watchdog; a hang leaves the GPU out of what follows."""
        if index in self.unusable:
            self.gpu_error(probe, index, f"GPU {index} {self.unusable[index]}: {metric} was not run", metric)
            return
        try:
            m = self.loaded([index], metric, lambda: within(self.limit_s, fn, f"{metric} on GPU {index}"))
        except ProbeTimeout as exc:
            self.unusable[index] = f"hung in {metric}"
            self.gpu_error(probe, index, str(exc), metric)
            return
        except Exception as exc:
            self.gpu_error(probe, index, f"GPU {index}: {metric}: {why(exc)}", metric)
            return
        self.record(index, metric, m)

    def record(self, index: int, metric: str, m: Measurement) -> None:
        self.measured.setdefault(index, {})[metric] = m
        self.emit(f"gpu/{index}/{metric}", m)
