"""The simulated probes: what a probe pod would report for each node, as raw noisy samples and readings (NVML
health, DCGM's own JSON document parsed like the real one, P2P matrix, NCCL sweep, the all-reduce across nodes).
They never say what is wrong: the evaluation must find each fault from the numbers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from gpucert._version import __version__
from gpucert.measure.evidence import (
    FabricEvidence,
    GpuEvidence,
    Health,
    Measurement,
    NcclEvidence,
    NcclPoint,
    NodeEvidence,
    P2pEvidence,
    P2pPair,
    PreflightStep,
    ProbeError,
    SystemFacts,
)
from gpucert.measure.probes import preflight
from gpucert.measure.probes.dcgm import parse_diag
from gpucert.measure.probes.dcgm_boards import tie_to_boards
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import fabric
from gpucert.measure.targets.simulated.dcgm import dcgm_document
from gpucert.measure.targets.simulated.nvml import nvml_health
from gpucert.measure.targets.simulated.world import OUTLIER_STREAM, World, cuda_of
from gpucert.measure.targets.simulated.world import iso as _iso
from gpucert.measure.targets.simulated.world import sig as _sig
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import Probe
from gpucert.spec.simulated_fleet import (
    PreflightFault,
)

__all__ = ["SimulatedProbes"]

# what each preflight step reports for the commonest cause of its failure (the real step's words)
NVML_MISSING = "NVMLError_LibraryNotFound"
SIMULATED_PREFLIGHT = {
    "home": "OSError: [Errno 30] Read-only file system: '/nonexistent'",
    "cache": "PermissionError: [Errno 13] Permission denied: '/opt/gpucert/.cupy'",
    "nvml": f"{NVML_MISSING}: NVML Shared Library Not Found",
    "cupy": "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
    "kernel": "RuntimeError: Failed to find CUDA headers",
    "cublas": "CUBLASError: CUBLAS_STATUS_NOT_INITIALIZED",
    "nccl": "ImportError: CuPy found no NCCL library (cupy.cuda.nccl.available is False)",
    "dcgmi": "FileNotFoundError: [Errno 2] No such file or directory: 'dcgmi'",
    "rdma": "FileNotFoundError: ib_write_bw not found on PATH",
}
SAMPLES = {"memory": 20, "compute": 20, "pcie": 10, "p2p": 5, "nccl": 10}
NCCL_SIZES = [1 << s for s in range(20, 34, 2)]  # 1 MiB .. 8 GiB
NCCL_HALF_SIZE = 64 << 20  # message size at which the simulated bus reaches half its plateau
PCI_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]


class SimulatedProbes(World):
    """Each node's evidence document, and the all-reduce across groups of nodes."""

    kind = "simulated"

    def _samples(
        self,
        rng: np.random.Generator,
        nominal: float,
        n: int,
        *,
        factors: np.ndarray | None = None,
        outliers: np.random.Generator | None = None,
    ) -> list[float]:
        """`n` noisy samples around `nominal`: Gaussian (or Student-t, `noise.tails.df`) with sd `noise.cv`, times
        the per-sample `factors` of faults that come and go, and `noise.tails.outliers` of them slow (drawn from
        `outliers`, a generator of its own, so fleets without tails keep their samples)."""
        noise = self.fleet.noise
        tails = noise.tails
        if tails is not None and tails.df is not None:
            z = rng.standard_t(tails.df, n) * np.sqrt((tails.df - 2) / tails.df)
        else:
            z = rng.standard_normal(n)
        x = nominal * (1 + noise.cv * z)
        if factors is not None:
            x = x * factors
        if tails is not None and tails.outliers and outliers is not None:
            hit = outliers.random(n) < tails.outliers
            x = np.where(hit, x * (1 - tails.depth * outliers.random(n)), x)
        return [_sig(v) for v in x]

    def _gpu(
        self,
        rng: np.random.Generator,
        node: str,
        index: int,
        slot: int,
        probes: set[Probe],
        plan: MeasurePlan,
        aux: np.random.Generator,
    ) -> GpuEvidence:
        measurements: dict[str, Measurement] = {}
        baseline = self.baseline_of(node)
        for metric, b in baseline.metrics.items():
            family = metric.split(".")[0]
            if family in ("p2p", "nccl") or Probe(family) not in probes:
                continue
            n = max(SAMPLES[family], plan.samples.get(family, 0))
            nominal = b.expected * self._factor(node, slot, metric) * self._offset(node, slot, metric)
            nominal *= self._run_factor(node, slot, metric, plan.run_id)
            samples = self._samples(rng, nominal, n, factors=self._varying(node, slot, metric, n), outliers=aux)
            measurements[metric] = Measurement(unit=b.unit, samples=samples, params={"simulated": True})
        between = [m for p, m in (("p2p", "p2p.bandwidth"), ("nccl", "nccl.all_reduce")) if Probe(p) in probes]
        loaded = [*measurements, *(between if len(self._present(node)) >= 2 else [])]
        faults = self.faults[node].gpu.get(slot, [])
        return self._board(
            node,
            index,
            slot,
            baseline,
            health=nvml_health(rng, baseline, faults, loaded) if Probe.HEALTH in probes else None,
            measurements=measurements,
        )

    def _board(
        self,
        node: str,
        index: int,
        slot: int,
        baseline: GpuBaseline,
        health: Health | None = None,
        measurements: dict[str, Measurement] | None = None,
    ) -> GpuEvidence:
        """The GPU as NVML names it (UUID, serial, bus id, product, memory, VBIOS), with what was read of it: the
        one source of a board's identity for the node's measurement and for the identity read alike."""
        gpu_uuid, serial = self.board_identity(node, slot)
        return GpuEvidence(
            index=index,
            uuid=gpu_uuid,
            serial=serial,
            pci_bus_id=f"00000000:{PCI_BUSES[slot % len(PCI_BUSES)]:02X}:00.0",
            product=baseline.product.replace("-", " "),
            memory_mib=baseline.memory_mib,
            vbios="96.00.99.00.01",
            health=health,
            measurements=measurements or {},
        )

    def _system(self, node: str) -> SystemFacts:
        driver = self._version(node, "driver")
        return SystemFacts(
            driver_version=driver,
            cuda_driver_version=cuda_of(driver),
            kernel=self._version(node, "kernel"),
            os=self._version(node, "osImage"),
        )

    def identity(self, node: str, plan: MeasurePlan) -> NodeEvidence:
        """What a light NVML read of the node answers (a re-test's read of a node it may carry): the driver and
        each GPU present, named as measure_node names it, and nothing drawn (no reading, no figure, no fabric: the
        re-test compares the identity alone, acceptance/retest.identity_change). A node measure_node could not
        measure (not Ready, a failed preflight) answers as it would there: not collected, saying why."""
        started = _iso(datetime.now(UTC))
        nf = self.faults[node]
        if nf.unreachable or nf.preflight is not None:
            return self.measure_node(node, plan)  # no probe ran: nothing drawn there either
        baseline = self.baseline_of(node)
        return NodeEvidence(
            node=node,
            target=self.kind,
            probe_version=__version__,
            started=started,
            finished=started,
            system=self._system(node),
            gpus=[self._board(node, i, s, baseline) for i, s in enumerate(self._present(node))],
        )

    def _p2p(
        self, rng: np.random.Generator, node: str, slots: list[int], plan: MeasurePlan, aux: np.random.Generator
    ) -> P2pEvidence | None:
        b = self.baseline_of(node).metrics.get("p2p.bandwidth")
        if b is None:
            return None
        n = max(SAMPLES["p2p"], plan.samples.get("p2p", 0))
        offset = self._offset(node, None, "p2p.bandwidth") * self._run_factor(node, None, "p2p.bandwidth", plan.run_id)
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
                            samples=self._samples(rng, b.expected * f * offset, n, outliers=aux),
                        )
                    )
        return P2pEvidence(unit=b.unit, pairs=pairs, params={"bytes": 1 << 30, "simulated": True})

    def _nccl(
        self,
        rng: np.random.Generator,
        ranks: int,
        factor: float,
        node: str,
        metric: str = "nccl.all_reduce",
        *,
        own: bool = False,
        n: int = SAMPLES["nccl"],
        aux: np.random.Generator | None = None,
    ) -> NcclEvidence | None:
        """The sweep at the SKU of `node`'s pool; `own` for the node's own all-reduce (its offset and its faults
        that come and go), not for one across nodes."""
        b = self.baseline_of(node).metrics.get(metric)
        if b is None:
            return None
        if own:
            factor *= self._offset(node, None, metric)
        bus_factor = 2 * (ranks - 1) / ranks
        plateau = b.expected * factor * (NCCL_SIZES[-1] + NCCL_HALF_SIZE) / NCCL_SIZES[-1]
        points = []
        for i, size in enumerate(NCCL_SIZES):
            varying = self._varying(node, None, metric, n, salt=i) if own else None
            nominal = plateau * size / (size + NCCL_HALF_SIZE)
            busbw = np.array(self._samples(rng, nominal, n, factors=varying, outliers=aux))
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

    def measure_node(self, node: str, plan: MeasurePlan) -> NodeEvidence:
        started = _iso(datetime.now(UTC))
        nf = self.faults[node]
        if nf.unreachable:
            not_ready = "probe pod did not start: node is not Ready (NodeStatusUnknown)"
            return self._not_collected(node, started, [ProbeError(probe="*", message=not_ready)])
        if nf.preflight is not None:
            return self._preflight_failed(node, nf.preflight, plan, started)
        rng = self._rng(node)
        aux = self._stream(node, OUTLIER_STREAM)
        probes = set(plan.probes)
        slots = self._present(node)
        gpus = [self._gpu(rng, node, i, s, probes, plan, aux) for i, s in enumerate(slots)]
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
            doc = dcgm_document(
                {i: self.faults[node].gpu.get(s, []) for i, s in enumerate(slots)},
                plan.dcgm_level,
                [g.serial or "" for g in gpus],
                version=self.installed[node]["dcgm"],
                driver=self._version(node, "driver"),
            )
            failed = any(
                r.get("status") == "Fail"
                for c in doc["DCGM Diagnostic"]["test_categories"]
                for t in c["tests"]
                for r in t["results"]
            )
            parsed = parse_diag(doc, level=plan.dcgm_level, exit_code=226 if failed else 0)
            dcgm = tie_to_boards(parsed, {g.index: g.serial for g in gpus}, local=True)  # as the probe files them
        return NodeEvidence(
            node=node,
            target=self.kind,
            probe_version=__version__,
            started=started,
            finished=_iso(datetime.now(UTC)),
            system=self._system(node),
            gpus=gpus,
            p2p=self._p2p(rng, node, slots, plan, aux) if Probe.P2P in probes and several else None,
            nccl=(
                self._nccl(
                    rng,
                    len(slots),
                    self._factor(node, None, "nccl.all_reduce")
                    * self._run_factor(node, None, "nccl.all_reduce", plan.run_id),
                    node,
                    own=True,
                    n=max(SAMPLES["nccl"], plan.samples.get("nccl", 0)),
                    aux=aux,
                )
                if Probe.NCCL in probes and several
                else None
            ),
            dcgm=dcgm,
            errors=errors,
            fabric=fabric.node_fabric(self, node, slots, started),
        )

    def _preflight_failed(self, node: str, fault: PreflightFault, plan: MeasurePlan, started: str) -> NodeEvidence:
        """The runner's answer when a preflight step fails: the steps before it passed, no probe ran."""
        steps = preflight.steps_for(set(plan.probes), on_gpu=True, fabric=self.fleet.fabric_of(node) is not None)
        failed = PreflightStep(
            step=fault.step,
            ok=False,
            detail=fault.message or SIMULATED_PREFLIGHT[fault.step],
            fix=preflight.STEP_FIXES[fault.step] if fault.step != "nvml" else preflight.NVML_FIXES[NVML_MISSING],
        )
        ran = steps[: steps.index(fault.step)] if fault.step in steps else steps
        before = [PreflightStep(step=s, ok=True, detail="simulated") for s in ran]
        errors = [ProbeError(probe="preflight", message=preflight.summary([failed]))]
        return self._not_collected(node, started, errors, [*before, failed])

    def _not_collected(
        self, node: str, started: str, errors: list[ProbeError], steps: Sequence[PreflightStep] = ()
    ) -> NodeEvidence:
        """A node no probe ran on: what stopped it, and the preflight's steps where it got that far."""
        return NodeEvidence(
            node=node,
            target=self.kind,
            probe_version=__version__,
            started=started,
            finished=started,
            collected=False,
            errors=errors,
            preflight=list(steps),
        )

    def _fabric(self, nodes: list[str], plan: MeasurePlan) -> FabricEvidence:
        """A ring across the nodes runs at the pace of its slowest link: the slowest node's factor sets the bus."""
        started = _iso(datetime.now(UTC))
        gpus = min(len(self._present(n)) for n in nodes)
        factor = min(self._factor(n, None, "nccl.all_reduce.multinode") for n in nodes)
        rng = np.random.default_rng([self.fleet.seed, 0x6D6E, *(self.number(n) for n in nodes)])
        ranks = gpus * len(nodes)
        sweep = self._nccl(rng, ranks, factor, nodes[0], "nccl.all_reduce.multinode") if ranks >= 2 else None
        errors = []
        if ranks < 2:
            errors.append(ProbeError(probe="nccl", message=f"{ranks} GPU(s) across {', '.join(nodes)}: no collective"))
        elif sweep is None:
            errors.append(
                ProbeError(
                    probe="nccl",
                    unavailable=True,
                    message=f"the baseline {self.baseline_of(nodes[0]).sku} has no nccl.all_reduce.multinode figure "
                    "to simulate",
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
            transport=fabric.transport(self, nodes, gpus),
            rdma=fabric.pair_rdma(self, nodes[0], nodes[1], gpus, plan.rails_for(nodes[0])) if len(nodes) == 2 else [],
        )
