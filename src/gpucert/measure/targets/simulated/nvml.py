"""NVML's readings of a simulated GPU after the load: ECC, remapped rows, the PCIe link, clock event reasons and
throttle windows, temperature and power, XIDs, NVLink state and error counters. Healthy unless one of the GPU's
faults says otherwise; the evaluation has to find the fault from the readings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from gpucert.measure.evidence import (
    EccCounts,
    Health,
    NvlinkErrors,
    PcieLink,
    RemappedRows,
    ThrottleWindow,
    XidEvent,
)
from gpucert.measure.probes.health import NVLINK_ERROR_COUNTERS, THROTTLE_COUNTERS
from gpucert.measure.targets.simulated.world import T0, iso
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.simulated_fleet import (
    EccFault,
    Fault,
    NvlinkDownFault,
    NvlinkErrorsFault,
    PcieLinkFault,
    RemappedRowsFault,
    TemperatureFault,
    ThrottleFault,
    XidFault,
)

__all__ = ["nvml_health"]

SLOWDOWN_C = 87.0
THROTTLE_BITS = {"hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80}
WINDOW_S = 1.5  # how long each simulated probe loads a GPU


def nvml_health(rng: np.random.Generator, baseline: GpuBaseline, faults: Sequence[Fault], loaded: list[str]) -> Health:
    """NVML's readings after the load; `loaded` are the probes that loaded the GPU (one throttle window each)."""
    r = _Readings.healthy(rng, baseline)
    for f in faults:
        r.apply(f, loaded)
    links = len(r.nvlink)
    return Health(
        ecc=r.ecc,
        remapped_rows=r.rows,
        pcie=r.pcie,
        clock_event_reasons=r.reasons,
        temperature_c=r.temp,
        slowdown_temperature_c=SLOWDOWN_C,
        power_w=round(float(68 + 6 * rng.random()), 1),
        power_limit_w=700.0,
        xid=r.xids,
        nvlink_active=r.nvlink or None,
        not_supported=[] if r.nvlink else ["nvlink.0"],
        throttle_under_load=[
            ThrottleWindow(
                probe=probe,
                seconds=WINDOW_S,
                reasons_ns={c: int(r.held.get(c, 0) * WINDOW_S * 1e9) for c in THROTTLE_COUNTERS.values()},
            )
            for probe in loaded
        ],
        nvlink_errors=NvlinkErrors(seconds=WINDOW_S * (len(loaded) + 1), links=r.link_errors) if links else None,
    )


@dataclass
class _Readings:
    ecc: EccCounts
    rows: RemappedRows
    pcie: PcieLink
    temp: float
    nvlink: list[bool | None]
    link_errors: dict[int, dict[str, int]]
    reasons: int = 0x1
    held: dict[str, float] = field(default_factory=dict)  # reason -> share of the loaded time
    xids: list[XidEvent] = field(default_factory=list)

    @classmethod
    def healthy(cls, rng: np.random.Generator, baseline: GpuBaseline) -> _Readings:
        gen, width = baseline.pcie.generation, baseline.pcie.width
        links = baseline.nvlink.links if baseline.nvlink is not None else 0
        return cls(
            ecc=EccCounts(volatile_corrected=0, volatile_uncorrected=0, aggregate_corrected=0, aggregate_uncorrected=0),
            rows=RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
            pcie=PcieLink(
                current_generation=gen, current_width=width, max_generation=gen, max_width=width, under_load=True
            ),
            temp=round(float(30 + 8 * rng.random()), 1),
            nvlink=[True] * links,
            link_errors={link: dict.fromkeys(NVLINK_ERROR_COUNTERS, 0) for link in range(links)},
        )

    def apply(self, f: Fault, loaded: list[str]) -> None:
        match f:
            case EccFault():
                self.ecc = EccCounts(
                    volatile_corrected=f.corrected,
                    volatile_uncorrected=f.uncorrected,
                    aggregate_corrected=f.corrected,
                    aggregate_uncorrected=f.uncorrected,
                )
            case RemappedRowsFault():
                self.rows = RemappedRows(
                    correctable=0,
                    uncorrectable=f.uncorrectable or int(f.failure or f.pending),
                    pending=f.pending,
                    failure=f.failure,
                )
            case PcieLinkFault():
                self.pcie = self.pcie.model_copy(update={"current_generation": f.generation, "current_width": f.width})
            case XidFault():
                self.xids.append(XidEvent(code=f.code, time=iso(T0 + timedelta(hours=1)), text=""))
            case TemperatureFault():
                self.temp = f.celsius
            case _:
                self._apply_to_links(f, loaded)

    def _apply_to_links(self, f: Fault, loaded: list[str]) -> None:
        match f:
            case ThrottleFault() if f.reason == "hw_slowdown" or not loaded:  # no counter to show it
                self.reasons = THROTTLE_BITS.get(f.reason, 0x1)
                self.held[f.reason] = f.share
            case ThrottleFault():
                self.held[f.reason] = f.share
            case NvlinkDownFault():
                links = len(self.nvlink)
                for link in range(max(0, links - f.links), links):
                    self.nvlink[link] = False
            case NvlinkErrorsFault() if f.link in self.link_errors:
                self.link_errors[f.link][f.counter] += f.count
