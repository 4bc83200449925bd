"""Health rules over NVML readings: ECC, remapped rows, PCIe link, clock-event reasons, XID, temperature (NVLink:
`analysis.nvlink`).

A reading the device did not report is None: the check could not be decided, which is an error, never a pass.
A reading out of its range (a negative counter, a bitmask with bits NVML does not define) is not believed: the
check errors and says which value.
"""

from __future__ import annotations

import math

from gpucert.evaluate.locate import gpu_evidence
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.nvlink import nvlink
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.measure.evidence import Health
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.spec.baseline import GpuBaseline

__all__ = ["CLOCK_EVENT_REASONS", "decide_health", "judge_health"]

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
    # the deprecated nvmlClocksThrottleReason* set names two more bits (nvidia-ml-py 13, pynvml.py)
    0x200: "board_limit",
    0x400: "reliability",
}
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
    lifetime = f"lifetime (aggregate): {e.aggregate_uncorrected} uncorrected, {e.aggregate_corrected} corrected"
    if unc:  # the fault: memory returned data ECC could not correct, since the driver loaded
        msg = (
            f"{unc} uncorrected ECC error{'s' if unc != 1 else ''} since the driver loaded (none is allowed); "
            f"{corr} corrected (at most {limit}); {lifetime}"
        )
        return _f("health.ecc", False, node, gpu, msg, observed=unc, expected=0, unit="uncorrected ECC errors")
    if corr > limit:
        msg = f"{corr} corrected ECC errors since the driver loaded, more than the {limit} allowed; {lifetime}"
        return _f("health.ecc", False, node, gpu, msg, observed=corr, expected=limit, unit="corrected ECC errors")
    msg = f"no uncorrected ECC error since the driver loaded; {corr} corrected (at most {limit}); {lifetime}"
    return _f("health.ecc", True, node, gpu, msg, observed=unc, expected=0, unit="uncorrected ECC errors")


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
    if not ok and not p.under_load:
        return _error(
            "health.pcie_link",
            node,
            gpu,
            f"PCIe link Gen{p.current_generation} x{p.current_width} read at idle, below the expected Gen{want_gen} "
            f"x{want_width}: an idle link trains down on purpose, so only a reading under load can judge it, and "
            "none was recorded (see the health probe's errors)",
        )
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


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _counted(h: Health) -> tuple[float, dict[str, int], dict[str, str]]:
    """The loaded time, and per reason the nanoseconds it held the clocks down in it and the probe where it held
    them longest (NVML's cumulative counters, read around each loaded probe)."""
    total: dict[str, int] = {}
    worst: dict[str, tuple[int, str]] = {}
    for w in h.throttle_under_load:
        for reason, ns in w.reasons_ns.items():
            total[reason] = total.get(reason, 0) + ns
            if ns > worst.get(reason, (0, ""))[0]:
                worst[reason] = (ns, w.probe)
    return sum(w.seconds for w in h.throttle_under_load), total, {r: p for r, (_, p) in worst.items()}


def _reading(h: Health, node: str, gpu: int) -> Finding | list[str]:
    """The reasons active at the reading after the load, or the error that says why the reading is not believed."""
    if h.clock_event_reasons is None:
        return []
    if h.clock_event_reasons < 0 or h.clock_event_reasons & ~CLOCK_EVENT_BITS:
        return _error(
            "health.throttle",
            node,
            gpu,
            f"clock event reasons {h.clock_event_reasons} are out of range (NVML reports a bitmask of reasons below "
            f"0x{CLOCK_EVENT_BITS + 1:x}): the reading is not believed",
        )
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if h.clock_event_reasons & bit]


