"""`health.nvlink`: the GPU's active NVLink links against its SKU's count, and the NVLink errors counted while the
probes loaded it against the baseline's limits. Pure.

A GPU with one link of 18 down still passes a P2P copy within tolerance (the traffic spreads over the others), so
the links are counted, not inferred from bandwidth. State that was not read, or every link inactive, cannot be
judged: an error naming what is missing, never a pass.
"""

from __future__ import annotations

import math

from gpucert.measure.evidence import Health, NvlinkErrors
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.baseline import GpuBaseline, NvlinkExpect

__all__ = ["nvlink"]

CHECK = "health.nvlink"
CRC_COUNTERS = ("crc_flit", "crc_data")
COUNTERS = ("replay", "recovery", *CRC_COUNTERS)


def _finding(
    status: CheckStatus, node: str, gpu: int, message: str, observed: int | None = None, expected: int | None = None
) -> Finding:
    unit = "links" if expected is not None else None
    return Finding(CHECK, status, node, gpu, f"{node}/gpu{gpu}: {message}", observed, expected, unit)


def _links(state: list[bool | None] | None, h: Health, want: int) -> tuple[str | None, str | None]:
    """(why the link state cannot be judged, what is wrong with it); each None when there is nothing to say."""
    if state is None:
        why = [k for k in h.not_supported if k.startswith("nvlink")] + [
            f"{k}: {v}" for k, v in h.unavailable.items() if k.startswith("nvlink")
        ]
        detail = f" (NVML: {'; '.join(why)})" if why else ""
        return f"the NVLink state was not reported{detail}: cannot count the links, {want} expected", None
    unknown = [i for i, s in enumerate(state) if s is None]
    if unknown:
        reasons = "; ".join(h.unavailable.get(f"nvlink.{i}", "refused") for i in unknown)
        return f"NVML did not give the state of link(s) {', '.join(map(str, unknown))} ({reasons})", None
    active = sum(1 for s in state if s)
    if active == 0:
        return (
            f"all {len(state)} NVLink links are inactive (NVLink down: is the fabric manager running and the GPU "
            f"trained into the NVSwitch fabric?), {want} expected active",
            None,
        )
    if active < want:
        down = [str(i) for i, s in enumerate(state) if not s]
        where = f"; inactive: link {', '.join(down)}" if down else ""
        return None, f"{active} of {want} NVLink links active{where}"
    return None, None


def _unsupported_crc(e: NvlinkErrors) -> set[str]:
    """The CRC counter this GPU does not keep: NVML answered NotSupported for it on every link read. Which of
    nvmlNvLinkErrorCounter_t's counters a driver keeps depends on the NVLink generation (NVLink 4 on Hopper
    protects data with ECC and nvidia-smi nvlink -e shows one CRC count there): a counter the GPU does not have
    cannot be an error on every GPU of the SKU. At most one of the two may be absent: with neither, CRC errors are
    not counted at all and the check cannot pass. Any other refusal (Unknown, GpuIsLost) still cannot be judged."""
    links = list(e.links)
    absent = {
        c
        for c in CRC_COUNTERS
        if links
        and all(
            c not in e.links[link] and e.unavailable.get(f"{link}.{c}", "").startswith("NVMLError_NotSupported")
            for link in links
        )
    }
    return absent if len(absent) < len(CRC_COUNTERS) else set()


def _errors(e: NvlinkErrors | None, x: NvlinkExpect, state: list[bool | None]) -> tuple[str | None, list[str], str]:
    """(why the errors cannot be judged, each limit exceeded, a summary of what was counted)."""
    if e is None:
        return "the NVLink error counters were not read around the load", [], ""
    odd = [f"link {link} {c}={n}" for link, cs in e.links.items() for c, n in cs.items() if n < 0]
    if not (math.isfinite(e.seconds) and e.seconds > 0):
        odd.append(f"window of {e.seconds} s")
    if odd:
        return f"NVLink error counts out of range (a counter went back, or no time passed): {', '.join(odd)}", [], ""
    unread = [str(i) for i, active in enumerate(state) if active and i not in e.links]
    if unread:
        which = "any active link" if not e.links else f"active link(s) {', '.join(unread)}"
        why = "; ".join(f"{k}: {v}" for k, v in sorted(e.unavailable.items())[:3])
        return f"NVML gave no NVLink error counters of {which} ({why or 'not read'})", [], ""
    absent = _unsupported_crc(e)
    missing = sorted({c for c in COUNTERS for link in e.links if c not in e.links[link] and c not in absent})
    if not e.links or missing:
        why = "; ".join(f"{k}: {v}" for k, v in sorted(e.unavailable.items())[:3])
        return f"NVML did not give the NVLink error counters {', '.join(missing) or 'of any link'} ({why})", [], ""
    total = {c: sum(cs.get(c, 0) for cs in e.links.values()) for c in COUNTERS}
    crc = total["crc_flit"] + total["crc_data"]
    rate = crc / e.seconds
    bad = []
    if rate > x.max_crc_errors_per_second:
        bad.append(f"{crc} CRC errors, {rate:.3g}/s (limit {x.max_crc_errors_per_second:g}/s)")
    if total["replay"] > x.max_replay_errors:
        bad.append(f"{total['replay']} replay errors (limit {x.max_replay_errors})")
    if total["recovery"] > x.max_recovery_errors:
        bad.append(f"{total['recovery']} recovery errors (limit {x.max_recovery_errors})")
    noisy = [f"link {link}" for link, cs in sorted(e.links.items()) if any(cs.values())]
    summary = (
        f"{crc} CRC, {total['replay']} replay, {total['recovery']} recovery errors over {e.seconds:.3g} s under load"
        + (f" (on {', '.join(noisy)})" if noisy else "")
        + "".join(f"; NVML keeps no {c} counter on this GPU" for c in sorted(absent))
    )
    return None, bad, summary


def nvlink(h: Health, b: GpuBaseline, node: str, gpu: int) -> Finding:
    x = b.nvlink
    if x is None:
        message = (
            f"the baseline {b.sku} states no NVLink expectation (key `nvlink`): add `nvlink: {{links: N, source: "
            "...}` with the SKU's link count (0 for a GPU without NVLink)"
        )
        return _finding(CheckStatus.ERROR, node, gpu, message)
    state = h.nvlink_active
    if x.links == 0:
        active = sum(1 for s in state or [] if s)
        message = f"no NVLink expected on {b.sku}; {active} active links reported"
        return _finding(CheckStatus.PASS, node, gpu, message, active, 0)
    unjudged, wrong = _links(state, h, x.links)
    active = sum(1 for s in state or [] if s)
    if unjudged:
        return _finding(CheckStatus.ERROR, node, gpu, unjudged, None, x.links)
    cannot, exceeded, summary = _errors(h.nvlink_errors, x, state or [])
    problems = [p for p in (wrong, *exceeded) if p]
    if problems:
        note = f"; {cannot}" if cannot else f"; {summary}" if summary and not exceeded else ""
        message = "; ".join(problems) + note
        return _finding(CheckStatus.FAIL, node, gpu, message, active, x.links)
    if cannot:
        return _finding(CheckStatus.ERROR, node, gpu, f"{active} of {x.links} links active, but {cannot}")
    message = f"{active} of {x.links} NVLink links active; {summary}"
    return _finding(CheckStatus.PASS, node, gpu, message, active, x.links)
