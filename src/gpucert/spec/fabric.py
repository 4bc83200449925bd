"""A pool's fabric: what its multi-node network must be (`pools[].fabric` in the ClusterSpec). Pure.

The rails (how many, and which HCAs: named, or found through the RDMA device plugin's resource), the link layer,
the rated speed of every port, its MTU, the error-counter limits, the RDMA bandwidth expected of each rail, the
all-reduce bus bandwidth expected across the pool's nodes, and the node label that says which rack a node is in.
Every default figure carries its source here, in the data, as baselines do.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from gpucert.spec.documents import Document

__all__ = [
    "DEFAULT_COUNTER_LIMITS",
    "DEFAULT_RDMA_SHARE",
    "IB_LANE_GBPS",
    "IB_MTUS",
    "IB_WIDTHS",
    "CounterLimit",
    "Expected",
    "FabricSpec",
    "LinkLayer",
    "RailsSpec",
    "port_speeds",
]


class LinkLayer(StrEnum):
    INFINIBAND = "InfiniBand"  # as /sys/class/infiniband/<hca>/ports/<p>/link_layer spells it
    ETHERNET = "Ethernet"  # RoCE


# The speeds a port can train to. InfiniBand: a lane's data rate by generation times the link width, as the kernel
# prints a port's `rate` (drivers/infiniband/core/sysfs.c, rate_show: "<n> Gb/sec (<width> <speed>)"; the lane
# rates of ib_speed in include/rdma/ib_verbs.h, Linux 6.8: SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25,
# HDR 50, NDR 100, XDR 200; widths 1X, 2X, 4X, 8X, 12X in ib_width).
IB_LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0, "HDR": 50.0}
IB_LANE_GBPS |= {"NDR": 100.0, "XDR": 200.0}
IB_WIDTHS = (1, 2, 4, 8, 12)
# The MTUs an RDMA port can be active at, in bytes: the IB MTUs (enum ib_mtu in include/rdma/ib_verbs.h, Linux 6.8,
# IB_MTU_256 .. IB_MTU_4096; ibv_devinfo prints a port's active_mtu as one of them). RoCE too: its active MTU is the
# largest IB MTU that fits the Ethernet interface's MTU less the RoCE headers (iboe_get_mtu in include/rdma/ib_addr.h),
# so a 9000-byte interface runs RDMA at 4096 and a 1500-byte one at 1024.
IB_MTUS = (256, 512, 1024, 2048, 4096)
# Ethernet (RoCE) port speeds of IEEE 802.3 (10GBASE to 800GBASE), in Gb/s
ETHERNET_GBPS = (1.0, 10.0, 25.0, 40.0, 50.0, 100.0, 200.0, 400.0, 800.0)


def port_speeds(layer: LinkLayer) -> frozenset[float]:
    """Every rated speed (Gb/s) a port of this link layer can run at."""
    if layer is LinkLayer.ETHERNET:
        return frozenset(ETHERNET_GBPS)
    # FDR's 14.0625 Gb/s lanes are reported as 14 by the kernel (4X FDR: "56 Gb/sec")
    return frozenset(round(lane * w, 1) for lane in IB_LANE_GBPS.values() for w in IB_WIDTHS)


class CounterLimit(Document):
    """How much an error counter may grow while the fabric is loaded: `maxIncrease` (any more fails; 0 = any
    increment fails) and/or `maxPerHour` (its rate over the loaded window); and where the limit comes from."""

    max_increase: Annotated[int, Field(ge=0)] | None = Field(None, alias="maxIncrease")
    max_per_hour: Annotated[float, Field(ge=0)] | None = Field(None, alias="maxPerHour")
    source: Annotated[str, Field(min_length=10)]

    @model_validator(mode="after")
    def _some_limit(self) -> CounterLimit:
        if self.max_increase is None and self.max_per_hour is None:
            raise ValueError("give maxIncrease or maxPerHour (or both)")
        return self


_IBTA = "IBTA InfiniBand Architecture Specification Vol. 2, physical layer: bit error rate at most 10^-12"
_ANY = "any increment is a fault: the link went down, lost integrity or overran its buffers under load"
# No public per-hour limit for these three was found (searched: NVIDIA UFM and ibdiagnet port-counter docs, Azure's
# HPC node health checks, rdma-core's infiniband-diags): ibqueryerrors reports any count above its default threshold
# of 0, rdma-core's error_thresholds ships only commented-out examples (counts, not rates), and Azure's NHC checks
# link flaps in the syslog, not these counters. So the figures are gpucert's own, and the data says so.
_RATE = (
    "gpucert's own default, not a published figure (no public per-hour limit found for this counter; "
    "ibqueryerrors, rdma-core, reports any increase): a handful per hour under full load; a healthy link shows none"
)
DEFAULT_COUNTER_LIMITS: dict[str, CounterLimit] = {
    "link_downed": CounterLimit(max_increase=0, source=f"{_ANY} (IBTA PortCounters LinkDownedCounter)"),
    "excessive_buffer_overrun_errors": CounterLimit(
        max_increase=0, source=f"{_ANY} (IBTA PortCounters ExcessiveBufferOverrunErrors)"
    ),
    "local_link_integrity_errors": CounterLimit(
        max_increase=0, source=f"{_ANY} (IBTA PortCounters LocalLinkIntegrityErrors)"
    ),
    "symbol_error": CounterLimit(max_per_hour=120.0, source=f"{_IBTA}: 120 symbol errors per hour is its bound"),
    "link_error_recovery": CounterLimit(max_per_hour=6.0, source=_RATE),
    "port_rcv_errors": CounterLimit(max_per_hour=60.0, source=_RATE),
    "port_xmit_discards": CounterLimit(max_per_hour=600.0, source=_RATE),
}

# an RDMA write between two nodes moves at least this share of a port's rated speed (perftest's ib_write_bw of
# a healthy NDR link reaches ~96% of 400 Gb/s: wire encoding 64b/66b and packet headers take the rest)
DEFAULT_RDMA_SHARE = 0.90
RDMA_SOURCE = "gpucert's default (issue 25): 90% of the rated port speed; encoding and headers cost the rest"


class Expected(Document):
    """A figure with its source (and how far below it still passes)."""

    expected: Annotated[float, Field(gt=0)]
    tolerance: Annotated[float, Field(ge=0, lt=1)] = 0.0
    source: Annotated[str, Field(min_length=10)]

    @property
    def limit(self) -> float:
        return self.expected * (1 - self.tolerance)


class RailsSpec(Document):
    """The rails: how many, and which HCA each is (`hcas`, in rail order), or found on each node through the RDMA
    device plugin's resource (`resource`, e.g. `rdma/rdma_shared_device_a` or `nvidia.com/hostdev`)."""

    count: Annotated[int, Field(ge=1, le=32)]
    hcas: list[Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]] | None = None
    resource: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_./-]*$")] | None = None
    port: Annotated[int, Field(ge=1, le=2)] = 1  # the HCA port each rail uses

    @model_validator(mode="after")
    def _named_or_found(self) -> RailsSpec:
        if self.hcas is None and self.resource is None:
            raise ValueError("name the rails' HCAs (`hcas`) or the RDMA device plugin resource (`resource`)")
        if self.hcas is not None and len(self.hcas) != self.count:
            raise ValueError(f"{len(self.hcas)} HCAs named for {self.count} rails: name one HCA per rail")
        if self.hcas is not None and len(set(self.hcas)) != len(self.hcas):
            raise ValueError("an HCA is named twice: each rail has its own")
        return self


