"""This host as a one-node cluster: its GPUs described as GFD would label them, the probes run in-process."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Any

from gpucert.measure.probes import nccl
from gpucert.measure.probes.runner import BudgetSpec, DcgmPlan, ProbePlan, Sizes, run_plan
from gpucert.measure.targets.base import EvidenceSink, MeasurePlan
from gpucert.spec.cluster import ClusterSpec, LocalTargetSpec, Probe

__all__ = ["PROFILES", "LocalTarget"]

# quick: the GPU check profile (every probe but DCGM within 60 s on an 8-GPU node: the arithmetic is in
# benchmarks/gpu_check.py, `budget_estimate`); full: the defaults
PROFILES: dict[str, tuple[BudgetSpec, Sizes]] = {
    "quick": (
        BudgetSpec(warmup_s=0.1, measure_s=0.4, min_reps=5, max_reps=50),
        Sizes(
            memory_bytes=1 << 30,
            gemm_n=8192,
            pcie_bytes=256 << 20,
            p2p_bytes=256 << 20,
            nccl_sizes=[1 << 20, 16 << 20, 256 << 20, 1 << 30, nccl.BASELINE_SIZE],
        ),
    ),
    "full": (BudgetSpec(), Sizes()),
    # smoke: megabyte buffers and short budgets, to exercise the whole path on a CPU; its figures mean nothing
    "smoke": (
        BudgetSpec(warmup_s=0.0, measure_s=0.02, min_reps=5, max_reps=10),
        Sizes(memory_bytes=8 << 20, gemm_n=128, pcie_bytes=4 << 20, p2p_bytes=4 << 20, nccl_sizes=[1 << 20, 4 << 20]),
    ),
}


class LocalTarget:
    kind = "local"

    def __init__(self, spec: ClusterSpec) -> None:
        assert isinstance(spec.target, LocalTargetSpec)
        self.spec = spec
        self.options = spec.target
        self.node = socket.gethostname()
        self._nvml: Any = None

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> LocalTarget:
        return cls(spec)

    def _gpu_labels(self) -> tuple[dict[str, str], int]:
        if self.options.device == "numpy":
            count = self.options.gpus or 1
            return {"nvidia.com/gpu.product": "CPU-numpy-device", "nvidia.com/gpu.count": str(count)}, count
        from gpucert.measure.probes.health import open_nvml

        nvml = self._nvml = open_nvml()
        count = self.options.gpus or int(nvml.nvmlDeviceGetCount())
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        name = nvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        driver = nvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
        return {
            "nvidia.com/gpu.product": name.replace(" ", "-"),
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.memory": str(int(nvml.nvmlDeviceGetMemoryInfo(h).total) // 2**20),
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.runtime-version.full": f"{cuda // 1000}.{cuda % 1000 // 10}",
        }, count

    def observe(self) -> tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]:
        import platform

        labels, count = self._gpu_labels()
        node = {
            "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node, **labels}},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(count)},
                "conditions": [{"type": "Ready", "status": "True", "reason": "LocalHost"}],
                "nodeInfo": {"kernelVersion": platform.release(), "osImage": platform.platform()},
            },
        }
        return [node], []

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        budget, sizes = PROFILES[self.options.profile]
        probe_plan = ProbePlan(
            run_id=plan.run_id,
            node=self.node,
            target=self.kind,
            probes=list(plan.probes),
            device=self.options.device,
            gpus=self.options.gpus,
            budget=budget,
            sizes=sizes,
            samples={Probe(k): n for k, n in plan.samples.items()},
            dcgm=DcgmPlan(level=plan.dcgm_level),
        )
        sink(run_plan(probe_plan, nvml=self._nvml))
