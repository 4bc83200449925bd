"""The soak's criteria (issue 26): each round of a node against the baseline, its own history since its clock
started, and its peers under the same load. Each returns the Findings that did not pass (fail, or error where the
round cannot be judged: fail closed); a node with any leaves the soak. Pure: no I/O.

Check ids: `soak.round` (the round was not measured, or a GPU is missing), `soak.restarts`, `soak.xid`,
`soak.throttle`, `soak.ecc`, `soak.remapped_rows`, `soak.temperature`, `soak.drift.<metric>`,
`soak.baseline.<metric>`, `soak.dcgm.<test>` (the diagnostic in the rounds it is due; `soak.dcgm`: it did not run).
The all-reduce across the nodes (certify.multinode) is the fleet's: `judge_fabric`, with the same drift and
baseline criteria as `soak.drift.nccl.all_reduce.multinode` and `soak.baseline.nccl.all_reduce.multinode`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from statistics import median

from gpucert.evaluate.soak_history import ECC_WINDOW_H, GpuHistory, Medians, NodeHistory
from gpucert.evaluate.soak_round import MULTINODE, FabricRound, GpuRound, NodeRound
from gpucert.evaluate.trend import mann_kendall, p_decrease, theil_sen
from gpucert.evaluate.xids import HARDWARE_XIDS
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.baseline import Comparison, GpuBaseline, MetricBaseline
from gpucert.spec.soak import SoakCriteria

__all__ = ["Peers", "judge_fabric", "judge_round"]


@dataclass(frozen=True, slots=True)
class Peers:
    """What the node's pool measured in the same round: the median GPU temperature over its running nodes."""

    pool: str
    pool_temperature_c: float | None


def _at(r: NodeRound) -> str:
    return f"round {r.round} ({r.start_h:g}-{r.end_h:g} h)"


def _finding(
    check: str,
    r: NodeRound,
    gpu: int | None,
    message: str,
    *,
    error: bool = False,
    observed: float | str | None = None,
    expected: float | str | None = None,
    limit: float | str | None = None,
    unit: str | None = None,
) -> Finding:
    where = r.node if gpu is None else f"{r.node}/gpu{gpu}"
    return Finding(
        check=check,
        status=CheckStatus.ERROR if error else CheckStatus.FAIL,
        node=r.node,
        gpu=gpu,
        message=f"{where}: {_at(r)}: {message}",
        observed=observed,
        expected=expected,
        limit=limit,
        unit=unit,
    )


def _measured(r: NodeRound, expected_gpus: int) -> list[Finding]:
    if not r.collected:
        why = "; ".join(r.errors) or "no reason given"
        return [_finding("soak.round", r, None, f"the round was not measured: {why}", error=True)]
    if len(r.gpus) != expected_gpus:
        message = f"{len(r.gpus)} GPUs answered, the pool expects {expected_gpus}"
        return [_finding("soak.round", r, None, message, observed=len(r.gpus), expected=expected_gpus)]
    return []


def _board(r: NodeRound, g: GpuRound, h: GpuHistory) -> list[Finding]:
    """The board the clock started on is the one in the slot: a board changed mid-soak was not burned in, so the
    node fails the round (and `--rejoin` restarts its clock on the new board) rather than carrying its hours."""
    if h.board is None or g.board == h.board:
        return []
    (serial, uuid), (now_serial, now_uuid) = h.board, g.board
    message = (
        f"the board changed since the node's clock started: serial {serial} -> {now_serial}, UUID {uuid} -> "
        f"{now_uuid}; its hours were burned in on another board (repair, then --rejoin restarts its clock)"
    )
    return [_finding("soak.round", r, g.index, message, observed=now_serial, expected=serial)]


def _restarts(r: NodeRound) -> list[Finding]:
    if r.restarts == 0:
        return []
    message = f"the round's pod restarted {r.restarts} time(s): none is allowed (the round did not run as given)"
    return [_finding("soak.restarts", r, None, message, observed=r.restarts, expected=0, unit="restarts")]


