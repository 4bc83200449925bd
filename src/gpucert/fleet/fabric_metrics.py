"""The fabric's series for `gpucert metrics`: per node and rail (the pool's fabric says which port is which rail,
where the spec is known), the state of its port and the RDMA bandwidth last measured on it, as the node's newest
certification recorded them. Read once per run folder and node (cached by the caller's scrape, like the figures'
ratios); the labels carry no run id, so the series stay as many as the fleet's ports.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain

from prometheus_client.core import GaugeMetricFamily

from gpucert.errors import GpucertError
from gpucert.evaluate.pairs_index import RdmaRow, index_pairs
from gpucert.evaluate.rules.fabric_ports import rail_port
from gpucert.measure.evidence import RdmaBandwidth
from gpucert.measure.evidence_fabric import HcaPort, NodeFabric
from gpucert.plan.carried_pairs import iter_carried
from gpucert.plan.pairs_files import iter_pairs
from gpucert.plan.rings import read_rings
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.fabric import FabricSpec

__all__ = ["FabricSeries", "PortReading"]


@dataclass(frozen=True, slots=True)
class PortReading:
    hca: str
    port: int
    active: bool  # ACTIVE and LinkUp
    rate_gbps: float | None
    link_layer: str | None
    rdma_gbps: dict[int, float]  # rail -> median of the node's pairs on it (this port's end)


def _active(state: str | None, phys: str | None) -> bool:
    return (state or "").endswith("ACTIVE") and (phys or "").endswith("LinkUp")


def _rails(readings: list[PortReading], fabric: FabricSpec | None) -> dict[tuple[str, int], str]:
    """Which rail each port is, as the pool's fabric says (empty: no spec, or the node's pool declares none)."""
    if fabric is None:
        return {}
    ports = NodeFabric(ports=[HcaPort(hca=p.hca, port=p.port, link_layer=p.link_layer) for p in readings])
    found = {r: rail_port(ports, fabric, r) for r in range(fabric.rails.count)}
    return {(p.hca, p.port): str(r) for r, p in found.items() if p is not None}


@dataclass
class FabricSeries:
    """The fabric families of one scrape, with a cache of each (run, node)'s readings."""

    _cache: dict[tuple[str, str], list[PortReading]] = field(default_factory=dict)
    _multinode: dict[str, list[RdmaBandwidth | RdmaRow]] = field(default_factory=dict)

    def _rdma(self, folder: RunFolder) -> list[RdmaBandwidth | RdmaRow]:
        """Every RDMA figure of the run: the fabric stage's pairs (its round documents) and the collective's own."""
        if folder.id not in self._multinode:
            found: list[RdmaBandwidth | RdmaRow] = []
            try:
                found = [r for ring in read_rings(folder).values() for r in ring.rdma]
                # the pairs one document at a time (a re-test: its carried pairs too), as the evaluation reads them
                found += index_pairs(chain(iter_carried(folder), iter_pairs(folder.pairs_path.parent))).rdma
            except (GpucertError, OSError):
                found = []
            self._multinode[folder.id] = found
        return self._multinode[folder.id]

    def readings(self, folder: RunFolder, node: str) -> list[PortReading]:
        key = (folder.id, node)
        if key not in self._cache:
            try:
                ev = folder.read_evidence(node)
            except (GpucertError, OSError):
                ev = None
            nf = ev.fabric if ev is not None and ev.collected else None
            figures: dict[str, dict[int, list[float]]] = {}
            for r in self._rdma(folder):
                if r.error or r.unit != "Gb/s" or node not in (r.client, r.server):
                    continue
                figure = r.median if isinstance(r, RdmaRow) else statistics.median(r.samples) if r.samples else None
                if figure is None:
                    continue
                port = r.client_hca if node == r.client else r.server_hca
                figures.setdefault(port, {}).setdefault(r.rail, []).append(figure)
            self._cache[key] = [
                PortReading(
                    p.hca,
                    p.port,
                    _active(p.state, p.phys_state),
                    p.rate_gbps,
                    p.link_layer,
                    {rail: statistics.median(v) for rail, v in figures.get(p.key, {}).items()},
                )
                for p in (nf.ports if nf is not None else [])
            ]
        return self._cache[key]

    def keep(self, used: set[tuple[str, str]]) -> None:
        """Forget what this scrape did not use (the cache stays as large as the fleet)."""
        self._cache = {k: v for k, v in self._cache.items() if k in used}
        self._multinode = {k: v for k, v in self._multinode.items() if k in {run for run, _ in used}}

    def families(
        self, newest: list[tuple[RunFolder, str]], fabrics: Mapping[str, FabricSpec] | None = None
    ) -> list[GaugeMetricFamily]:
        """The series of every node's newest run folder (`newest`: (folder, node) pairs); none where no node has an
        RDMA port on record."""
        active = GaugeMetricFamily(
            "gpucert_fabric_port_active",
            "Whether the node's RDMA port was ACTIVE and LinkUp (1) or not (0) in its newest certification.",
            labels=["node", "rail", "hca", "port"],
        )
        rate = GaugeMetricFamily(
            "gpucert_fabric_port_rate_gbps",
            "The rate the node's RDMA port trained to, in Gb/s, in its newest certification.",
            labels=["node", "rail", "hca", "port"],
        )
        rdma = GaugeMetricFamily(
            "gpucert_fabric_rail_rdma_gbps",
            "The RDMA write bandwidth last measured on the node's rail (median of its pairs), in Gb/s.",
            labels=["node", "rail", "hca", "port"],
        )
        for folder, node in newest:
            readings = self.readings(folder, node)
            rails = _rails(readings, (fabrics or {}).get(node))
            for p in readings:
                labels = [node, rails.get((p.hca, p.port), ""), p.hca, str(p.port)]
                active.add_metric(labels, 1.0 if p.active else 0.0)
                if p.rate_gbps is not None:
                    rate.add_metric(labels, p.rate_gbps)
                for rail, gbps in sorted(p.rdma_gbps.items()):
                    rdma.add_metric([node, str(rail), p.hca, str(p.port)], gbps)
        return [f for f in (active, rate, rdma) if f.samples]  # a fleet without a fabric shows none of them
