"""The evidence contract: one document per node (`evidence/<node>.json`), raw samples and readings only.

Statistics are computed by analysis/ at evaluate time; nothing here summarises. NVML values that the device does
not support are None and named in `not_supported`, never zero.
"""

from __future__ import annotations

import hashlib
import weakref
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucert.errors import EvidenceError
from gpucert.files import parse_json, read_bytes, validate, write_atomic
from gpucert.measure.evidence_base import GpuKey, SampleArray, Samples, at_once
from gpucert.measure.evidence_base import Model as _Model
from gpucert.measure.evidence_compact import compact
from gpucert.measure.evidence_dcgm import DcgmError, DcgmEvidence, DcgmGpuResult, DcgmTestResult
from gpucert.measure.evidence_fabric import (
    CounterWindow,
    GdrFacts,
    GidEntry,
    GpuNic,
    HcaPort,
    NcclChannel,
    NcclNetDevice,
    NcclTransport,
    NodeFabric,
    PciDevice,
    RdmaBandwidth,
)

__all__ = [
    "EVIDENCE_SCHEMA",
    "CounterWindow",
    "DcgmError",
    "DcgmEvidence",
    "DcgmGpuResult",
    "DcgmTestResult",
    "EccCounts",
    "FabricEvidence",
    "GdrFacts",
    "GidEntry",
    "GpuEvidence",
    "GpuNic",
    "HcaPort",
    "Health",
    "Measurement",
    "NcclChannel",
    "NcclEvidence",
    "NcclNetDevice",
    "NcclPoint",
    "NcclTransport",
    "NodeEvidence",
    "NodeFabric",
    "NodeIdentities",
    "NvlinkErrors",
    "P2pEvidence",
    "P2pPair",
    "PciDevice",
    "PcieLink",
    "PreflightStep",
    "ProbeError",
    "RdmaBandwidth",
    "RemappedRows",
    "SampleArray",
    "SystemFacts",
    "ThrottleWindow",
    "XidEvent",
    "evidence_target",
    "read_evidence",
    "read_fabric",
    "read_fabric_pairs",
    "read_identities",
    "times_problem",
    "write_document",
]

EVIDENCE_SCHEMA = "gpucert.io/evidence/v1"


class Measurement(_Model):
    unit: str
    samples: Samples
    params: dict[str, Any] = Field(default_factory=dict)


class EccCounts(_Model):
    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


class RemappedRows(_Model):
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


class PcieLink(_Model):
    current_generation: int | None = None
    current_width: int | None = None
    max_generation: int | None = None
    max_width: int | None = None
    under_load: bool = False  # read while a transfer ran: an idle link trains down on purpose


class XidEvent(_Model):
    code: int
    time: str | None = None
    text: str = ""


class ThrottleWindow(_Model):
    """What held the clocks down while one probe loaded the GPU: NVML's cumulative counters (nanoseconds per
    reason) read before and after it, so throttling is seen when it matters rather than at idle."""

    probe: str  # the measurement that loaded the GPU, e.g. compute.gemm.bf16
    seconds: float  # how long the window lasted on the host clock
    reasons_ns: dict[str, int] = Field(default_factory=dict)  # reason -> nanoseconds throttled in the window


class NvlinkErrors(_Model):
    """NVLink errors while the probes loaded the GPU: NVML's cumulative per-link counters
    (nvmlDeviceGetNvLinkErrorCounter: replay, recovery, crc_flit, crc_data) read before the first probe and after
    the last, and their increase per link. A counter NVML refused on a link is absent from that link's entry and
    named in `unavailable`."""

    seconds: float  # between the two readings, on the host clock
    links: dict[GpuKey, dict[str, int]] = Field(default_factory=dict)  # link -> counter -> errors in the window
    unavailable: dict[str, str] = Field(default_factory=dict)  # "link.counter" -> NVML's answer


