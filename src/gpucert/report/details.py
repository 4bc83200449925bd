"""What the reports show beside a verdict: the evidence behind each failure, the P2P matrix and the all-reduce
curve of a node. Reads the run through the Evaluation; decides nothing."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpucert.evaluate.stats import median
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import FABRIC_METRICS, GPU_METRICS, Family, Finding, family_of
from gpucert.plan.domains import ring_prefix
from gpucert.spec.kubernetes import topology_key

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation

__all__ = ["evidence_for", "nccl_curve", "p2p_matrix", "recertify_summary"]


def p2p_matrix(ev: Evaluation, node: str) -> list[list[float | None]] | None:
    """Median peer copy bandwidth per (source, destination) pair of one node; None on the diagonal."""
    e = ev.usable(node)
    if e is None or e.p2p is None or not e.gpus:
        return None
    n = len(e.gpus)
    m: list[list[float | None]] = [[None] * n for _ in range(n)]
    for p in e.p2p.pairs:
        finite = [x for x in p.samples if math.isfinite(x)]
        if finite and 0 <= p.src < n and 0 <= p.dst < n:
            m[p.src][p.dst] = median(finite)
    return m


def nccl_curve(ev: Evaluation, node: str) -> list[tuple[int, float]]:
    """(message size, median bus bandwidth) over the node's all-reduce sweep."""
    e = ev.usable(node)
    if e is None or e.nccl is None:
        return []
    curve = [(p.size_bytes, [x for x in p.busbw if math.isfinite(x)]) for p in e.nccl.points]
    return [(size, median(busbw)) for size, busbw in curve if busbw and size > 0]


def evidence_for(ev: Evaluation, finding: Finding) -> dict[str, object] | None:
    """The evidence behind a finding, as JSON-ready data, for the reports' failure details."""
    node = finding.node
    if finding.check.removeprefix("straggler.") in FABRIC_METRICS or node is None:
        return _beyond_a_node(ev, finding)
    family = family_of(finding.check)
    if family in (Family.STACK, Family.INVENTORY, Family.NODE):
        ns = ev.stack.nodes.get(node)
        return ns.model_dump(mode="json") if ns is not None else None
    e = ev.usable(node)
    if e is None:
        return {"unreadable": ev.evidence_problem(node)}
    return _measured(e, finding, family)


def _beyond_a_node(ev: Evaluation, finding: Finding) -> dict[str, object] | None:
    """A fabric finding's readings (a node pair's, for a straggler), a gate's inputs, or the fleet's nodes."""
    if finding.check in FABRIC_METRICS:
        several, key = len(ev.spec.pools) > 1, topology_key(ev.spec.target)
        rings = {ring_prefix(p if several else None, None, key): f for p, f in ev.fabrics.items()}
        rings |= {ring_prefix(p if several else None, d, key): f for (p, d), f in ev.domain_fabrics.items()}
        # the finding's ring: the one its message begins with (the one pool's own: "")
        ring = max((r for r in rings if finding.message.startswith(r)), key=len, default=None)
        return rings[ring].model_dump(mode="json") if ring is not None else None
    if finding.check.removeprefix("straggler.") in FABRIC_METRICS:
        # each of its pairs' figure as judged, or why it has none (their samples: evidence/multinode/pairs-*.json)
        index = ev.pairs_index
        mine = [p for p in (index.pairs if index is not None else []) if finding.node in p.nodes]
        return {"pairs": [{"nodes": list(p.nodes), "busbw": p.busbw, "unit": "GB/s", "error": p.why} for p in mine]}
    if ev.inventory.target == "static":
        return {"gate": ev.folder.read_gate(), "spec": ev.spec.metadata.name}  # what the gate was given
    return {"nodes": ev.inventory.names}


def _measured(e: NodeEvidence, finding: Finding, family: Family) -> dict[str, object] | None:
    """What the node's evidence says for the finding: the sweep, the pairs, the GPUs' samples, a GPU's health,
    DCGM's result, or the GPU's measurement."""
    metric = finding.check.removeprefix("straggler.").removeprefix("stability.").removeprefix("handover.")
    if metric.startswith("nccl."):
        return e.nccl.model_dump(mode="json") if e.nccl else None
    if metric.startswith("p2p."):
        pairs = [p.model_dump(mode="json") for p in (e.p2p.pairs if e.p2p else []) if finding.gpu in (p.src, p.dst)]
        return {"unit": e.p2p.unit if e.p2p else None, "pairs": pairs}
    if finding.gpu is None and metric in GPU_METRICS:  # the node as a whole: each of its GPUs' samples
        return {"gpus": {str(g.index): m.model_dump(mode="json") for g in e.gpus if (m := g.measurements.get(metric))}}
    gpu = e.gpu(finding.gpu) if finding.gpu is not None else None
    if gpu is None:
        return {"errors": [x.model_dump(mode="json") for x in e.errors]}
    if family is Family.HEALTH:
        return gpu.health.model_dump(mode="json") if gpu.health else None
    if family is Family.DCGM and e.dcgm is not None:
        test = e.dcgm.results.get(finding.check.removeprefix("dcgm."))
        return {
            "version": e.dcgm.version,
            "exit_code": e.dcgm.exit_code,
            "result": test.model_dump(mode="json") if test else None,
        }
    m = gpu.measurements.get(metric)
    return {"gpu": gpu.index, "uuid": gpu.uuid, "serial": gpu.serial, metric: m.model_dump(mode="json") if m else None}


def recertify_summary(ev: Evaluation) -> str:
    """One sentence for the reports: what this recertification compared the node with."""
    recert = ev.recertification
    if recert is None:
        return ""
    node, peers = recert.node, recert.fleet_peers
    pool = ev.pools.name_of(node)
    sku = ev.baselines[pool].sku if pool is not None else "(none: the node is in no pool)"
    runs = sorted(set(peers.values()))
    fleet = (
        f"the fleet's latest evidence ({len(peers)} nodes, from run{'s' if len(runs) > 1 else ''} {', '.join(runs)})"
        if peers
        else "no fleet evidence (no earlier run of this spec and baseline)"
    )
    if ev.handover is None:
        return (
            f"Recertification of {node}: NO HANDOVER BASELINE for this node; recertified against the SKU "
            f"baseline {sku} and {fleet} only"
        )
    r = ev.handover.recorded
    return (
        f"Recertification of {node} against its handover baseline (run {r.run}, {r.date}"
        + (f", certificate {r.certificate}" if r.certificate else ", unsigned")
        + f"), the SKU baseline {sku} and {fleet}"
    )
