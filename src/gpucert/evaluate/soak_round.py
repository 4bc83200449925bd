"""One soak round of one node: what the round measured (`RoundEvidence`, raw samples, kept on disk) and the small
summary the criteria read (`NodeRound`: per GPU each metric's median and the health counters), so a soak's memory
holds summaries, never samples. Pure: models and arithmetic, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpucert.evaluate.rules.dcgm import judge_dcgm
from gpucert.evaluate.rules.health import CLOCK_EVENT_BITS, CLOCK_EVENT_REASONS
from gpucert.measure.evidence import DcgmEvidence, GpuEvidence, Measurement
from gpucert.plan.checks import CheckStatus
from gpucert.plan.required import dcgm_tests

__all__ = ["MULTINODE", "ROUND_SCHEMA", "FabricRound", "GpuRound", "NodeRound", "RoundEvidence", "summarize"]

ROUND_SCHEMA = "gpucert.io/soak-round/v1"
MULTINODE = "nccl.all_reduce.multinode"


class RoundEvidence(BaseModel):
    """What one round measured on one node: the GPUs as the certify probes record them (health readings and raw
    samples), the node's own all-reduce, and how often the round's pod restarted."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: str = Field(ROUND_SCHEMA, alias="schema")
    node: str
    round: int
    start_h: float  # hours since the node's soak began, at the round's start and end
    end_h: float
    collected: bool = True
    errors: list[str] = Field(default_factory=list)  # why the round could not be measured (collected: False)
    restarts: int = 0  # the round pod's container restarts
    gpus: list[GpuEvidence] = Field(default_factory=list)
    node_measurements: dict[str, Measurement] = Field(default_factory=dict)  # nccl.all_reduce (busbw, largest size)
    dcgm: DcgmEvidence | None = None  # the diagnostic, in the rounds it was due


@dataclass(frozen=True, slots=True)
class GpuRound:
    """One GPU's round in a few numbers: None where the reading was not reported (the criterion errors)."""

    index: int
    medians: dict[str, float] = field(default_factory=dict)
    corrected: int | None = None  # volatile ECC counters since the driver loaded
    uncorrected: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    xids: tuple[tuple[int, str], ...] = ()  # (code, time) of each XID event the round read
    throttle_ns: dict[str, int] = field(default_factory=dict)  # per reason, ns held under load in the round
    loaded_s: float = 0.0
    active: tuple[str, ...] | None = ()  # reasons holding the clocks at the reading after the load; None: not read
    temperature_c: float | None = None
    board: tuple[str | None, str | None] = (None, None)  # (serial, UUID) as NVML read them in the round

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "board": list(self.board),
            "medians": self.medians,
            "corrected": self.corrected,
            "uncorrected": self.uncorrected,
            "remapUncorrectable": self.remap_uncorrectable,
            "remapPending": self.remap_pending,
            "remapFailure": self.remap_failure,
            "xids": [list(x) for x in self.xids],
            "throttleNs": self.throttle_ns,
            "loadedS": self.loaded_s,
            "active": list(self.active) if self.active is not None else None,
            "temperatureC": self.temperature_c,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GpuRound:
        return cls(
            index=int(d["index"]),
            medians={str(k): float(v) for k, v in d["medians"].items()},
            corrected=d["corrected"],
            uncorrected=d["uncorrected"],
            remap_uncorrectable=d["remapUncorrectable"],
            remap_pending=d["remapPending"],
            remap_failure=d["remapFailure"],
            xids=tuple((int(c), str(t)) for c, t in d["xids"]),
            throttle_ns={str(k): int(v) for k, v in d["throttleNs"].items()},
            loaded_s=float(d["loadedS"]),
            active=tuple(d["active"]) if d["active"] is not None else None,
            temperature_c=d["temperatureC"],
            board=tuple(d.get("board") or (None, None)),
        )


