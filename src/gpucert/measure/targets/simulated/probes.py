"""The simulated probes: what a probe pod would report for each node, as raw noisy samples and readings (NVML
health, DCGM's own JSON document parsed like the real one, P2P matrix, NCCL sweep, the all-reduce across nodes).
They never say what is wrong: the evaluation must find each fault from the numbers."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from gpucert._version import __version__
from gpucert.measure.evidence import (
    EccCounts,
    FabricEvidence,
    GpuEvidence,
    Health,
    Measurement,
    NcclEvidence,
    NcclPoint,
    NodeEvidence,
    NvlinkErrors,
    P2pEvidence,
    P2pPair,
    PcieLink,
    PreflightStep,
    ProbeError,
    RemappedRows,
    SystemFacts,
    ThrottleWindow,
    XidEvent,
)
from gpucert.measure.probes import preflight
from gpucert.measure.probes.dcgm import parse_diag
from gpucert.measure.probes.dcgm_boards import tie_to_boards
from gpucert.measure.probes.health import NVLINK_ERROR_COUNTERS, THROTTLE_COUNTERS
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated.world import OUTLIER_STREAM, T0, World
from gpucert.measure.targets.simulated.world import iso as _iso
from gpucert.measure.targets.simulated.world import sig as _sig
from gpucert.plan.checks import DCGM_EXTRA_TESTS_BY_LEVEL, DCGM_TESTS_BY_LEVEL
from gpucert.spec.cluster import Probe
from gpucert.spec.simulated_fleet import (
    DcgmFault,
    EccFault,
    NvlinkDownFault,
    NvlinkErrorsFault,
    PcieLinkFault,
    PreflightFault,
    RemappedRowsFault,
    TemperatureFault,
    ThrottleFault,
    XidFault,
)
from gpucert.stack.compat import cuda_of_driver

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
}
SAMPLES = {"memory": 20, "compute": 20, "pcie": 10, "p2p": 5, "nccl": 10}
NCCL_SIZES = [1 << s for s in range(20, 34, 2)]  # 1 MiB .. 8 GiB
NCCL_HALF_SIZE = 64 << 20  # message size at which the simulated bus reaches half its plateau
PCI_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
SLOWDOWN_C = 87.0
THROTTLE_BITS = {"hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80}
WINDOW_S = 1.5  # how long each simulated probe loads a GPU
# what DCGM 4.x reports at each level: the tests a certification requires, and nvbandwidth (4.0+) beside them
DCGM_LEVEL_TESTS = {
    lvl: [*DCGM_TESTS_BY_LEVEL[lvl], *(t for t in DCGM_EXTRA_TESTS_BY_LEVEL.get(lvl, ()) if t == "nvbandwidth")]
    for lvl in DCGM_TESTS_BY_LEVEL
}
DCGM_CATEGORY = {
    "software": "Deployment",
    "pcie": "Integration",
    "memory": "Hardware",
    "diagnostic": "Hardware",
    "memtest": "Hardware",
    "nvbandwidth": "Integration",
}


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

    def _health(self, rng: np.random.Generator, node: str, slot: int, loaded: list[str]) -> Health:  # noqa: C901
        """NVML's readings after the load; `loaded` are the probes that loaded the GPU (one throttle window each)."""
        ecc, rows = (
            EccCounts(volatile_corrected=0, volatile_uncorrected=0, aggregate_corrected=0, aggregate_uncorrected=0),
            RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
        )
        baseline = self.baseline_of(node)
        gen, width = baseline.pcie.generation, baseline.pcie.width
        pcie = PcieLink(
            current_generation=gen, current_width=width, max_generation=gen, max_width=width, under_load=True
        )
        reasons, temp, xids = 0x1, round(float(30 + 8 * rng.random()), 1), []
        held: dict[str, float] = {}  # reason -> share of the loaded time
        links = baseline.nvlink.links if baseline.nvlink is not None else 0
        nvlink: list[bool | None] = [True] * links
        link_errors = {link: dict.fromkeys(NVLINK_ERROR_COUNTERS, 0) for link in range(links)}
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
                case ThrottleFault() if f.reason == "hw_slowdown" or not loaded:  # no counter to show it
                    reasons = THROTTLE_BITS.get(f.reason, 0x1)
                    held[f.reason] = f.share
                case ThrottleFault():
                    held[f.reason] = f.share
                case NvlinkDownFault():
                    for link in range(max(0, links - f.links), links):
                        nvlink[link] = False
                case NvlinkErrorsFault() if f.link in link_errors:
                    link_errors[f.link][f.counter] += f.count
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
            nvlink_active=nvlink or None,
            not_supported=[] if nvlink else ["nvlink.0"],
            throttle_under_load=[
                ThrottleWindow(
                    probe=probe,
                    seconds=WINDOW_S,
                    reasons_ns={r: int(held.get(r, 0) * WINDOW_S * 1e9) for r in THROTTLE_COUNTERS.values()},
                )
                for probe in loaded
            ],
            nvlink_errors=NvlinkErrors(seconds=WINDOW_S * (len(loaded) + 1), links=link_errors) if links else None,
        )

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
        board = "/replacement" if slot in self.faults[node].swapped else ""
        digest = hashlib.sha256(f"{self.fleet.seed}/{node}/{slot}{board}".encode()).hexdigest()
        measurements: dict[str, Measurement] = {}
        baseline = self.baseline_of(node)
        for metric, b in baseline.metrics.items():
            family = metric.split(".")[0]
            if family in ("p2p", "nccl") or Probe(family) not in probes:
                continue
            n = max(SAMPLES[family], plan.samples.get(family, 0))
            nominal = b.expected * self._factor(node, slot, metric) * self._offset(node, slot, metric)
            samples = self._samples(rng, nominal, n, factors=self._varying(node, slot, metric, n), outliers=aux)
            measurements[metric] = Measurement(unit=b.unit, samples=samples, params={"simulated": True})
        between = [m for p, m in (("p2p", "p2p.bandwidth"), ("nccl", "nccl.all_reduce")) if Probe(p) in probes]
        loaded = [*measurements, *(between if len(self._present(node)) >= 2 else [])]
        return GpuEvidence(
            index=index,
            uuid=f"GPU-{uuid.UUID(digest[:32])}",
            serial=str(int(digest[:12], 16) % 10**13).zfill(13),
            pci_bus_id=f"00000000:{PCI_BUSES[slot % len(PCI_BUSES)]:02X}:00.0",
            product=baseline.product.replace("-", " "),
            memory_mib=baseline.memory_mib,
            vbios="96.00.99.00.01",
            health=self._health(rng, node, slot, loaded) if Probe.HEALTH in probes else None,
            measurements=measurements,
        )

    def _p2p(
        self, rng: np.random.Generator, node: str, slots: list[int], plan: MeasurePlan, aux: np.random.Generator
    ) -> P2pEvidence | None:
        b = self.baseline_of(node).metrics.get("p2p.bandwidth")
        if b is None:
            return None
        n = max(SAMPLES["p2p"], plan.samples.get("p2p", 0))
        offset = self._offset(node, None, "p2p.bandwidth")
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
                "version": self.installed[node]["dcgm"],
                "Driver Version Detected": self._version(node, "driver"),
            },
        }

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
            doc = self._dcgm_document(node, slots, plan.dcgm_level, [g.serial or "" for g in gpus])
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
            system=SystemFacts(
                driver_version=self._version(node, "driver"),
                cuda_driver_version=cuda_of_driver(self._version(node, "driver")),
                kernel=self._version(node, "kernel"),
                os=self._version(node, "osImage"),
            ),
            gpus=gpus,
            p2p=self._p2p(rng, node, slots, plan, aux) if Probe.P2P in probes and several else None,
            nccl=(
                self._nccl(
                    rng,
                    len(slots),
                    self._factor(node, None, "nccl.all_reduce"),
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
        )

    def _preflight_failed(self, node: str, fault: PreflightFault, plan: MeasurePlan, started: str) -> NodeEvidence:
        """The runner's answer when a preflight step fails: the steps before it passed, no probe ran."""
        steps = preflight.steps_for(set(plan.probes), on_gpu=True)
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
        rng = np.random.default_rng([self.fleet.seed, 0x6D6E, *(self.names.index(n) for n in nodes)])
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
        )