class FabricSpec(Document):
    """What a pool's fabric must be. The rated speed is per port, in Gb/s, as the port's `rate` reports it."""

    rails: RailsSpec
    link_layer: LinkLayer = Field(alias="linkLayer")
    rated_gbps: Annotated[float, Field(gt=0)] = Field(alias="ratedGbps")
    # the least active MTU of every rail port (an IB MTU, for RoCE too: not the Ethernet interface's MTU)
    mtu: int = 4096
    counters: dict[str, CounterLimit] = Field(default_factory=dict)  # over DEFAULT_COUNTER_LIMITS
    rdma_bandwidth: Expected | None = Field(None, alias="rdmaBandwidth")  # Gb/s per rail; default 90% of rated
    nccl_busbw: Expected | None = Field(None, alias="ncclBusbw")  # GB/s, the all-reduce across the pool's nodes
    rack_label: Annotated[str, Field(min_length=1)] | None = Field(None, alias="rackLabel")
    # how much slower than the pool's median a pair may be before it is slow (with robust z beside it)
    max_deviation: Annotated[float, Field(gt=0, lt=1)] = Field(0.10, alias="maxDeviation")

    @field_validator("mtu")
    @classmethod
    def _an_ib_mtu(cls, mtu: int) -> int:
        if mtu not in IB_MTUS:
            allowed = ", ".join(str(m) for m in IB_MTUS)
            raise ValueError(
                f"mtu {mtu}: an RDMA port's active MTU is one of {allowed} bytes (RoCE too: the RDMA MTU, not the "
                "interface's Ethernet MTU); use one of those"
            )
        return mtu

    def counter_limits(self) -> dict[str, CounterLimit]:
        return {**DEFAULT_COUNTER_LIMITS, **self.counters}

    def rdma_expected(self) -> Expected:
        """The RDMA write bandwidth each rail must reach between two nodes (Gb/s), with its source."""
        if self.rdma_bandwidth is not None:
            return self.rdma_bandwidth
        return Expected(expected=round(self.rated_gbps * DEFAULT_RDMA_SHARE, 3), source=RDMA_SOURCE)

    def rated_problem(self) -> str | None:
        """Why no port of this link layer can run at the rated speed, or None."""
        speeds = port_speeds(self.link_layer)
        if round(self.rated_gbps, 1) in speeds:
            return None
        near = sorted(speeds, key=lambda s: abs(s - self.rated_gbps))[:3]
        return (
            f"ratedGbps {self.rated_gbps:g}: no {self.link_layer.value} port runs at that speed; the nearest are "
            f"{', '.join(f'{s:g}' for s in sorted(near))} Gb/s"
        )