class Health(_Model):
    ecc: EccCounts = Field(default_factory=EccCounts)
    remapped_rows: RemappedRows = Field(default_factory=RemappedRows)
    pcie: PcieLink = Field(default_factory=PcieLink)
    clock_event_reasons: int | None = None  # NVML clocksEventReasons bitmask
    temperature_c: float | None = None
    slowdown_temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    xid: list[XidEvent] = Field(default_factory=list)
    nvlink_active: list[bool | None] | None = None  # None for a link whose state NVML refused (see unavailable)
    not_supported: list[str] = Field(default_factory=list)
    # readings NVML refused for another reason than "not supported": reading -> NVML's error (the rest stand)
    unavailable: dict[str, str] = Field(default_factory=dict)
    throttle_under_load: list[ThrottleWindow] = Field(default_factory=list)
    nvlink_errors: NvlinkErrors | None = None  # None: not read around the load (no NVLink, or NVML refused)


class GpuEvidence(_Model):
    index: int
    uuid: str | None = None  # None when NVML could not read it: never a made-up identity
    serial: str | None = None
    pci_bus_id: str | None = None
    product: str | None = None
    memory_mib: int | None = None
    vbios: str | None = None
    health: Health | None = None
    measurements: dict[str, Measurement] = Field(default_factory=dict)


class P2pPair(_Model):
    src: int
    dst: int
    peer_access: bool
    samples: Samples
    error: str | None = None  # this pair could not be measured (the rest of the matrix stands)


class P2pEvidence(_Model):
    unit: str = "GB/s"
    pairs: list[P2pPair] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    # each unordered pair (src < dst) copying both ways at once, GB/s of both directions together (evidence only)
    bidirectional: list[P2pPair] = Field(default_factory=list)


class NcclPoint(_Model):
    size_bytes: int
    time_us: Samples
    algbw: Samples
    busbw: Samples


class NcclEvidence(_Model):
    op: str = "all_reduce"
    ranks: int
    dtype: str = "float32"
    points: list[NcclPoint]
    correct: bool
    params: dict[str, Any] = Field(default_factory=dict)


class SystemFacts(_Model):
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    kernel: str | None = None
    os: str | None = None


class ProbeError(_Model):
    probe: str
    message: str
    unavailable: bool = False  # the tool is not installed on the node: its checks skip, they never pass
    gpu: int | None = None  # the error of one GPU (the node's other GPUs stand); None: the whole probe
    metric: str | None = None  # with `gpu`: only this measurement of the probe (compute.gemm.fp64); None: all


class PreflightStep(_Model):
    """One step of the probe pod's preflight (probes/preflight.py): what it found, or why it failed and the fix."""

    step: str  # home, cache, nvml, cupy, kernel, cublas, nccl, dcgmi
    ok: bool
    detail: str  # the version found, or what went wrong
    fix: str | None = None  # with a failed step: what to change


class NodeEvidence(_Model):
    schema_: str = Field(EVIDENCE_SCHEMA, alias="schema")
    node: str
    target: str
    probe_version: str
    started: str
    finished: str
    collected: bool = True  # False when no probe ran on the node; `errors` says why
    system: SystemFacts = Field(default_factory=SystemFacts)
    gpus: list[GpuEvidence] = Field(default_factory=list)
    p2p: P2pEvidence | None = None
    nccl: NcclEvidence | None = None
    dcgm: DcgmEvidence | None = None
    errors: list[ProbeError] = Field(default_factory=list)
    # the preflight's steps, in order (empty in evidence written before the preflight existed)
    preflight: list[PreflightStep] = Field(default_factory=list)
    fabric: NodeFabric | None = None  # the node's RDMA ports, counters, GPU-NIC affinity, GDR (evidence_fabric.py)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def preflight_failed(self) -> list[PreflightStep]:
        """The preflight's failed steps: when any, no probe ran on the node and this is why."""
        return [s for s in self.preflight if not s.ok]

    def gpu(self, index: int) -> GpuEvidence | None:
        return next((g for g in self.gpus if g.index == index), None)

    def timing_problem(self) -> str | None:
        """Why `started`/`finished` cannot be the times of one measurement (None when they can)."""
        return times_problem(self.started, self.finished)

    def error_for(self, probe: str, gpu: int | None = None, metric: str | None = None) -> ProbeError | None:
        """The probe's error for the whole node, or (with `gpu`) the error of that one GPU (for `metric`)."""
        if not self.errors:  # most nodes: asked by every check of the node
            return None
        return next(
            (
                e
                for e in self.errors
                if e.probe in (probe, "*") and e.gpu == gpu and (e.metric is None or e.metric == metric)
            ),
            None,
        )