@dataclass(frozen=True, slots=True)
class NodeRound:
    """One node's round, summarised."""

    node: str
    round: int
    start_h: float
    end_h: float
    collected: bool
    errors: tuple[str, ...]
    restarts: int
    gpus: tuple[GpuRound, ...]
    node_medians: dict[str, float]
    # the diagnostic's tests per GPU that did not pass (check, gpu, status, message), when it ran in the round
    dcgm: tuple[tuple[str, int, str, str], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "round": self.round,
            "startH": self.start_h,
            "endH": self.end_h,
            "collected": self.collected,
            "errors": list(self.errors),
            "restarts": self.restarts,
            "gpus": [g.to_json() for g in self.gpus],
            "nodeMedians": self.node_medians,
            "dcgm": [list(d) for d in self.dcgm] if self.dcgm is not None else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NodeRound:
        return cls(
            node=str(d["node"]),
            round=int(d["round"]),
            start_h=float(d["startH"]),
            end_h=float(d["endH"]),
            collected=bool(d["collected"]),
            errors=tuple(d["errors"]),
            restarts=int(d["restarts"]),
            gpus=tuple(GpuRound.from_json(g) for g in d["gpus"]),
            node_medians={str(k): float(v) for k, v in d["nodeMedians"].items()},
            dcgm=tuple((str(c), int(g), str(st), str(m)) for c, g, st, m in d["dcgm"])
            if d.get("dcgm") is not None
            else None,
        )


@dataclass(frozen=True, slots=True)
class FabricRound:
    """The all-reduce across the round's running nodes (certify.multinode): its bus bandwidth samples (GB/s at the
    largest size) and their median, or why it was not measured (median None, `errors`). Small enough to keep in
    the round's summary whole."""

    round: int
    start_h: float
    end_h: float
    nodes: tuple[str, ...]
    median: float | None
    samples: tuple[float, ...] = ()
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "startH": self.start_h,
            "endH": self.end_h,
            "nodes": list(self.nodes),
            "median": self.median,
            "samples": list(self.samples),
            "errors": list(self.errors),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FabricRound:
        return cls(
            round=int(d["round"]),
            start_h=float(d["startH"]),
            end_h=float(d["endH"]),
            nodes=tuple(str(n) for n in d["nodes"]),
            median=float(d["median"]) if d["median"] is not None else None,
            samples=tuple(float(x) for x in d["samples"]),
            errors=tuple(str(e) for e in d["errors"]),
        )


def _active(bitmask: int | None) -> tuple[str, ...] | None:
    if bitmask is None or bitmask < 0 or bitmask & ~CLOCK_EVENT_BITS:
        return None  # not reported, or not a bitmask NVML reports: not believed
    return tuple(name for bit, name in CLOCK_EVENT_REASONS.items() if bitmask & bit)


def _gpu(g: GpuEvidence) -> GpuRound:
    medians = {m: float(median(x.samples)) for m, x in g.measurements.items() if x.samples}
    h = g.health
    board = (g.serial, g.uuid)
    if h is None:
        return GpuRound(index=g.index, medians=medians, active=None, board=board)
    throttle: dict[str, int] = {}
    for w in h.throttle_under_load:
        for reason, ns in w.reasons_ns.items():
            throttle[reason] = throttle.get(reason, 0) + ns
    return GpuRound(
        index=g.index,
        medians=medians,
        corrected=h.ecc.volatile_corrected,
        uncorrected=h.ecc.volatile_uncorrected,
        remap_uncorrectable=h.remapped_rows.uncorrectable,
        remap_pending=h.remapped_rows.pending,
        remap_failure=h.remapped_rows.failure,
        xids=tuple((e.code, e.time or "") for e in h.xid),
        throttle_ns=throttle,
        loaded_s=sum(w.seconds for w in h.throttle_under_load),
        active=_active(h.clock_event_reasons),
        temperature_c=h.temperature_c,
        board=board,
    )


def _dcgm(ev: RoundEvidence, level: int) -> tuple[tuple[str, int, str, str], ...]:
    """Every test of `level` for every GPU, judged as the certification judges it: the ones that did not pass."""
    if ev.dcgm is None:
        return (("dcgm", -1, "error", f"DCGM level {level} was due in this round and did not run"),)
    out = []
    for test in dcgm_tests(level):
        for g in ev.gpus:
            f = judge_dcgm(test, ev.node, g.index, ev.dcgm, level, g.serial)
            if f.status is not CheckStatus.PASS:
                out.append((f.check, g.index, f.status.value, f.message))
    return tuple(out)


def summarize(ev: RoundEvidence, dcgm_level: int | None = None) -> NodeRound:
    """The round in the numbers the criteria read; `dcgm_level`: the diagnostic was due in it, at that level."""
    return NodeRound(
        node=ev.node,
        round=ev.round,
        start_h=ev.start_h,
        end_h=ev.end_h,
        collected=ev.collected,
        errors=tuple(ev.errors),
        restarts=ev.restarts,
        gpus=tuple(_gpu(g) for g in ev.gpus),
        node_medians={m: float(median(x.samples)) for m, x in ev.node_measurements.items() if x.samples},
        dcgm=_dcgm(ev, dcgm_level) if dcgm_level is not None and ev.collected else None,
    )
