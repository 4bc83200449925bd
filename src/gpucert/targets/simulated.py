"""A simulated fleet: Kubernetes-shaped objects and noisy raw samples, with the faults of a SimulatedFleet.

It produces observations only (what a real cluster and real probes would report) and never says what is wrong:
the suites must find every injected fault, and nothing else. Deterministic: every node draws from its own
generator seeded by (fleet seed, node number), so the order and parallelism of measuring change nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

import numpy as np

from gpucert import __version__
from gpucert.baseline import GpuBaseline, load_baseline
from gpucert.errors import NodeBusyError
from gpucert.evidence import (
    EccCounts,
    FabricEvidence,
    GpuEvidence,
    Health,
    Measurement,
    NcclEvidence,
    NcclPoint,
    NodeEvidence,
    P2pEvidence,
    P2pPair,
    PcieLink,
    ProbeError,
    RemappedRows,
    SystemFacts,
    XidEvent,
)
from gpucert.fleet import (
    DcgmFault,
    EccFault,
    Fault,
    MissingComponentFault,
    MissingGpuFault,
    OrderingFault,
    PcieLinkFault,
    RemappedRowsFault,
    SimulatedFleet,
    SlowFault,
    SwappedGpuFault,
    TemperatureFault,
    ThrottleFault,
    UnhealthyGpuFault,
    UnreachableFault,
    VersionFault,
    XidFault,
    load_fleet,
)
from gpucert.names import check_node_name, inside
from gpucert.probes.dcgm import parse_diag
from gpucert.spec import ClusterSpec, Probe
from gpucert.spec import SimulatedTarget as SimulatedTargetSpec
from gpucert.stack.compat import cuda_of_driver
from gpucert.targets.base import EvidenceSink, MeasurePlan

__all__ = ["SimulatedTarget"]

T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
DEFAULT_NODE_STACK = {
    "kubelet": "v1.31.4",
    "containerRuntime": "containerd://1.7.24",
    "kernel": "5.15.0-131-generic",
    "osImage": "Ubuntu 22.04.5 LTS",
    "dcgm": "4.2.3",
}
IMAGES = {
    "driver": "nvcr.io/nvidia/driver:{v}-ubuntu22.04",
    "container-toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v{v}-ubuntu20.04",
    "device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v{v}",
    "gpu-feature-discovery": "nvcr.io/nvidia/k8s-device-plugin:v{v}",
    "dcgm": "nvcr.io/nvidia/cloud-native/dcgm:{v}-1-ubuntu22.04",
    "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:{v}-ubuntu22.04",
}
SAMPLES = {"memory": 20, "compute": 20, "pcie": 10, "p2p": 5, "nccl": 10}
NCCL_SIZES = [1 << s for s in range(20, 34, 2)]  # 1 MiB .. 8 GiB
NCCL_HALF_SIZE = 64 << 20  # message size at which the simulated bus reaches half its plateau
PCI_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
SLOWDOWN_C = 87.0
# a recertification lock older than this is not honoured: its holder crashed or lives on another host (a level-4
# DCGM diagnostic of an 8-GPU node takes a few hours; twelve leaves room for a wait for the node to drain)
LOCK_MAX_AGE_S = 12 * 3600
THROTTLE_BITS = {"hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80}
DCGM_LEVEL_TESTS = {
    1: ["software"],
    2: ["pcie", "memory"],
    3: ["diagnostic", "memory_bandwidth", "targeted_stress", "targeted_power", "nvbandwidth"],
    4: ["memtest", "pulse_test"],
}
DCGM_CATEGORY = {
    "software": "Deployment",
    "pcie": "Integration",
    "memory": "Hardware",
    "diagnostic": "Hardware",
    "memtest": "Hardware",
    "nvbandwidth": "Integration",
}


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _sig(x: float) -> float:
    return float(f"{x:.5g}")


@dataclass
class _NodeFaults:
    """The faults of one node, indexed for the generator."""

    slow: dict[tuple[int | None, str], float] = field(default_factory=dict)
    gpu: dict[int, list[Fault]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    ordering: list[OrderingFault] = field(default_factory=list)
    missing: set[int] = field(default_factory=set)
    swapped: set[int] = field(default_factory=set)
    unhealthy: set[int] = field(default_factory=set)
    missing_components: set[str] = field(default_factory=set)
    unreachable: bool = False


class SimulatedTarget:
    kind = "simulated"

    def __init__(self, spec: ClusterSpec, fleet: SimulatedFleet, baseline: GpuBaseline) -> None:
        self.spec = spec
        self.fleet = fleet
        self.baseline = baseline
        pins = {c.name: c.version for c in spec.stack.components}
        self.versions = {**DEFAULT_NODE_STACK, **pins, **fleet.stack}
        self.names = fleet.nodes.names()
        self.faults: dict[str, _NodeFaults] = {n: _NodeFaults() for n in self.names}
        for f in fleet.faults:
            nf = self.faults[f.node]
            match f:
                case SlowFault():
                    nf.slow[(f.gpu, f.metric)] = nf.slow.get((f.gpu, f.metric), 1.0) * f.factor
                case VersionFault():
                    nf.versions[f.component] = f.version
                case OrderingFault():
                    nf.ordering.append(f)
                case MissingGpuFault():
                    nf.missing.add(f.gpu)
                case SwappedGpuFault():
                    nf.swapped.add(f.gpu)
                case UnhealthyGpuFault():
                    nf.unhealthy.add(f.gpu)
                case MissingComponentFault():
                    nf.missing_components.add(f.component)
                case UnreachableFault():
                    nf.unreachable = True
                case _:
                    nf.gpu.setdefault(f.gpu, []).append(f)

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> SimulatedTarget:
        assert isinstance(spec.target, SimulatedTargetSpec)
        fleet = load_fleet(spec.resolve(spec.target.fleet, "target.fleet"), spec=spec)
        sku_file = spec.resolve(spec.certify.baseline, "certify.baseline").parent / f"{fleet.sku}.yaml"
        return cls(spec, fleet, load_baseline(sku_file))

    # ---- the cluster's objects -------------------------------------------------------------------------------

    def _version(self, node: str, component: str) -> str:
        return self.faults[node].versions.get(component, self.versions.get(component, "0.0.0"))

    def _present(self, node: str) -> list[int]:
        """Physical GPU slots that answer on the bus; NVML numbers them 0.. in bus order."""
        return [s for s in range(self.fleet.nodes.gpus_per_node) if s not in self.faults[node].missing]

    def _node_object(self, node: str) -> dict[str, Any]:
        nf = self.faults[node]
        count = len(self._present(node))
        driver = self._version(node, "driver")
        labels = {
            "kubernetes.io/hostname": node,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.baseline.product,
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.memory": str(self.baseline.memory_mib),
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.runtime-version.full": cuda_of_driver(driver) or "",
        }
        for name, source in self.spec.stack.sources().items():
            if source.label is not None:
                labels[source.label] = self._version(node, name)
        healthy = count - len(nf.unhealthy - nf.missing)
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastTransitionTime": _iso(T0),
        }
        if nf.unreachable:
            ready = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": _iso(T0),
            }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": labels, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, node))},
            "status": {
                "capacity": {"cpu": "224", "memory": "2113435500Ki", "nvidia.com/gpu": str(count)},
                "allocatable": {"cpu": "223", "memory": "2102949740Ki", "nvidia.com/gpu": str(healthy)},
                "conditions": [ready],
                "nodeInfo": {
                    "kubeletVersion": self._version(node, "kubelet"),
                    "containerRuntimeVersion": self._version(node, "containerRuntime"),
                    "kernelVersion": self._version(node, "kernel"),
                    "osImage": self._version(node, "osImage"),
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                },
            },
        }

    def _pod_times(self, node: str, number: int) -> dict[str, tuple[datetime, datetime]]:
        """Start and Ready time of each component: after its dependencies became Ready, unless a fault says not."""
        graph = {c.name: set(c.after) for c in self.spec.stack.components}
        base = T0 + timedelta(minutes=5, seconds=number % 60)
        times: dict[str, tuple[datetime, datetime]] = {}
        try:
            order = list(TopologicalSorter(graph).static_order())
        except CycleError:  # a cyclic recipe is the static gate's finding; bring components up in spec order
            order = list(graph)
        for name in order:
            deps = [times[d][1] for d in graph.get(name, ()) if d in times]
            start = max(deps, default=base) + timedelta(seconds=5)
            times[name] = (start, start + timedelta(seconds=20))
        for f in self.faults[node].ordering:
            if f.before in times and f.component in times:
                start = times[f.before][1] - timedelta(seconds=45)
                times[f.component] = (start, start + timedelta(seconds=10))
        return times

    def _pods(self, node: str, number: int) -> list[dict[str, Any]]:
        times = self._pod_times(node, number)
        pods = []
        sources = self.spec.stack.sources()
        for comp in self.spec.stack.components:
            source = sources.get(comp.name)
            if source is None or source.label is not None or comp.name not in times:
                continue
            if comp.name in self.faults[node].missing_components:
                continue
            start, ready_at = times[comp.name]
            app = source.app or source.daemonset or comp.name
            image = IMAGES.get(comp.name, "nvcr.io/nvidia/" + comp.name + ":v{v}").format(
                v=self._version(node, comp.name)
            )
            suffix = hashlib.sha256(f"{node}/{comp.name}".encode()).hexdigest()[:5]
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{app}-{suffix}",
                        "namespace": source.namespace,
                        "labels": {"app": app},
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "DaemonSet",
                                "name": app,
                                "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, app)),
                            }
                        ],
                    },
                    "spec": {"nodeName": node, "containers": [{"name": source.container, "image": image}]},
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _iso(ready_at)}],
                        "containerStatuses": [
                            {
                                "name": source.container,
                                "image": image,
                                "ready": True,
                                "restartCount": 0,
                                "state": {"running": {"startedAt": _iso(start)}},
                            }
                        ],
                    },
                }
            )
        return pods

    def observe(self) -> tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]:
        nodes: list[Mapping[str, Any]] = [self._node_object(n) for n in self.names]
        pods: list[Mapping[str, Any]] = [p for i, n in enumerate(self.names, 1) for p in self._pods(n, i)]
        return nodes, pods

    # ---- measurements ----------------------------------------------------------------------------------------

    def _rng(self, node: str) -> np.random.Generator:
        return np.random.default_rng([self.fleet.seed, self.names.index(node) + 1])

    def _factor(self, node: str, slot: int | None, metric: str) -> float:
        slow = self.faults[node].slow
        f = slow.get((None, metric), 1.0)
        return f * slow.get((slot, metric), 1.0) if slot is not None else f

    def _samples(self, rng: np.random.Generator, nominal: float, n: int) -> list[float]:
        cv = self.fleet.noise.cv
        return [_sig(x) for x in nominal * (1 + cv * rng.standard_normal(n))]

    def _health(self, rng: np.random.Generator, node: str, slot: int) -> Health:
        ecc, rows = (
            EccCounts(volatile_corrected=0, volatile_uncorrected=0, aggregate_corrected=0, aggregate_uncorrected=0),
            RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
        )
        gen, width = self.baseline.pcie.generation, self.baseline.pcie.width
        pcie = PcieLink(
            current_generation=gen, current_width=width, max_generation=gen, max_width=width, under_load=True
        )
        reasons, temp, xids = 0x1, round(float(30 + 8 * rng.random()), 1), []
        for f in self.faults[node].gpu.get(slot, []):
            match f:
                case EccFault():
                    ecc = EccCounts(
                        volatile_corrected=f.corrected,
                        volatile_uncorrected=f.uncorrected,
                        aggregate_corrected=f.corrected,
                        aggregate_uncorrected=f.uncorrected,
                    )
                case RemappedRowsFault():
                    rows = RemappedRows(
                        correctable=0,
                        uncorrectable=f.uncorrectable or int(f.failure or f.pending),
                        pending=f.pending,
                        failure=f.failure,
                    )
                case PcieLinkFault():
                    pcie = PcieLink(
                        current_generation=f.generation,
                        current_width=f.width,
                        max_generation=gen,
                        max_width=width,
                        under_load=True,
                    )
                case ThrottleFault():
                    reasons = THROTTLE_BITS[f.reason]
                case XidFault():
                    xids.append(XidEvent(code=f.code, time=_iso(T0 + timedelta(hours=1)), text=""))
                case TemperatureFault():
                    temp = f.celsius
        return Health(
            ecc=ecc,
            remapped_rows=rows,
            pcie=pcie,
            clock_event_reasons=reasons,
            temperature_c=temp,
            slowdown_temperature_c=SLOWDOWN_C,
            power_w=round(float(68 + 6 * rng.random()), 1),
            power_limit_w=700.0,
            xid=xids,
            nvlink_active=[True] * 18,
        )

    def _gpu(self, rng: np.random.Generator, node: str, index: int, slot: int, probes: set[Probe]) -> GpuEvidence:
        board = "/replacement" if slot in self.faults[node].swapped else ""
        digest = hashlib.sha256(f"{self.fleet.seed}/{node}/{slot}{board}".encode()).hexdigest()
        measurements: dict[str, Measurement] = {}
        for metric, b in self.baseline.metrics.items():
            family = metric.split(".")[0]
            if family in ("p2p", "nccl") or Probe(family) not in probes:
                continue
            n = SAMPLES[family]
            measurements[metric] = Measurement(
                unit=b.unit,
                samples=self._samples(rng, b.expected * self._factor(node, slot, metric), n),
                params={"simulated": True},
            )
        return GpuEvidence(
            index=index,
            uuid=f"GPU-{uuid.UUID(digest[:32])}",
            serial=str(int(digest[:12], 16) % 10**13).zfill(13),
            pci_bus_id=f"00000000:{PCI_BUSES[slot % len(PCI_BUSES)]:02X}:00.0",
            product=self.baseline.product.replace("-", " "),
            memory_mib=self.baseline.memory_mib,
            vbios="96.00.99.00.01",
            health=self._health(rng, node, slot) if Probe.HEALTH in probes else None,
            measurements=measurements,
        )

    def _p2p(self, rng: np.random.Generator, node: str, slots: list[int]) -> P2pEvidence | None:
        b = self.baseline.metrics.get("p2p.bandwidth")
        if b is None:
            return None
        pairs = []
        for i, si in enumerate(slots):
            for j, sj in enumerate(slots):
                if i != j:
                    f = min(self._factor(node, si, "p2p.bandwidth"), self._factor(node, sj, "p2p.bandwidth"))
                    pairs.append(
                        P2pPair(
                            src=i,
                            dst=j,
                            peer_access=True,
                            samples=self._samples(rng, b.expected * f, SAMPLES["p2p"]),
                        )
                    )
        return P2pEvidence(unit=b.unit, pairs=pairs, params={"bytes": 1 << 30, "simulated": True})

    def _nccl(
        self, rng: np.random.Generator, ranks: int, factor: float, metric: str = "nccl.all_reduce"
    ) -> NcclEvidence | None:
        b = self.baseline.metrics.get(metric)
        if b is None:
            return None
        bus_factor = 2 * (ranks - 1) / ranks
        plateau = b.expected * factor * (NCCL_SIZES[-1] + NCCL_HALF_SIZE) / NCCL_SIZES[-1]
        points = []
        for size in NCCL_SIZES:
            busbw = np.array(self._samples(rng, plateau * size / (size + NCCL_HALF_SIZE), SAMPLES["nccl"]))
            algbw = busbw / bus_factor
            time_us = size / (algbw * 1e9) * 1e6
            points.append(
                NcclPoint(
                    size_bytes=size,
                    time_us=[_sig(t) for t in time_us],
                    algbw=[_sig(a) for a in algbw],
                    busbw=[float(x) for x in busbw],
                )
            )
        return NcclEvidence(ranks=ranks, points=points, correct=True, params={"simulated": True})

    def _dcgm_document(self, node: str, slots: list[int], level: int, serials: list[str]) -> dict[str, Any]:
        failing = {
            (f.test, slots.index(s))
            for s in slots
            for f in self.faults[node].gpu.get(s, [])
            if isinstance(f, DcgmFault)
        }
        tests = [t for lvl in range(1, level + 1) for t in DCGM_LEVEL_TESTS[lvl]]
        tests += sorted({t for t, _ in failing} - set(tests))
        categories: dict[str, list[dict[str, Any]]] = {}
        for test in tests:
            results = []
            for idx in range(len(slots)):
                r: dict[str, Any] = {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entity_id": idx,
                    "status": "Pass",
                }
                if (test, idx) in failing:
                    r["status"] = "Fail"
                    r["warnings"] = [
                        {
                            "error_category": 3,
                            "error_id": 83,
                            "error_severity": 2,
                            "warning": f"Simulated {test} failure on GPU {idx}",
                        }
                    ]
                results.append(r)
            summary = "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"
            categories.setdefault(DCGM_CATEGORY.get(test, "Stress"), []).append(
                {"name": test, "results": results, "test_summary": {"status": summary}}
            )
        return {
            "DCGM Diagnostic": {"test_categories": [{"category": c, "tests": t} for c, t in categories.items()]},
            "entity_groups": [
                {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entities": [{"entity_id": i, "device_id": "2330", "serial_num": s} for i, s in enumerate(serials)],
                }
            ],
            "metadata": {
                "version": self.versions["dcgm"],
                "Driver Version Detected": self._version(node, "driver"),
            },
        }

    def measure_node(self, node: str, plan: MeasurePlan) -> NodeEvidence:
        started = _iso(datetime.now(UTC))
        nf = self.faults[node]
        if nf.unreachable:
            return NodeEvidence(
                node=node,
                target=self.kind,
                probe_version=__version__,
                started=started,
                finished=started,
                collected=False,
                errors=[
                    ProbeError(probe="*", message="probe pod did not start: node is not Ready (NodeStatusUnknown)")
                ],
            )
        rng = self._rng(node)
        probes = set(plan.probes)
        slots = self._present(node)
        gpus = [self._gpu(rng, node, i, s, probes) for i, s in enumerate(slots)]
        errors = []
        if len(slots) < 2:  # as the probe runner says it: nothing to measure between GPUs
            errors = [
                ProbeError(
                    probe=p.value,
                    unavailable=True,
                    message=f"this node has {len(slots)} GPU(s): nothing to measure between GPUs",
                )
                for p in (Probe.P2P, Probe.NCCL)
                if p in probes
            ]
        several = len(slots) >= 2
        dcgm = None
        if Probe.DCGM in probes:
            doc = self._dcgm_document(node, slots, plan.dcgm_level, [g.serial or "" for g in gpus])
            failed = any(
                r.get("status") == "Fail"
                for c in doc["DCGM Diagnostic"]["test_categories"]
                for t in c["tests"]
                for r in t["results"]
            )
            dcgm = parse_diag(doc, level=plan.dcgm_level, exit_code=226 if failed else 0)
        return NodeEvidence(
            node=node,
            target=self.kind,
            probe_version=__version__,
            started=started,
            finished=_iso(datetime.now(UTC)),
            system=SystemFacts(
                driver_version=self._version(node, "driver"),
                cuda_driver_version=cuda_of_driver(self._version(node, "driver")),
                kernel=self._version(node, "kernel"),
                os=self._version(node, "osImage"),
            ),
            gpus=gpus,
            p2p=self._p2p(rng, node, slots) if Probe.P2P in probes and several else None,
            nccl=(
                self._nccl(rng, len(slots), self._factor(node, None, "nccl.all_reduce"))
                if Probe.NCCL in probes and several
                else None
            ),
            dcgm=dcgm,
            errors=errors,
        )

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        for node in nodes:
            sink(self.measure_node(node, plan))

    def node_control(self, reports: Path) -> SimulatedNodeControl:
        return SimulatedNodeControl(reports / ".simulated-nodes" / self.spec.metadata.name)

    def measure_fabrics(self, groups: list[list[str]], plan: MeasurePlan) -> list[FabricEvidence]:
        return [self._fabric(nodes, plan) for nodes in groups]

    def _fabric(self, nodes: list[str], plan: MeasurePlan) -> FabricEvidence:
        """A ring across the nodes runs at the pace of its slowest link: the slowest node's factor sets the bus."""
        started = _iso(datetime.now(UTC))
        gpus = min(len(self._present(n)) for n in nodes)
        factor = min(self._factor(n, None, "nccl.all_reduce.multinode") for n in nodes)
        rng = np.random.default_rng([self.fleet.seed, 0x6D6E, *(self.names.index(n) for n in nodes)])
        ranks = gpus * len(nodes)
        sweep = self._nccl(rng, ranks, factor, "nccl.all_reduce.multinode") if ranks >= 2 else None
        errors = []
        if ranks < 2:
            errors.append(ProbeError(probe="nccl", message=f"{ranks} GPU(s) across {', '.join(nodes)}: no collective"))
        elif sweep is None:
            errors.append(
                ProbeError(
                    probe="nccl",
                    unavailable=True,
                    message=f"the baseline {self.baseline.sku} has no nccl.all_reduce.multinode figure to simulate",
                )
            )
        return FabricEvidence(
            run_id=plan.run_id,
            target=self.kind,
            probe_version=__version__,
            started=started,
            finished=_iso(datetime.now(UTC)),
            nodes=nodes,
            gpus_per_node=gpus,
            collected=sweep is not None,
            nccl=sweep,
            errors=errors,
        )


