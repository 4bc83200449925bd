"""Find the evidence a check needs in a RunView, or the Finding that says why there is none to judge: a probe not
asked for, a node not measured (skipped, naming node.reachable or probe.preflight as the cause), a probe that failed
there (an error), a GPU the node does not show (skipped, naming inventory.gpus), a figure that cannot be believed
(an error). Every rule that judges evidence asks here, so a missing dependency is said the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from gpucert.evaluate.rules.performance import Sampled, evidence_problem, p2p_problems
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.measure.evidence import GpuEvidence, NodeEvidence
from gpucert.plan.checks import CheckKey, CheckStatus, Finding, family_of
from gpucert.spec.cluster import Probe

__all__ = [
    "because",
    "figure",
    "gpu_evidence",
    "node_evidence",
    "outside_pools",
    "skip",
    "told_figures",
    "unmeasured",
    "unmeasured_skip",
]

SKIP, ERROR = CheckStatus.SKIP, CheckStatus.ERROR
P2P = "p2p.bandwidth"  # a GPU's figure of its pairs: its node's matrix must hold them (rules/performance.py)


def because(check: str, node: str | None, gpu: int | None = None, detail: str | None = None) -> str:
    """The key a skip names as its cause."""
    return str(CheckKey(check, node, gpu, detail))


def skip(check: str, node: str | None, gpu: int | None, message: str, cause: str) -> Finding:
    return Finding(check, SKIP, node, gpu, message, cause=cause)


@functools.cache  # a few dozen check ids, asked by every check of a fleet
def _probe_of(check: str) -> Probe | None:
    """The probe whose evidence a check judges (None for handover.identity: the GPUs the node showed at all)."""
    return None if check == "handover.identity" else Probe(family_of(check).probe or check.split(".")[0])


def outside_pools(view: RunView, check: str, node: str, gpu: int | None = None) -> Finding | None:
    """A node in no pool or several has no expectations: its checks follow from pool.membership."""
    if view.pool_name_of(node) is not None:
        return None
    message = f"{node} is not in exactly one pool, so nothing is expected of it (see pool.membership)"
    return skip(check, node, gpu, message, because("pool.membership", node))


def unmeasured_skip(view: RunView, check: str, node: str, gpu: int | None = None) -> Finding:
    cause = view.unmeasured_cause(node)
    why = "no probe ran there: its preflight failed" if cause.check == "probe.preflight" else "was not measured"
    return skip(check, node, gpu, f"{node} {why} (see {cause.check})", str(cause))


def unmeasured(view: RunView) -> str | None:
    """The first inventory node that was not measured or showed no GPU, as a cause (a collective across nodes needs
    every node, and each with its GPUs). Once per run: every node's pairs check asks."""
    return view.once("locate.unmeasured", lambda: _unmeasured(view))


def _unmeasured(view: RunView) -> str | None:
    for node in view.inventory.names:
        ev = view.usable(node)
        if ev is None or not ev.collected:
            return str(view.unmeasured_cause(node))
        if not ev.gpus:
            return because("inventory.gpus", node)
    return None


def node_evidence(view: RunView, check: str, node: str) -> NodeEvidence | Finding:
    """The node's evidence for `check`: that of its probe, or (handover.identity) the GPUs the node showed."""
    probe = _probe_of(check)
    if probe is not None and probe not in view.spec.certify.probes:
        return Finding(check, SKIP, node, None, f"probe {probe.value!r} is not in certify.probes")
    ev = view.usable(node)
    if ev is None or not ev.collected:
        return unmeasured_skip(view, check, node)
    if probe is None:
        return ev
    err = ev.error_for(probe.value)
    if err is not None and err.unavailable:
        if probe in (Probe.P2P, Probe.NCCL) and len(ev.gpus) < 2 <= view.pools.gpus_per_node(node):
            message = f"{node} shows {len(ev.gpus)} GPU: nothing to measure between GPUs (see inventory.gpus)"
            return skip(check, node, None, message, because("inventory.gpus", node))
        message = f"{node}: the {probe.value} probe could not run there: {err.message}"
        return Finding(check, ERROR, node, None, message)
    if err is not None:
        return Finding(check, ERROR, node, None, f"{node}: the {probe.value} probe failed: {err.message}")
    return ev


