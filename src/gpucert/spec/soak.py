"""The burn-in a spec declares (`soak:`), and the time-compressed soak of a simulated fleet (`soak:` in a
SimulatedFleet): how long, how long each round, what each round runs, and the criteria with their defaults and
where each default comes from. Pure: models only.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gpucert.spec.documents import Document
from gpucert.spec.durations import Duration, duration_seconds

__all__ = [
    "CRITERIA_SOURCES",
    "SOAK_PROBES",
    "DcgmAtFault",
    "DegradeFault",
    "EccStormFault",
    "PodRestartFault",
    "SoakCriteria",
    "SoakDcgm",
    "SoakFault",
    "SoakSimulation",
    "SoakSpec",
    "ThermalCreepFault",
    "XidAtFault",
]

# what a round can run: the certify probes that load a GPU for minutes and their health readings around the load
SoakProbe = Literal["health", "memory", "compute", "nccl"]
SOAK_PROBES: tuple[SoakProbe, ...] = ("health", "memory", "compute", "nccl")
LOAD_PROBES: tuple[SoakProbe, ...] = ("memory", "compute", "nccl")  # a soak needs one: the load is what it burns in
MAX_ROUNDS = 10_000  # a 7-day soak of one-minute rounds; more rounds than this is a mistake in the units

# where each criterion's default comes from: written into the soak's record beside the values in force
CRITERIA_SOURCES: dict[str, str] = {
    "xid": "NVIDIA Xid catalog (gpucert.evaluate.xids): a hardware-class XID is a fault of the board; the "
    "baseline's health.applicationXids are the only ones excused",
    "restarts": "issue 26: a round's pod that restarted did not run the round it was given",
    "throttle": "the baseline's health.throttleAllowance over gpucert's defaults (hardware slowdown, hardware "
    "thermal and power brake: none), as the certification's health.throttle judges it, over the whole soak",
    "correctableEccPer24h": "default: the baseline's health.maxVolatileCorrectedEcc, the corrected errors a "
    "certification allows since the driver loaded, here allowed per 24 h of soak",
    "memoryErrors": "no new uncorrectable ECC error and no pending or failed row remapping: NVIDIA, 'Memory Error "
    "Management' (A100/H100 row remapping), as health.ecc and health.remapped_rows judge them",
    "temperatureSpreadC": "default 5 degrees C from issue 26: a GPU hotter than its node's and its pool's peers "
    "under the same load by more than this has a cooling fault",
    "maxDrift": "default 0.03, a choice: three times the 1% repetition noise of a sound GPU (examples/fleets), "
    "below the 5% a straggler is flagged at (certify.stragglers.maxDeviation)",
    "trendAlpha": "default 0.01: the one-sided significance of the Mann-Kendall test (Gilbert 1987, ch. 16) "
    "that a metric's round medians fall",
    "baseline": "the pool's SKU baseline: each round's median at least its figure less its tolerance",
}


class SoakCriteria(Document):
    """What a node must hold to every round; a round that breaks any of them takes the node out of the soak."""

    temperature_spread_c: Annotated[float, Field(ge=0.5, le=30)] = Field(5.0, alias="temperatureSpreadC")
    # None: the baseline's health.maxVolatileCorrectedEcc
    correctable_ecc_per_24h: Annotated[int, Field(ge=0)] | None = Field(None, alias="correctableEccPer24h")
    max_drift: Annotated[float, Field(gt=0, lt=0.5)] = Field(0.03, alias="maxDrift")
    # the node's own first rounds: each GPU's reference for the drift of every later round
    reference_rounds: Annotated[int, Field(ge=1, le=48)] = Field(3, alias="referenceRounds")
    trend_alpha: Annotated[float, Field(gt=0, lt=0.5)] = Field(0.01, alias="trendAlpha")


class SoakDcgm(Document):
    """DCGM's diagnostic at a level, in the round that ends each `everyHours` of the soak."""

    level: Annotated[int, Field(ge=1, le=4)] = 2
    every_hours: Annotated[int, Field(ge=1)] = Field(24, alias="everyHours")