def times_problem(started: str, finished: str) -> str | None:
    """Why a record's start and end times cannot be those of one run: not ISO 8601 times with a zone, or the end
    before the start."""
    try:
        start, end = datetime.fromisoformat(started), datetime.fromisoformat(finished)
    except ValueError:
        return f"its times ({started!r} to {finished!r}) are not ISO 8601 timestamps"
    if start.tzinfo is None or end.tzinfo is None:
        return f"its times ({started} to {finished}) carry no time zone"
    if end < start:
        return f"it finished ({finished}) before it started ({started})"
    return None


class FabricEvidence(_Model):
    """One collective across several nodes (`evidence/multinode/nccl.json`): the nodes in rank order, the sweep."""

    schema_: str = Field(EVIDENCE_SCHEMA, alias="schema")
    run_id: str
    target: str
    probe_version: str
    started: str
    finished: str
    nodes: list[str]
    gpus_per_node: int
    collected: bool = True
    nccl: NcclEvidence | None = None
    errors: list[ProbeError] = Field(default_factory=list)
    transport: NcclTransport | None = None  # NCCL's channel transports in its debug output (None: not read)
    rdma: list[RdmaBandwidth] = Field(default_factory=list)  # a pair's ib_write_bw per rail
    # each node's port counters around this collective's traffic (the pair's RDMA and all-reduce), by node
    counters: dict[str, CounterWindow] = Field(default_factory=dict)
    # how a Kubernetes run's collective was admitted: `kueue` (one JobSet Kueue admitted whole, target.gang) or
    # `indexed job` (no gang admission: the ranks were scheduled one by one); None: not on Kubernetes, or older
    admission: Literal["kueue", "indexed job"] | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def write_document(path: Path, document: BaseModel, *, durable: bool = True) -> Path:
    """Write an evidence document (node, fabric or pairs) atomically, so a reader never sees half of it; `durable`
    as files.write_atomic's (False: one of a batch a later files.sync makes durable)."""
    return write_atomic(path, document.model_dump_json(by_alias=True), durable=durable)


class FabricPairs(_Model):
    """The pairs of one round of the fabric stage (`evidence/multinode/pairs-<round>.json`, plan/pairs_files.py);
    in a run written before rounds had their own documents, every pair (`evidence/multinode/pairs.json`)."""

    schema_: str = Field(EVIDENCE_SCHEMA, alias="schema")
    pairs: list[FabricEvidence] = Field(default_factory=list)
    round: int | None = None  # 1-based; None: the one document of every pair (the older layout), or a reading
    rounds: int | None = None  # how many rounds the stage planned

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NodeIdentities(_Model):
    """A re-test's identity read of the nodes it may carry (`retest/identity.json`): each node's identity as it
    answered, in one document (a file a node cost most of the read at fleet scale: a new file is the file system's
    most costly write, and 1,021 of them were 0.1 to 0.8 s of CPU at 1,024 nodes as the machine was loaded)."""

    schema_: str = Field(EVIDENCE_SCHEMA, alias="schema")
    nodes: list[NodeEvidence] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_MISSING = "no evidence for this node; measure it or pass the evidence folder"


# the documents of the evidence schema: evidence/'s, and a re-test's identity reads (retest/identity.json)
D = TypeVar("D", NodeEvidence, FabricEvidence, FabricPairs, NodeIdentities)


def _document(path: Path, data: Any) -> None:
    """What a document must be before its keys are read: a JSON object of this evidence schema."""
    if not isinstance(data, dict):
        raise EvidenceError(f"expected a JSON object, got {type(data).__name__}", path=path)
    if data.get("schema") != EVIDENCE_SCHEMA:
        raise EvidenceError(f"schema is {data.get('schema')!r}, expected {EVIDENCE_SCHEMA!r}", path=path)