def _xid(r: NodeRound, g: GpuRound, before: set[tuple[int, str]], b: GpuBaseline) -> list[Finding]:
    excused = set(b.health.application_xids)
    bad = [(c, t) for c, t in g.xids if (c, t) not in before and c not in excused]
    if any(c <= 0 for c, _ in bad):
        return [_finding("soak.xid", r, g.index, f"XID codes out of range: {[c for c, _ in bad]}", error=True)]
    if not bad:
        return []
    named = ", ".join(
        f"{c} ({HARDWARE_XIDS[c]})" if c in HARDWARE_XIDS else f"{c} (not one the baseline's applicationXids excuse)"
        for c, _ in bad
    )
    return [_finding("soak.xid", r, g.index, f"new XID: {named}", observed=len(bad), expected=0, unit="events")]


def _throttle(r: NodeRound, g: GpuRound, h: GpuHistory, allowances: dict[str, float]) -> list[Finding]:
    if g.active is None and h.loaded_s <= 0:
        return [_finding("soak.throttle", r, g.index, "clock-event reasons were not reported", error=True)]
    if any(ns < 0 for ns in h.throttle_ns.values()):
        return [_finding("soak.throttle", r, g.index, "clock-event counters out of range (negative)", error=True)]
    share = {k: ns / 1e9 / h.loaded_s for k, ns in h.throttle_ns.items()} if h.loaded_s > 0 else {}
    bad = []
    worst, limit = 0.0, 0.0
    for reason, allowed in allowances.items():
        if share.get(reason, 0.0) > allowed:
            bad.append(f"{reason} {share[reason]:.3%} of the loaded time over the soak (allowance {allowed:.3%})")
            worst, limit = max(worst, share[reason]), allowed
        if reason in (g.active or ()) and (allowed == 0 or reason not in share):
            bad.append(f"{reason} holding the clocks down after the round's load (allowance {allowed:.3%})")
            worst, limit = 1.0, allowed
    if not bad:
        return []
    message = f"clocks held down past the allowance over {h.loaded_s:.4g} s loaded: " + "; ".join(bad)
    return [_finding("soak.throttle", r, g.index, message, observed=round(worst, 6), limit=limit, unit="share")]


def _ecc(r: NodeRound, g: GpuRound, h: GpuHistory, limit: int) -> list[Finding]:
    if g.corrected is None or g.uncorrected is None:
        return [_finding("soak.ecc", r, g.index, "the volatile ECC counters were not reported", error=True)]
    readings = list(h.corrected)
    if any(b[1] < a[1] for a, b in itertools.pairwise(readings)) or (
        h.first_uncorrected is not None and g.uncorrected < h.first_uncorrected
    ):
        message = "an ECC counter went back (the driver reloaded or the GPU was reset during the soak): growth unknown"
        return [_finding("soak.ecc", r, g.index, message, error=True)]
    new_uncorrected = g.uncorrected - (h.first_uncorrected or 0)
    if new_uncorrected > 0:
        message = f"{new_uncorrected} new uncorrectable ECC error(s) during the soak (none is allowed)"
        return [_finding("soak.ecc", r, g.index, message, observed=new_uncorrected, expected=0, unit="uncorrected")]
    # growth over the last 24 h: from the last reading at or before the window's start (the clock's first reading
    # while the soak is younger than that)
    start = readings[0][1] if readings else g.corrected
    grown = g.corrected - start
    if grown > limit:
        since = readings[0][0] if readings else r.end_h
        message = (
            f"{grown} corrected ECC errors in the {r.end_h - since:g} h since {since:g} h, more than {limit} allowed "
            f"per {ECC_WINDOW_H:g} h"
        )
        return [_finding("soak.ecc", r, g.index, message, observed=grown, limit=limit, unit="corrected per 24 h")]
    return []


def _remapped(r: NodeRound, g: GpuRound, h: GpuHistory) -> list[Finding]:
    if g.remap_pending is None or g.remap_failure is None or g.remap_uncorrectable is None:
        return [_finding("soak.remapped_rows", r, g.index, "the row remapping state was not reported", error=True)]
    problems = []
    if g.remap_failure:
        problems.append("a row remapping failed (no spare rows left)")
    if g.remap_pending:
        problems.append("a row remapping is pending")
    grown = g.remap_uncorrectable - (h.first_remap_uncorrectable or 0)
    if grown > 0:
        problems.append(f"{grown} row(s) remapped for uncorrectable errors during the soak")
    if not problems:
        return []
    return [_finding("soak.remapped_rows", r, g.index, "; ".join(problems), observed=grown, expected=0)]


