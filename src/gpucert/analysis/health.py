"""Health rules over NVML readings: ECC, remapped rows, PCIe link, clock-event reasons, XID, temperature.

A reading the device did not report is None: the check could not be decided, which is an error, never a pass.
A reading out of its range (a negative counter, a bitmask with bits NVML does not define) is not believed: the
check errors and says which value.
"""

from __future__ import annotations

import math

from gpucert.baseline import GpuBaseline
from gpucert.checks import CheckStatus, Finding
from gpucert.evidence import Health

__all__ = ["CLOCK_EVENT_REASONS", "FAILING_CLOCK_EVENTS", "FAILING_UNDER_LOAD", "judge_health"]

# NVML nvmlClocksEventReason* bits (nvml.h)
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock_setting",
}
# the reasons that mean the GPU is held below its clocks by a fault (heat, power brake, an external signal)
FAILING_CLOCK_EVENTS = 0x8 | 0x20 | 0x40 | 0x80
# NVML defines its reasons in the low bits (0x1 .. 0x100 today); later drivers may add a few more, so only a value
# no driver can report (negative, or bits far above any reason) is refused
CLOCK_EVENT_BITS = 0xFFFF
PCIE_GENERATIONS = range(1, 7)
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
TEMPERATURE_RANGE_C = (-40.0, 150.0)  # what a GPU sensor can read on a running board


def _error(check: str, node: str, gpu: int, message: str) -> Finding:
    return Finding(check, CheckStatus.ERROR, node, gpu, f"{node}/gpu{gpu}: {message}")


def _negative(**counters: int | None) -> str | None:
    bad = [f"{name}={value}" for name, value in counters.items() if value is not None and value < 0]
    return f"counters out of range (a count cannot be negative): {', '.join(bad)}" if bad else None


def _f(
    check: str,
    ok: bool,
    node: str,
    gpu: int,
    message: str,
    observed: float | str | None = None,
    expected: float | str | None = None,
    unit: str | None = None,
) -> Finding:
    return Finding(
        check=check,
        status=CheckStatus.PASS if ok else CheckStatus.FAIL,
        node=node,
        gpu=gpu,
        message=f"{node}/gpu{gpu}: {message}",
        observed=observed,
        expected=expected,
        unit=unit,
    )