def gpu_evidence(view: RunView, check: str, gpu: GpuSlot) -> GpuEvidence | Finding:
    """One GPU's evidence for `check`, or why there is none (its node's reason, or the GPU is not there)."""
    ev = node_evidence(view, check, gpu.node)
    if isinstance(ev, Finding):
        return dataclasses.replace(ev, node=gpu.node, gpu=gpu.index)
    g = view.gpu_of(gpu.node, gpu.index) if ev is view.usable(gpu.node) else ev.gpu(gpu.index)
    if g is None:
        message = f"{gpu!r} is not present: the node shows {len(ev.gpus)} GPUs (see inventory.gpus)"
        return skip(check, gpu.node, gpu.index, message, because("inventory.gpus", gpu.node))
    probe = _probe_of(check)
    err = ev.error_for(probe.value, gpu.index, check) if probe is not None else None
    if err is not None:  # this GPU's alone: the other GPUs of the node stand
        return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu!r}: the {err.probe} probe failed: {err.message}")
    return g


def figure(view: RunView, metric: str, node: str, gpu: int | None) -> Sampled | Finding:
    """The GPU's (or node's) figure for `metric`, or the Finding that says why there is none to judge."""
    told = told_figures(view, metric, node, (gpu,))[0] if gpu is not None else None  # P2P's too: a held node's
    if told is not None:
        return told
    ev = node_evidence(view, metric, node) if gpu is None else gpu_evidence(view, metric, GpuSlot(node, gpu))
    if isinstance(ev, Finding):
        return ev
    node_ev = view.evidence(node)
    assert node_ev is not None
    where = node if gpu is None else f"{node}/gpu{gpu}"
    unit = view.baseline_of(node).metrics[metric].unit
    g = ev if isinstance(ev, GpuEvidence) else None
    matrix = view.once(f"p2p.matrix/{node}", lambda: p2p_problems(node_ev)) if metric == "p2p.bandwidth" else None
    wrong = evidence_problem(node_ev, metric, unit, gpu, found=g, matrix=matrix)
    if wrong is not None:
        return Finding(metric, wrong[0], node, gpu, f"{where}: {wrong[1]}")
    found = view.believed(metric, node, gpu)
    if found is None:
        return Finding(metric, ERROR, node, gpu, f"{where}: the probe recorded no samples of {metric}")
    if not isinstance(found, Sampled):
        return Finding(metric, ERROR, node, gpu, f"{where}: the {metric} samples cannot be believed: {found}")
    return found


def told_figures(view: RunView, metric: str, node: str, gpus: Sequence[int]) -> list[Sampled | None]:
    """`figure`'s answer for each of the node's `gpus` where nothing can stand in its way, without asking each
    question (a re-test decides a carried node's GPUs of a metric at once): the GPU's measurement was believed (most
    of a fleet's, by its peers' index), on a node whose probes recorded no error at all, measured by a probe the spec
    asks for, in the baseline's unit; else None (ask `figure`'s questions one by one). The
    node's questions (its evidence, errors, probe, the baseline's unit) asked once, each GPU's (present, believed, in
    that unit) for each. P2P too, where `figure` would find its matrix sound for the GPU (the node's matrix looked
    over once, as `figure` does) and its unit the baseline's; the all-reduce (no GPU's) never."""
    none: list[Sampled | None] = [None] * len(gpus)
    if metric == "nccl.all_reduce":
        return none
    ev = view.usable(node)
    if ev is None or not ev.collected or ev.errors or _probe_of(metric) not in view.asked_probes:
        return none
    unit = view.baseline_of(node).metrics[metric].unit
    sound: dict[int, str | None] | None = None  # P2P: each GPU's matrix problem (None: none)
    if metric == P2P:
        held = view.held(node)  # a held node's, as its source found them (evaluate/held.py)
        if held is not None:
            if held.p2p is None or held.p2p[0] != unit:
                return none
            sound = held.p2p[1]
        else:
            if ev.p2p is None or ev.p2p.unit != unit:
                return none
            sound = view.once(f"p2p.matrix/{node}", lambda: p2p_problems(ev))  # figure's, under its name
    out: list[Sampled | None] = []
    for gpu in gpus:
        found = view.believed(metric, node, gpu) if view.gpu_of(node, gpu) is not None else None
        if sound is not None and (gpu not in sound or sound[gpu] is not None):
            found = None
        out.append(found if isinstance(found, Sampled) and found.unit == unit else None)
    return out