def _temperature(r: NodeRound, g: GpuRound, peers: Peers, spread: float) -> list[Finding]:
    t = g.temperature_c
    if t is None or not math.isfinite(t):
        return [_finding("soak.temperature", r, g.index, "the temperature was not reported", error=True)]
    others = [x.temperature_c for x in r.gpus if x.index != g.index and x.temperature_c is not None]
    node_median = median(others) if others else None
    worst: tuple[float, str] = (0.0, "")
    for name, ref in (("its node's peers", node_median), (f"pool {peers.pool}", peers.pool_temperature_c)):
        if ref is not None and abs(t - ref) > spread and abs(t - ref) > abs(worst[0]):
            worst = (t - ref, f"{t:.1f} °C, {abs(t - ref):.1f} °C {'above' if t > ref else 'below'} {name} ({ref:.1f})")
    if not worst[1]:
        return []
    message = f"{worst[1]} under the same load: more than the {spread:g} °C spread allowed"
    return [_finding("soak.temperature", r, g.index, message, observed=round(worst[0], 2), limit=spread, unit="°C")]


def _drift(r: NodeRound, gpu: int | None, block: Medians, measured: dict[str, float], c: SoakCriteria) -> list[Finding]:
    """Against the node's own first rounds: a round median below their median by more than maxDrift (a step), or
    a falling trend (Mann-Kendall, one-sided) whose Theil-Sen line loses more than maxDrift over the soak."""
    if set(measured) != set(block.names):
        missing = sorted(set(block.names) ^ set(measured))
        message = f"the round measured {', '.join(sorted(measured)) or 'nothing'}; the first rounds also {missing}"
        return [_finding("soak.round", r, gpu, f"not the same metrics as the node's first rounds: {message}")]
    out = []
    row = block.last
    for metric, value in zip(block.names, row, strict=True):
        if not math.isfinite(value) or value <= 0:
            out.append(
                _finding(f"soak.drift.{metric}", r, gpu, f"round median {value} is not a measurement", error=True)
            )
    reference = block.reference_of(c.reference_rounds)
    against = f"the node's first {c.reference_rounds} rounds"
    if reference is None:  # a round of the reference itself: held to the reference rounds before it
        reference = block.earlier()
        against = f"the node's {block.n - 1} earlier reference round{'s' if block.n > 2 else ''}"
    if out or reference is None:
        return out
    drops = 1 - row / reference
    for i, metric in enumerate(block.names):
        step = bool(drops[i] > c.max_drift)
        trend = (
            block.n >= c.reference_rounds + 3
            and p_decrease(block.n, int(block.s[i])) < c.trend_alpha
            # the least-squares line, O(n), before Theil-Sen's O(n^2): by chance 1% of a clean fleet's series pass
            # the p screen each round, and a line that loses less than half the limit is no drift to test further
            and block.least_squares_drop(metric, float(reference[i])) > c.max_drift / 2
        )
        if step or trend:
            out += _drifted(r, gpu, metric, block, (float(reference[i]), against), float(drops[i]), step, c)
    return out


def _drifted(
    r: NodeRound,
    gpu: int | None,
    metric: str,
    block: Medians,
    reference_against: tuple[float, str],
    drop: float,
    step: bool,
    c: SoakCriteria,
) -> list[Finding]:
    """The finding of a drift the screen flagged, with the full trend test's statistic (ties included);
    `reference_against`: the reference and what it is the median of."""
    reference, against = reference_against
    values, hours = block.column(metric), list(block.hours)
    mk = mann_kendall(values)
    slope = theil_sen(hours, values)
    span = hours[-1] - hours[0]
    fitted = -slope * span / reference
    statistic = (
        f"Mann-Kendall S={mk.s} over {len(values)} rounds, one-sided p={mk.p_decrease:.3g}"
        f"{'' if mk.exact else ' (normal)'}; Theil-Sen slope {slope:.4g}/h ({fitted:.2%} over {span:g} h)"
    )
    if not step and not (mk.p_decrease < c.trend_alpha and fitted > c.max_drift):
        return []
    what = (
        f"round median {values[-1]:.5g} is {drop:.2%} below {against} ({reference:.5g})"
        if step
        else f"falling: {fitted:.2%} over the soak by its trend"
    )
    message = f"{metric} {what}, more than {c.max_drift:.0%}; {statistic}"
    observed = round(drop if step else fitted, 5)
    return [_finding(f"soak.drift.{metric}", r, gpu, message, observed=observed, limit=c.max_drift, unit="drop")]