def _validate(path: Path, data: bytes, model: type[D]) -> D:
    """The document's bytes as `model`, in one pass (files.validate). A document refused is refused as it always was:
    not JSON, then not an object, then another schema, then its first bad key (strict: in JSON a bool or a string is
    never a number)."""
    try:
        doc = validate(path, data, model)
    except EvidenceError:
        _document(path, parse_json(path, data))  # what is wrong before any key, said first
        raise
    if doc.schema_ != EVIDENCE_SCHEMA or "schema_" not in doc.model_fields_set:  # a model reads any schema
        parsed = parse_json(path, data)
        _document(path, parsed)
        return validate(path, parsed, model)
    return doc


def _read_model(path: Path, model: type[D]) -> D | None:
    if not path.exists() and not path.is_symlink():
        return None
    return _validate(path, read_bytes(path, missing=_MISSING), model)


def read_fabric(path: Path) -> FabricEvidence | None:
    """The all-reduce across nodes at `path`, or None when the run measured no collective across nodes."""
    return _read_model(path, FabricEvidence)


def read_fabric_pairs(path: Path) -> FabricPairs | None:
    return _read_model(path, FabricPairs)


def read_identities(path: Path) -> NodeIdentities | None:
    """A re-test's identity reads (`retest/identity.json`), or None when it wrote none."""
    return _read_model(path, NodeIdentities)


# The node documents this process validated, by the sha256 of their bytes, for as long as a reader still holds
# the model. A run reads the same bytes several times (a re-test: the source's document, its carried copy, the
# evaluation's read) and validating them is most of reading them; the same bytes are the same document, and a
# changed byte is a new digest, validated afresh. Weak: a reader that lets its models go (the exporter, node by
# node) never finds the fleet kept here.
_VALIDATED: weakref.WeakValueDictionary[bytes, NodeEvidence] = weakref.WeakValueDictionary()


# The heads of node documents a reader holds without the documents (evidence_held.py), by the sha256 of the
# document's bytes: each head is the document's own, its `target` the document's.
HEADS: weakref.WeakValueDictionary[bytes, NodeEvidence] = weakref.WeakValueDictionary()


def _known(sha256: bytes) -> NodeEvidence | None:
    """The document of these bytes a reader holds validated, or its head a reader holds, if any."""
    return _VALIDATED.get(sha256) or HEADS.get(sha256)


def evidence_target(path: Path, sha256: bytes | None = None) -> object:
    """The `target` the node document at `path` names: its model's (or head's) when a reader holds it, else its
    JSON's (not validated: what a check of the target alone needs). EvidenceError when it cannot be read as JSON.
    `sha256`: the digest of its bytes, which the caller read just now (a signature's); a document held by it is not
    read."""
    if sha256 is not None and (known := _known(sha256)) is not None:
        return known.target
    data = read_bytes(path, missing=_MISSING)
    held = _known(hashlib.sha256(data).digest())
    if held is not None:
        return held.target
    try:
        return _Target.model_validate_json(data).target
    except ValidationError:  # not JSON, or JSON but not an object: its error, or no target, as json.loads reads it
        doc = parse_json(path, data)
        return doc.get("target") if isinstance(doc, dict) else None


class _Target(BaseModel):
    """A node document's `target` alone (a key given twice: the last, as json.loads takes it), the rest parsed, not
    built: 0.18 ms of a 74 KB document, json.loads 1.2 ms (`gpucert sign` of a fleet's run asks every document's)."""

    model_config = ConfigDict(extra="ignore")
    target: object = None


def read_evidence(path: Path) -> NodeEvidence:
    """The node document at `path`, validated once per content while a reader holds it (EvidenceError otherwise)."""
    data = read_bytes(path, missing=_MISSING)
    digest = hashlib.sha256(data).digest()
    ev = _VALIDATED.get(digest)
    if ev is None:
        ev = _VALIDATED[digest] = compact(at_once(_validate, path, data, NodeEvidence))
    return ev
