"""The fabric of a simulated fleet (`fabric` in a SimulatedFleet) and the faults it can be given. Pure: models
and their cross-checks; measure/targets/simulated/fabric.py turns them into raw observations.

What each fault changes, and nothing else (the all-reduce's bus bandwidth is left alone, so each fault is found
by its own check):
  port-down      the rail's port is DOWN/Disabled; perftest on that rail fails to bring its QP up; NCCL leaves
                 the port out of its device list
  port-rate      the rail's port trained to `gbps`; perftest on it reaches that speed's share, not the rated one's
  symbol-errors  the rail's symbol_error counter grows at `perHour` over the loaded window
  link-downed    the rail's link_downed counter grows by `count` over the loaded window
  gdr-off        no peer-memory module and no DMA-BUF on the node: perftest --use_cuda cannot register GPU memory,
                 NCCL's channels on the node run without GDRDMA
  nccl-socket    NCCL on the node uses its socket transport: every collective the node is in runs over NET/Socket
  nic-placement  the rail's NIC sits under the other socket's PCIe switch (its GPU reaches it across the CPUs: SYS)
  slow-rail      perftest between `node` and `peer` on `rail` runs at `factor` of its speed (one bad link)
  rack-link      perftest between any node of one rack and any node of the other runs at `factor` on every rail
                 (a bad top-of-rack uplink)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import Field

from gpucert.spec.documents import Document, Problem

__all__ = [
    "FABRIC_FAULTS",
    "FabricFault",
    "FleetFabric",
    "GdrOffFault",
    "LinkDownedFault",
    "NcclSocketFault",
    "NicPlacementFault",
    "PortDownFault",
    "PortRateFault",
    "RackLinkFault",
    "Racks",
    "SlowRailFault",
    "SymbolErrorsFault",
    "fabric_problems",
]

Rail = Annotated[int, Field(ge=0, le=31)]
Factor = Annotated[float, Field(gt=0, le=2)]


class Racks(Document):
    """Which rack each node is in, as a node label: the fleet's nodes in order, `size` to a rack, the racks named
    `<prefix>1`, `<prefix>2`, ..."""

    label: Annotated[str, Field(min_length=1)] = "topology.kubernetes.io/rack"
    size: Annotated[int, Field(ge=1)]
    prefix: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*)?$")] = "rack-"

    def of(self, index: int) -> str:
        """The rack of the fleet's `index`-th node (0-based)."""
        return f"{self.prefix}{index // self.size + 1}"


class FleetFabric(Document):
    """Every node's RDMA rails: `rails` adapters (`hcas`, or mlx5_0.. by default), one port each, trained to
    `rateGbps`; GPUDirect RDMA through nvidia-peermem; each rail's NIC under the PCIe switch of its GPU."""

    rails: Annotated[int, Field(ge=1, le=32)]
    hcas: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]] | None = None
    link_layer: Literal["InfiniBand", "Ethernet"] = Field("InfiniBand", alias="linkLayer")
    rate_gbps: Annotated[float, Field(gt=0)] = Field(400.0, alias="rateGbps")
    mtu: Literal[256, 512, 1024, 2048, 4096] = 4096
    fw_ver: str = Field("28.39.1002", alias="fwVer")
    # what perftest's ib_write_bw reaches of the port's rate on a healthy link (encoding and headers take the rest)
    efficiency: Annotated[float, Field(gt=0, le=1)] = 0.96
    racks: Racks | None = None
    # the RDMA device plugin resource every node offers (allocatable); null: none (the pods cannot get the HCAs)
    resource: str | None = "rdma/rdma_shared_device_a"

    def hca(self, rail: int) -> str:
        return self.hcas[rail] if self.hcas is not None else f"mlx5_{rail}"


class _OnRail(Document):
    node: str
    rail: Rail


class PortDownFault(_OnRail):
    kind: Literal["port-down"]


class PortRateFault(_OnRail):
    kind: Literal["port-rate"]
    gbps: Annotated[float, Field(gt=0)]


class SymbolErrorsFault(_OnRail):
    kind: Literal["symbol-errors"]
    per_hour: Annotated[float, Field(gt=0)] = Field(alias="perHour")


class LinkDownedFault(_OnRail):
    kind: Literal["link-downed"]
    count: Annotated[int, Field(ge=1)] = 1


class NicPlacementFault(_OnRail):
    kind: Literal["nic-placement"]


class GdrOffFault(Document):
    kind: Literal["gdr-off"]
    node: str


class NcclSocketFault(Document):
    kind: Literal["nccl-socket"]
    node: str


class SlowRailFault(_OnRail):
    kind: Literal["slow-rail"]
    peer: str
    factor: Factor


class RackLinkFault(Document):
    """The uplink between two racks: `node` names one end's rack (any node in it), `peer` the other's."""

    kind: Literal["rack-link"]
    node: str
    peer: str
    factor: Factor


FabricFault = (
    PortDownFault
    | PortRateFault
    | SymbolErrorsFault
    | LinkDownedFault
    | GdrOffFault
    | NcclSocketFault
    | NicPlacementFault
    | SlowRailFault
    | RackLinkFault
)
FABRIC_FAULTS = (
    PortDownFault,
    PortRateFault,
    SymbolErrorsFault,
    LinkDownedFault,
    GdrOffFault,
    NcclSocketFault,
    NicPlacementFault,
    SlowRailFault,
    RackLinkFault,
)


def fabric_problems(
    fabric: FleetFabric | None,
    faults: list[object],
    names: list[str],
    fabric_of: Callable[[str], FleetFabric | None] | None = None,
) -> list[Problem]:
    """A fabric fault needs a fabric (its node's: `fabric_of`, the pool's own or the fleet's); its rail must be
    one of that fabric's, its peer a node of the fleet (and another node), and a rack link two racks."""
    problems: list[Problem] = []
    if fabric is not None and fabric.hcas is not None and len(fabric.hcas) != fabric.rails:
        problems.append((("fabric", "hcas"), f"{len(fabric.hcas)} HCAs named for {fabric.rails} rails"))
    for i, fault in enumerate(faults):
        if not isinstance(fault, FABRIC_FAULTS):
            continue
        own = fabric_of(fault.node) if fabric_of is not None and fault.node in names else fabric
        if own is None:
            problems.append(
                (("faults", i, "kind"), f"a {fault.kind} fault needs the fleet's `fabric` section (or its pool's)")
            )
            continue
        rail = getattr(fault, "rail", None)
        if rail is not None and rail >= own.rails:
            problems.append((("faults", i, "rail"), f"rail {rail} does not exist; rails are 0..{own.rails - 1}"))
        peer = getattr(fault, "peer", None)
        if peer is not None and (peer not in names or peer == fault.node):
            problems.append((("faults", i, "peer"), f"{peer!r} is not another node of this fleet"))
        elif isinstance(fault, RackLinkFault) and fault.node in names:
            racks = own.racks
            if racks is None or racks.of(names.index(fault.node)) == racks.of(names.index(fault.peer)):
                problems.append(
                    (
                        ("faults", i, "peer"),
                        "a rack link joins two racks: give `fabric.racks` and a peer in another rack than `node`",
                    )
                )
    return problems