class SimulatedNodeControl:
    """Recertification's hold on a simulated node: a lock file per node (held by a live process) and the node's
    cordon, labels and annotations in `<state_dir>/<node>.json`, where a Kubernetes node would keep them."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def _state_path(self, node: str) -> Path:
        return inside(self.state_dir, f"{check_node_name(node)}.json")

    def state(self, node: str) -> dict[str, Any]:
        path = self._state_path(node)
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return data
        return {"unschedulable": False, "labels": {}, "annotations": {}}

    def _save(self, node: str, state: dict[str, Any]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path(node).with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self._state_path(node))

    def _lock_path(self, node: str) -> Path:
        return inside(self.state_dir, f"{check_node_name(node)}.lock")

    def _live(self, other: dict[str, Any]) -> bool:
        """Whether a lock's holder may still be running: on this host, a live pid; anywhere, younger than
        LOCK_MAX_AGE_S (a holder on another host cannot be asked, and no lock is held forever)."""
        try:
            acquired = datetime.strptime(str(other.get("acquired")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return False
        if (datetime.now(UTC) - acquired).total_seconds() > LOCK_MAX_AGE_S:
            return False
        if other.get("host") not in (None, socket.gethostname()):
            return True
        return _alive(int(other.get("pid", 0) or 0))

    @contextlib.contextmanager
    def lock(self, node: str, holder: str) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self._lock_path(node)
        mine = json.dumps(
            {"holder": holder, "pid": os.getpid(), "host": socket.gethostname(), "acquired": _iso(datetime.now(UTC))}
        )
        for _ in range(3):
            # the lock appears with its content or not at all: write it aside, then link it into place (link
            # fails when the lock exists), so no second holder ever reads an empty lock and takes it over
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
            tmp.write_text(mine, encoding="utf-8")
            try:
                os.link(tmp, path)
            except FileExistsError:
                try:
                    other = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    other = {}
                if self._live(other):
                    raise NodeBusyError(
                        f"{node} is already being recertified by {other.get('holder')} (lock {path}, acquired "
                        f"{other.get('acquired')}); nothing was changed. Wait for that run to finish"
                    ) from None
                # its holder is gone (or the lock is older than LOCK_MAX_AGE_S): take it over, but only the
                # lock we read, so two takers cannot both win
                stale = path.with_name(f".{path.name}.stale.{uuid.uuid4().hex}")
                try:
                    os.rename(path, stale)
                except FileNotFoundError:
                    continue  # another taker moved it first
                try:
                    moved = json.loads(stale.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    moved = {}
                if moved != other:  # a fresh lock was taken between our read and our move: give it back
                    with contextlib.suppress(FileExistsError):
                        os.link(stale, path)
                stale.unlink(missing_ok=True)
                continue
            finally:
                tmp.unlink(missing_ok=True)
            break
        else:
            raise NodeBusyError(f"could not take the lock {path} for {node}: others keep taking it; try again")
        try:
            yield
        finally:
            if self.holder(node) == holder:  # a hold taken over by another run is theirs to release
                path.unlink(missing_ok=True)

    def holder(self, node: str) -> str | None:
        try:
            holder: str | None = json.loads(self._lock_path(node).read_text(encoding="utf-8"))["holder"]
        except (OSError, json.JSONDecodeError, KeyError):
            return None
        return holder

    def cordon(self, node: str) -> bool:
        state = self.state(node)
        was = bool(state["unschedulable"])
        state["unschedulable"] = True
        self._save(node, state)
        return was

    def wait_idle(self, node: str, *, drain: bool, timeout_s: float) -> list[str]:
        return []  # a simulated fleet runs no workloads

    def mark(self, node: str, *, labels: dict[str, str], annotations: dict[str, str], uncordon: bool) -> None:
        state = self.state(node)
        state["labels"].update(labels)
        state["annotations"].update(annotations)
        if uncordon:
            state["unschedulable"] = False
        self._save(node, state)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
