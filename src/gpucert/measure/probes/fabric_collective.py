"""A fabric plan's part of a collective across nodes (multinode.py): each node's port counters read before the
traffic and after it, the pair's RDMA per rail first (a pair: fabric_pair.py), and NCCL's own account of the
transport of every channel (NCCL_DEBUG=INFO into a file per process, parsed by fabric_nccl.py). Every process
reads its own node; process 0 gathers them over the rendezvous connections into the one document."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gpucert.measure.evidence import CounterWindow, NcclTransport, ProbeError, RdmaBandwidth
from gpucert.measure.probes.fabric_nccl import merge_transports, read_nccl_logs
from gpucert.measure.probes.fabric_pair import PairPlan, measure_pair, window_of
from gpucert.measure.probes.fabric_sysfs import read_counters
from gpucert.measure.probes.probe_plan import FabricRails

if TYPE_CHECKING:
    from gpucert.measure.probes.device import Device
    from gpucert.measure.probes.rendezvous import Rendezvous

__all__ = ["CollectiveFabric", "NoFabric", "nccl_debug_env"]


def nccl_debug_env(env: MutableMapping[str, str], folder: Path) -> None:
    """NCCL's INFO lines into `folder`, one file per process (NCCL 2.30 src/debug.cc: NCCL_DEBUG_FILE expands %h
    to the host and %p to the pid; the default NCCL_DEBUG_SUBSYS, INIT, carries the channel and NET lines)."""
    env["NCCL_DEBUG"] = "INFO"
    env["NCCL_DEBUG_FILE"] = str(folder / "nccl.%h.%p.log")


class NodePart(BaseModel):
    """What each process sends process 0 at the end: its node's counters window and NCCL's lines it logged."""

    window: CounterWindow
    transport: NcclTransport | None = None


class NoFabric:
    """A plan without the fabric: nothing read around the collective."""

    def start(self, rdzv: Rendezvous, devices: list[Device]) -> None:
        """Before the traffic."""

    def finish(self, rdzv: Rendezvous) -> dict[str, Any]:
        """After it: process 0's parts of the document (every process must call it)."""
        return {}


class CollectiveFabric(NoFabric):
    """Set up before the rendezvous (NCCL reads its debug settings when it starts), started after it."""

    def __init__(
        self,
        node: str,
        *,
        on_gpu: bool,
        env: MutableMapping[str, str] = os.environ,
        select: FabricRails | None = None,
    ) -> None:
        self.node = node
        self.select = select
        self.root = Path(env.get("GPUCERT_SYSFS", "/sys"))
        self.logs: Path | None = None
        if on_gpu:  # the NumPy device runs no NCCL
            self.logs = Path(tempfile.mkdtemp(prefix="gpucert-nccl-"))
            nccl_debug_env(env, self.logs)
        self.rdma: list[RdmaBandwidth] = []
        self.errors: list[ProbeError] = []

    def start(self, rdzv: Rendezvous, devices: list[Device]) -> None:
        self.before = read_counters(self.root)
        if rdzv.processes != 2:
            return
        nodes = (rdzv.peers[0].node, rdzv.peers[1].node)
        gpus: Mapping[int, str] = {d.index: d.pci_bus_id for d in devices if d.pci_bus_id}
        try:
            link = rdzv.link(1 - rdzv.rank)
            found = measure_pair(rdzv.rank, nodes, link, self.root, gpus, PairPlan(), rdzv.host, select=self.select)
            self.rdma = found or []
        except (OSError, ValueError) as exc:  # the sysfs or the exchange: the pair's RDMA error, not the ring's
            self.errors.append(ProbeError(probe="rdma", message=f"{type(exc).__name__}: {exc}"))

    def finish(self, rdzv: Rendezvous) -> dict[str, Any]:
        window = window_of(self.root, "fabric", self.before)
        transport = read_nccl_logs(self.logs, self.node) if self.logs is not None else None
        if self.logs is not None:
            shutil.rmtree(self.logs, ignore_errors=True)
        got = rdzv.gather(NodePart(window=window, transport=transport).model_dump_json().encode())
        if rdzv.rank != 0:  # process 0 writes the document
            return {}
        parts = [NodePart.model_validate_json(g) for g in got]
        transports = [p.transport for p in parts if p.transport is not None]
        return {
            "counters": {peer.node: part.window for peer, part in zip(rdzv.peers, parts, strict=True)},
            "transport": merge_transports(transports) if transports else None,
            "rdma": self.rdma,
            "errors": self.errors,
        }
