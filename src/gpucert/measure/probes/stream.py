"""The evidence as it is measured: one framed part per finished probe, and the node's document rebuilt from the
parts of a probe pod that never wrote its document (killed at its deadline, evicted, OOM-killed, crashed).

Part keys (`framing.parts` keeps the last whole record of each):
  node                      the run, node, planned probes and start time (first, before anything is measured)
  system                    SystemFacts
  gpu/<i>                   GpuEvidence without measurements: identity and health (read again at the end)
  gpu/<i>/<metric>          Measurement (memory.bandwidth, compute.gemm.bf16, pcie.h2d, ...)
  p2p, nccl, dcgm           the node-level probes' evidence
  fabric                    NodeFabric: the node's RDMA ports, GPU-NIC affinity and GDR facts (a fabric plan)
  error/<n>                 ProbeError, in the order they happened
  done/<probe>              the probe finished on every GPU it was to run on
  overflow                  (framing's) the parts passed the log's budget: the later ones were not written
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from gpucert.measure.evidence import (
    DcgmEvidence,
    GpuEvidence,
    Measurement,
    NcclEvidence,
    NodeEvidence,
    NodeFabric,
    P2pEvidence,
    ProbeError,
    SystemFacts,
)
from gpucert.measure.probes.framing import OVERFLOW, Framer
from gpucert.plan.checks import GPU_METRICS
from gpucert.spec.cluster import Probe

__all__ = ["GPU_PROBES", "METRICS", "Done", "Emit", "NodeHeader", "framer", "rebuild"]

Emit = Callable[[str, BaseModel], None]


def framer(out: Framer | Callable[[str], object], flush: Callable[[], object] | None = None) -> Emit:
    """An Emit that writes each part as frames of `out` (a Framer, or a write function and its flush), flushing
    each line, so a pod killed next keeps it. Give the document to the same Framer: records are numbered per log."""
    framed = out if isinstance(out, Framer) else Framer(out, flush)

    def emit(key: str, part: BaseModel) -> None:
        framed.emit(key, part.model_dump_json(by_alias=True))

    return emit


# the measurements each per-GPU probe writes (the check vocabulary's per-GPU metrics, by probe)
METRICS = {
    probe: tuple(m for m in GPU_METRICS if m.split(".")[0] == probe.value)
    for probe in (Probe.MEMORY, Probe.COMPUTE, Probe.PCIE)
}
GPU_PROBES = tuple(METRICS)


class Done(BaseModel):
    """The `done/<probe>` part: the probe ran on every GPU it was to run on (its errors are parts of their own)."""

    probe: Probe


class NodeHeader(BaseModel):
    """The `node` part: what the rest of the parts belong to."""

    run_id: str
    node: str
    target: str
    probe_version: str
    started: str
    probes: list[Probe]
    gpus: int


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _load(model: type[BaseModel], body: str) -> Any:
    try:
        return model.model_validate_json(body)
    except (ValidationError, json.JSONDecodeError):
        return None


def _read_parts(
    found: dict[str, str],
) -> tuple[dict[int, GpuEvidence], dict[int, dict[str, Measurement]], list[ProbeError]]:
    """The GPUs, their measurements and the errors (in the order they happened) among the parts `found`."""
    gpus: dict[int, GpuEvidence] = {}
    measured: dict[int, dict[str, Measurement]] = {}
    errors: list[tuple[int, ProbeError]] = []
    for key, body in found.items():
        kind, _, rest = key.partition("/")
        if kind == "gpu":
            index, _, metric = rest.partition("/")
            if not index.isdigit():
                continue
            model: type[BaseModel] = Measurement if metric else GpuEvidence
            value = _load(model, body)
            if isinstance(value, Measurement):
                measured.setdefault(int(index), {})[metric] = value
            elif isinstance(value, GpuEvidence) and value.index == int(index):
                gpus[int(index)] = value
        elif kind == "error" and rest.isdigit() and isinstance(err := _load(ProbeError, body), ProbeError):
            errors.append((int(rest), err))
    return gpus, measured, [e for _, e in sorted(errors, key=lambda x: x[0])]


def _unfinished(
    header: NodeHeader,
    found: dict[str, str],
    measured: dict[int, dict[str, Measurement]],
    found_errors: list[ProbeError],
    cause: str,
) -> list[ProbeError]:
    """An error for every planned probe that did not finish (per GPU and metric for the per-GPU probes), unless an
    error of its own already says why."""
    missing: list[ProbeError] = []

    def known(probe: Probe, gpu: int | None, metric: str | None) -> bool:
        return any(e.probe == probe.value and e.gpu == gpu and e.metric in (None, metric) for e in found_errors)

    for probe in header.probes:
        if f"done/{probe.value}" in found or probe is Probe.HEALTH:
            continue
        if probe in METRICS:
            missing += [
                ProbeError(probe=probe.value, gpu=i, metric=metric, message=f"GPU {i}: {metric} {cause}")
                for i in range(header.gpus)
                for metric in METRICS[probe]
                if metric not in measured.get(i, {}) and not known(probe, i, metric)
            ]
        elif probe.value not in found and not known(probe, None, None):
            missing.append(ProbeError(probe=probe.value, message=f"{probe.value} {cause}"))
    return missing


def rebuild(found: dict[str, str], why: str) -> NodeEvidence | None:
    """The node's evidence from the parts `found` in a log; None when not even the `node` part arrived.

    What was measured stands. Every probe that was planned and did not finish gets an error saying `why` (what
    stopped the pod), per GPU for the per-GPU probes, so its checks error with the cause instead of passing
    on half the data.
    """
    header = _load(NodeHeader, found.get("node", ""))
    if not isinstance(header, NodeHeader):
        return None
    gpus, measured, found_errors = _read_parts(found)
    if OVERFLOW in found:  # not only stopped: its later parts did not fit the pod log and were never written
        why = f"{why}; and the probe's parts passed the pod log's budget, so the later ones were not written"
    missing = _unfinished(header, found, measured, found_errors, f"did not finish: {why}")
    system = _load(SystemFacts, found.get("system", ""))
    p2p = _load(P2pEvidence, found.get("p2p", ""))
    nccl = _load(NcclEvidence, found.get("nccl", ""))
    dcgm = _load(DcgmEvidence, found.get("dcgm", ""))
    fabric = _load(NodeFabric, found.get("fabric", ""))
    return NodeEvidence(
        node=header.node,
        target=header.target,
        probe_version=header.probe_version,
        started=header.started,
        finished=_now(),
        system=system if isinstance(system, SystemFacts) else SystemFacts(),
        gpus=[
            g.model_copy(update={"measurements": measured.get(i, {})})
            for i, g in sorted(gpus.items())
            if i < header.gpus
        ],
        p2p=p2p if isinstance(p2p, P2pEvidence) else None,
        nccl=nccl if isinstance(nccl, NcclEvidence) else None,
        dcgm=dcgm if isinstance(dcgm, DcgmEvidence) else None,
        fabric=fabric if isinstance(fabric, NodeFabric) else None,
        errors=found_errors + missing,
    )