class SoakSpec(Document):
    """`soak:` of a ClusterSpec: the burn-in `gpucert soak` runs."""

    duration: Duration = "72h"
    round: Duration = "1h"
    probes: list[SoakProbe] = Field(default_factory=lambda: list(SOAK_PROBES))
    dcgm: SoakDcgm | None = None  # no diagnostic in the rounds when absent
    criteria: SoakCriteria = Field(default_factory=SoakCriteria)

    def dcgm_level(self, start_h: float, end_h: float) -> int | None:
        """The DCGM level the round of hours [start_h, end_h) runs: the round that reaches each everyHours; None
        for the others (and for a soak without `dcgm`)."""
        if self.dcgm is None:
            return None
        every = self.dcgm.every_hours
        return self.dcgm.level if math.floor(end_h / every) > math.floor(start_h / every) else None

    @field_validator("probes")
    @classmethod
    def _health_first(cls, probes: list[str]) -> list[str]:
        if "health" not in probes:
            raise ValueError("a soak judges every round by the GPUs' health readings: add `health` to soak.probes")
        if len(set(probes)) != len(probes):
            raise ValueError("a probe is listed twice: list each probe once")
        if not set(probes) & set(LOAD_PROBES):
            raise ValueError(
                "a burn-in with no load burns nothing in: add at least one of "
                f"{', '.join(LOAD_PROBES)} to soak.probes (health alone only reads the GPUs)"
            )
        return probes

    @model_validator(mode="after")
    def _whole_rounds(self) -> SoakSpec:
        check_rounds(self.duration, self.round)
        return self

    @property
    def duration_s(self) -> int:
        return duration_seconds(self.duration)

    @property
    def round_s(self) -> int:
        return duration_seconds(self.round)

    @property
    def rounds(self) -> int:
        return self.duration_s // self.round_s


def check_rounds(duration: str, round_: str) -> None:
    """A soak is a whole number of rounds, at least one, at most MAX_ROUNDS (ValueError saying the fix)."""
    d, r = duration_seconds(duration), duration_seconds(round_)
    if d % r or d < r:
        raise ValueError(f"duration {duration} is not a whole number of {round_} rounds: make it a multiple of them")
    if d // r > MAX_ROUNDS:
        raise ValueError(f"{d // r} rounds of {round_} in {duration}: at most {MAX_ROUNDS}; lengthen the round")


# ---- the simulated fleet's soak: compressed time, and faults that start at a time and grow ---------------------


class _TimedFault(Document):
    node: Annotated[str, Field(min_length=1)]

    @property
    def start_h(self) -> float:
        at = getattr(self, "at", None) or getattr(self, "after", None)
        return duration_seconds(str(at)) / 3600 if at else 0.0


class DegradeFault(_TimedFault):
    """A board that loses performance after a time: every sample of `metric` times `factor` from then on."""

    kind: Literal["degrade"]
    gpu: Annotated[int, Field(ge=0, le=63)]
    metric: str
    factor: Annotated[float, Field(gt=0, lt=1)]
    after: Duration


class XidAtFault(_TimedFault):
    """One XID the driver logs for the GPU at a time."""

    kind: Literal["xid"]
    gpu: Annotated[int, Field(ge=0, le=63)]
    code: Annotated[int, Field(ge=1)]
    at: Duration


class ThermalCreepFault(_TimedFault):
    """A GPU that runs hotter and hotter under the same load (a failing fan, dried thermal paste)."""

    kind: Literal["thermal-creep"]
    gpu: Annotated[int, Field(ge=0, le=63)]
    per_hour_c: Annotated[float, Field(gt=0, le=50)] = Field(alias="perHourC")
    after: Duration


class EccStormFault(_TimedFault):
    """Corrected ECC errors at a rate from a time on (a weakening memory cell)."""

    kind: Literal["ecc-storm"]
    gpu: Annotated[int, Field(ge=0, le=63)]
    per_hour: Annotated[int, Field(ge=1)] = Field(alias="perHour")
    after: Duration


class DcgmAtFault(_TimedFault):
    """A DCGM diagnostic test that fails on the GPU from a time on (a memory test, a stress test)."""

    kind: Literal["dcgm-fail"]
    gpu: Annotated[int, Field(ge=0, le=63)]
    test: Annotated[str, Field(pattern=r"^[a-z_]+$")]
    at: Duration


class PodRestartFault(_TimedFault):
    """The round's pod on the node restarts once at a time (an OOM kill, a container runtime hiccup)."""

    kind: Literal["pod-restart"]
    at: Duration


class LinkSlowFault(_TimedFault):
    """The node's links to the fabric slow after a time (a degrading cable or transceiver, a port falling back to a
    lower rate): the all-reduce across the nodes, which runs at its slowest link's pace, times `factor` from then
    on. The node's own GPUs and its all-reduce within the node are untouched."""

    kind: Literal["link-slow"]
    factor: Annotated[float, Field(gt=0, lt=1)]
    after: Duration


SoakFault = Annotated[
    DegradeFault | XidAtFault | ThermalCreepFault | EccStormFault | DcgmAtFault | PodRestartFault | LinkSlowFault,
    Field(discriminator="kind"),
]


class SoakSimulation(Document):
    """`soak:` of a SimulatedFleet: how fast simulated time runs, and the faults that come with time."""

    # simulated seconds per wall-clock second: 3600 runs an hour's round in a second; 0 runs rounds as fast as
    # they are computed (tests)
    time_scale: Annotated[float, Field(ge=0)] = Field(0.0, alias="timeScale")
    faults: list[SoakFault] = Field(default_factory=list)