def ecc(h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    e = h.ecc
    if e.volatile_uncorrected is None or e.volatile_corrected is None:
        return _error("health.ecc", node, gpu, "the volatile ECC counters were not reported (is ECC disabled?)")
    bad = _negative(
        volatile_corrected=e.volatile_corrected,
        volatile_uncorrected=e.volatile_uncorrected,
        aggregate_corrected=e.aggregate_corrected,
        aggregate_uncorrected=e.aggregate_uncorrected,
    )
    if bad:
        return _error("health.ecc", node, gpu, f"ECC {bad}")
    unc = e.volatile_uncorrected or 0
    corr = e.volatile_corrected or 0
    limit = b.health.max_volatile_corrected_ecc
    msg = (
        f"ECC volatile uncorrected {unc}, corrected {corr} (limit {limit}); aggregate uncorrected "
        f"{e.aggregate_uncorrected}, corrected {e.aggregate_corrected}"
    )
    return _f("health.ecc", unc == 0 and corr <= limit, node, gpu, msg, observed=unc, expected=0, unit="errors")


def remapped_rows(h: Health, node: str, gpu: int) -> Finding:
    r = h.remapped_rows
    if r.failure is None or r.pending is None:
        return _error("health.remapped_rows", node, gpu, "row remapping state was not reported: cannot check it")
    bad = _negative(correctable=r.correctable, uncorrectable=r.uncorrectable)
    if bad:
        return _error("health.remapped_rows", node, gpu, f"remapped rows {bad}")
    problems = []
    if r.failure:
        problems.append("a row remapping FAILED (the GPU has no spare rows left for a bank: replace it)")
    if r.pending:
        problems.append("a row remapping is pending (reset the GPU to apply it)")
    msg = "; ".join(problems) or "no failed or pending row remapping"
    msg += f" (remapped rows: {r.correctable} correctable, {r.uncorrectable} uncorrectable)"
    return _f("health.remapped_rows", not problems, node, gpu, msg, observed=r.uncorrectable)


def pcie_link(h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    p = h.pcie
    if p.current_generation is None or p.current_width is None:
        return _error("health.pcie_link", node, gpu, "the PCIe link state was not reported: cannot check the link")
    if p.current_generation not in PCIE_GENERATIONS or p.current_width not in PCIE_WIDTHS:
        return _error(
            "health.pcie_link",
            node,
            gpu,
            f"PCIe link Gen{p.current_generation} x{p.current_width} is not a PCIe link state (out of range)",
        )
    want_gen, want_width = b.pcie.generation, b.pcie.width
    ok = p.current_generation >= want_gen and p.current_width >= want_width
    msg = (
        f"PCIe link Gen{p.current_generation} x{p.current_width}{' under load' if p.under_load else ''}, "
        f"expected Gen{want_gen} x{want_width} (device maximum Gen{p.max_generation} x{p.max_width})"
    )
    return _f(
        "health.pcie_link",
        ok,
        node,
        gpu,
        msg,
        observed=f"Gen{p.current_generation} x{p.current_width}",
        expected=f"Gen{want_gen} x{want_width}",
    )


# the cumulative NVML counters (read around each loaded probe) that mean a fault held the clocks down; a power cap
# under a full GEMM is the GPU working as designed
FAILING_UNDER_LOAD = ("hw_thermal", "hw_power_brake", "sw_thermal", "thermal", "reliability")


def _under_load(h: Health) -> str:
    """What held the clocks down while the probes loaded the GPU, probe by probe; empty when nothing did."""
    parts = []
    for w in h.throttle_under_load:
        held = {r: ns for r, ns in w.reasons_ns.items() if r in FAILING_UNDER_LOAD and ns > 0}
        if held:
            what = ", ".join(f"{r} {ns / 1e6:.3g} ms" for r, ns in sorted(held.items()))
            share = max(held.values()) / 1e9 / w.seconds if w.seconds > 0 else 0.0
            parts.append(f"{what} during {w.probe} ({share:.1%} of its {w.seconds:.3g} s)")
    return "; ".join(parts)


def throttle(h: Health, node: str, gpu: int) -> Finding:
    odd = [f"{w.probe}: {r}={ns}" for w in h.throttle_under_load for r, ns in w.reasons_ns.items() if ns < 0]
    if odd:
        return _error("health.throttle", node, gpu, f"clock-event counters out of range (negative): {', '.join(odd)}")
    loaded = _under_load(h)
    if loaded:
        msg = f"clocks held down under load: {loaded}"
        return _f("health.throttle", False, node, gpu, msg, observed="throttled under load", expected="none")
    if h.clock_event_reasons is None:
        if h.throttle_under_load:
            return _f("health.throttle", True, node, gpu, "no fault held the clocks down under load")
        return _error("health.throttle", node, gpu, "clock event reasons were not reported: cannot check throttling")
    if h.clock_event_reasons < 0 or h.clock_event_reasons & ~CLOCK_EVENT_BITS:
        return _error(
            "health.throttle",
            node,
            gpu,
            f"clock event reasons {h.clock_event_reasons} are out of range (NVML reports a bitmask of reasons below "
            f"0x{CLOCK_EVENT_BITS + 1:x}): the reading is not believed",
        )
    active = [name for bit, name in CLOCK_EVENT_REASONS.items() if h.clock_event_reasons & bit]
    bad = [name for bit, name in CLOCK_EVENT_REASONS.items() if h.clock_event_reasons & bit & FAILING_CLOCK_EVENTS]
    msg = (
        f"clocks held down by {', '.join(bad)}" if bad else "no fault is holding the clocks down"
    ) + f" (active reasons: {', '.join(active) or 'none'}; bitmask 0x{h.clock_event_reasons:x})"
    if h.throttle_under_load:
        msg += f"; none under load ({len(h.throttle_under_load)} probes watched)"
    return _f("health.throttle", not bad, node, gpu, msg, observed=", ".join(bad) or "none", expected="none")


def xid(h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    allowed = set(b.health.application_xids)
    odd = [e.code for e in h.xid if e.code <= 0]
    if odd:
        return _error("health.xid", node, gpu, f"XID codes out of range (XIDs are positive): {odd}")
    bad = [e for e in h.xid if e.code not in allowed]
    if bad:
        codes = ", ".join(f"{e.code}" + (f" ({e.text})" if e.text else "") for e in bad)
        msg = f"XID events that point at the GPU or its links: {codes}"
    else:
        msg = f"no hardware XID events ({len(h.xid)} application XIDs ignored)" if h.xid else "no XID events"
    return _f("health.xid", not bad, node, gpu, msg, observed=len(bad), expected=0, unit="events")


def temperature(h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    if h.temperature_c is None:
        return _error("health.temperature", node, gpu, "the temperature was not reported: cannot check it")
    low, high = TEMPERATURE_RANGE_C
    for name, value in (("temperature", h.temperature_c), ("slowdown threshold", h.slowdown_temperature_c)):
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            return _error(
                "health.temperature", node, gpu, f"{name} {value} °C is out of range ({low:.0f}..{high:.0f} °C)"
            )
    if h.slowdown_temperature_c is None:
        return _error(
            "health.temperature",
            node,
            gpu,
            f"temperature {h.temperature_c:.0f} °C, but no slowdown threshold was reported to compare it with",
        )
    limit = h.slowdown_temperature_c - b.health.temperature_margin_c
    msg = (
        f"temperature {h.temperature_c:.0f} °C, limit {limit:.0f} °C ({b.health.temperature_margin_c:.0f} °C "
        f"below the slowdown threshold {h.slowdown_temperature_c:.0f} °C)"
    )
    return _f(
        "health.temperature",
        h.temperature_c <= limit,
        node,
        gpu,
        msg,
        observed=h.temperature_c,
        expected=limit,
        unit="°C",
    )


def judge_health(check: str, h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    """The finding of health check `check` (health.ecc, health.pcie_link, ...) for one GPU."""
    match check:
        case "health.ecc":
            return ecc(h, b, node, gpu)
        case "health.remapped_rows":
            return remapped_rows(h, node, gpu)
        case "health.pcie_link":
            return pcie_link(h, b, node, gpu)
        case "health.throttle":
            return throttle(h, node, gpu)
        case "health.xid":
            return xid(h, b, node, gpu)
        case "health.temperature":
            return temperature(h, b, node, gpu)
    raise ValueError(f"unknown health check {check!r}")