def throttle(h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    """Each clock-event reason's share of the loaded time against the baseline's allowance for it.

    The share comes from NVML's counters read around each loaded probe; a reason NVML keeps no counter of (HW
    slowdown) or a GPU without counters is judged by the reasons active at the reading after the load: one the
    allowance cannot be measured for is a failure while it holds the clocks down."""
    odd = [f"{w.probe}: {r}={ns}" for w in h.throttle_under_load for r, ns in w.reasons_ns.items() if ns < 0]
    odd += [
        f"{w.probe}: {w.seconds} s" for w in h.throttle_under_load if not (math.isfinite(w.seconds) and w.seconds >= 0)
    ]
    if odd:
        return _error("health.throttle", node, gpu, f"clock-event counters out of range: {', '.join(odd)}")
    active = _reading(h, node, gpu)
    if isinstance(active, Finding):
        return active
    seconds, counted, during = _counted(h)
    if h.clock_event_reasons is None and seconds <= 0:
        return _error("health.throttle", node, gpu, "clock event reasons were not reported: cannot check throttling")
    share = {r: ns / 1e9 / seconds for r, ns in counted.items()} if seconds > 0 else {}
    allowances = b.health.allowances()
    bad: list[str] = []
    # the reason the finding quotes: the one furthest past its allowance, else the largest share seen
    worst: tuple[bool, float, float, str] = (False, -1.0, 0.0, "none")
    for reason, allowed in allowances.items():
        if reason in share:
            over = share[reason] > allowed
            if over:
                where = f"; longest during {during[reason]}" if reason in during else ""
                bad.append(f"{reason} {_pct(share[reason])} of the loaded time (allowance {_pct(allowed)}{where})")
            worst = max(worst, (over, share[reason] - allowed if over else share[reason], share[reason], reason))
        if reason in active and (allowed == 0 or reason not in share):
            bad.append(f"{reason} holding the clocks down at the reading after the load (allowance {_pct(allowed)})")
            worst = max(worst, (True, 1.0, 1.0, reason))
    seen = [f"{r} {_pct(f)}" for r, f in sorted(share.items()) if f > 0]
    loaded = (
        f"over {seconds:.3g} s loaded in {len(h.throttle_under_load)} probes: "
        + (", ".join(seen) if seen else "no counted reason held the clocks down (NVML counts no HW slowdown)")
        if h.throttle_under_load
        else "no throttle counters read under load"
    )
    uncounted = [r for r in allowances if r not in share and r != "hw_slowdown"]  # NVML has no HW slowdown counter
    if h.throttle_under_load and uncounted:
        loaded += f"; this driver keeps no counter of {', '.join(uncounted)}"
    bitmask = f"0x{h.clock_event_reasons:x}" if h.clock_event_reasons is not None else "not reported"
    msg = ("clocks held down past the allowance: " + "; ".join(bad) if bad else "within every reason's allowance") + (
        f" ({loaded}; active at the last reading: {', '.join(active) or 'none'}, bitmask {bitmask})"
    )
    _, _, observed, reason = worst
    return Finding(
        check="health.throttle",
        status=CheckStatus.FAIL if bad else CheckStatus.PASS,
        node=node,
        gpu=gpu,
        message=f"{node}/gpu{gpu}: {msg}",
        observed=round(observed, 6) if reason != "none" else 0.0,
        limit=allowances.get(reason),
        unit=f"share of loaded time ({reason})" if reason != "none" else "share of loaded time",
    )


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
            return throttle(h, b, node, gpu)
        case "health.xid":
            return xid(h, b, node, gpu)
        case "health.temperature":
            return temperature(h, b, node, gpu)
        case "health.nvlink":
            return nvlink(h, b, node, gpu)
    raise ValueError(f"unknown health check {check!r}")


def decide_health(view: RunView, key: CheckKey) -> Finding:
    """A health check of one GPU, from its health probe's readings."""
    if key.node is None or key.gpu is None:
        raise no_rule(key)
    slot = GpuSlot(key.node, key.gpu)
    g = gpu_evidence(view, key.check, slot)
    if isinstance(g, Finding):
        return g
    if g.health is None:
        return Finding(key.check, CheckStatus.ERROR, key.node, key.gpu, f"{slot!r}: the health probe recorded nothing")
    return judge_health(key.check, g.health, view.baseline_of(key.node), key.node, key.gpu)
