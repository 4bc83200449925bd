"""The node-level steps of a node's run, between its GPUs: the peer-to-peer copy matrix and the all-reduce sweep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpucert.measure.evidence import NcclEvidence, P2pEvidence, ProbeError
from gpucert.measure.probes import nccl, p2p
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.node_run import NodeRun
from gpucert.measure.probes.watchdog import within
from gpucert.spec.cluster import Probe

__all__ = ["between_gpus"]


def between_gpus(
    node: NodeRun, devices: dict[int, Device], count: int, on_gpu: bool
) -> tuple[P2pEvidence | None, NcclEvidence | None]:
    if count < 2:  # nothing to measure between GPUs: their checks skip with this reason
        for probe in sorted({Probe.P2P, Probe.NCCL} & node.probes):
            node.rec.error(
                ProbeError(
                    probe=probe.value,
                    unavailable=True,
                    message="this node has one GPU: nothing to measure between GPUs",
                )
            )
        return None, None
    p2p_ev = _peer_copies(node, devices) if Probe.P2P in node.probes else None
    nccl_ev = _all_reduce(node, devices, on_gpu) if Probe.NCCL in node.probes else None
    return p2p_ev, nccl_ev


def _peer_copies(node: NodeRun, devices: dict[int, Device]) -> P2pEvidence | None:
    def run_pair(fn: Callable[[], Any], what: str) -> Any:
        return within(node.limit_s, fn, what)

    def matrix() -> P2pEvidence:
        budget, nbytes = node.budget_for(Probe.P2P), node.plan.sizes.p2p_bytes
        return p2p.peer_matrix(devices, budget, nbytes, unusable=node.unusable, run=run_pair)

    p2p_ev = node.rec.attempt("p2p", lambda: node.loaded(sorted(devices), "p2p.bandwidth", matrix))
    if p2p_ev is not None:
        for pair in p2p_ev.pairs:
            if pair.error is not None:
                node.gpu_error(Probe.P2P, pair.src, f"peer copy GPU {pair.src} -> GPU {pair.dst}: {pair.error}")
        node.emit("p2p", p2p_ev)
    return p2p_ev


def _all_reduce(node: NodeRun, devices: dict[int, Device], on_gpu: bool) -> NcclEvidence | None:
    if node.unusable:
        why = "; ".join(f"GPU {i} {w}" for i, w in sorted(node.unusable.items()))
        node.rec.error(ProbeError(probe="nccl", message=f"the all-reduce needs every GPU of the node: {why}"))
        return None
    plan, every = node.plan, sorted(devices)
    ordered = [devices[i] for i in every]

    def sweep() -> NcclEvidence:
        coll = nccl.CupyNccl(ordered) if on_gpu else nccl.NumpyCollective(len(ordered))
        return nccl.all_reduce_sweep(coll, node.budget_for(Probe.NCCL), plan.sizes.nccl_sizes)

    b = plan.budget  # one watchdog margin for the communicators and the sweep, plus each size's budget
    limit = b.watchdog_s + len(plan.sizes.nccl_sizes) * (b.warmup_s + b.measure_s)
    nccl_ev = node.rec.attempt(
        "nccl", lambda: node.loaded(every, "nccl.all_reduce", lambda: within(limit, sweep, "the all-reduce"))
    )
    if nccl_ev is not None:
        node.emit("nccl", nccl_ev)
    return nccl_ev