def _dcgm(r: NodeRound) -> list[Finding]:
    """The diagnostic's tests that did not pass, as soak.dcgm.<test> (soak.dcgm: it was due and did not run)."""
    out = []
    for check, gpu, status, message in r.dcgm or ():
        out.append(
            Finding(
                check=f"soak.{check}",
                status=CheckStatus(status),
                node=r.node,
                gpu=gpu if gpu >= 0 else None,
                message=f"{r.node}: {_at(r)}: {message}",
            )
        )
    return out


def _baseline(
    r: NodeRound, gpu: int | None, medians: dict[str, float], figures: Mapping[str, MetricBaseline]
) -> list[Finding]:
    out = []
    for metric, value in medians.items():
        m = figures.get(metric)
        if m is None:
            continue
        limit = m.threshold()
        below = value < limit if m.comparison is Comparison.MIN else value > limit
        if below or not math.isfinite(value):
            message = f"{metric} round median {value:.5g} {m.unit}, past the baseline's {limit:.5g} ({m.source})"
            out.append(_finding(f"soak.baseline.{metric}", r, gpu, message, observed=value, limit=limit, unit=m.unit))
    return out


def judge_round(
    history: NodeHistory,
    r: NodeRound,
    peers: Peers,
    baseline: GpuBaseline,
    criteria: SoakCriteria,
    expected_gpus: int,
) -> list[Finding]:
    """Every criterion over round `r` of a node, whose `history` has taken `r` in: the findings that did not pass
    (none: the round is clean)."""
    missing = _measured(r, expected_gpus)
    if missing:
        return missing
    limit = criteria.correctable_ecc_per_24h
    ecc_limit = limit if limit is not None else baseline.health.max_volatile_corrected_ecc
    out = _restarts(r) + _dcgm(r)
    allowances = baseline.health.allowances()
    for g in r.gpus:
        h = history.gpus[g.index]
        out += _board(r, g, h)
        out += _xid(r, g, history.prior_xids.get(g.index, set()), baseline)
        out += _throttle(r, g, h, allowances)
        out += _ecc(r, g, h, ecc_limit)
        out += _remapped(r, g, h)
        out += _temperature(r, g, peers, criteria.temperature_spread_c)
        if h.medians is not None:
            out += _drift(r, g.index, h.medians, g.medians, criteria)
        out += _baseline(r, g.index, g.medians, baseline.metrics)
    if history.node_medians is not None:
        out += _drift(r, None, history.node_medians, r.node_medians, criteria)
    out += _baseline(r, None, r.node_medians, baseline.metrics)
    return out


def judge_fabric(
    block: Medians, f: FabricRound, figure: MetricBaseline | None, criteria: SoakCriteria
) -> list[Finding]:
    """The all-reduce across the nodes in round `f`, whose medians `block` has taken in: below the figure (the
    pool's fabric.ncclBusbw, else the baseline's nccl.all_reduce.multinode), or drifting against its own first
    rounds, judged as a node's metric is. Fleet-level findings (node None): no one node is to blame."""
    r = NodeRound("fabric", f.round, f.start_h, f.end_h, f.median is not None, f.errors, 0, (), {})
    if f.median is None:
        out = _measured(r, 0)
    elif figure is None:
        out = [_finding("soak.round", r, None, f"no {MULTINODE} figure to judge the all-reduce by", error=True)]
    else:
        measured = {MULTINODE: f.median}
        out = _drift(r, None, block, measured, criteria) + _baseline(r, None, measured, {MULTINODE: figure})
    return [replace(x, node=None) for x in out]
