"""The probe plan: what one node is asked to measure (`gpucert.io/probe-plan/v1`), written by the harness and read
by the probe runner in the probe pod."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpucert.measure.probes import compute, memory, nccl, p2p, pcie
from gpucert.spec.cluster import Probe

__all__ = ["PLAN_SCHEMA", "BudgetSpec", "DcgmPlan", "FabricRails", "ProbePlan", "Sizes"]

PLAN_SCHEMA = "gpucert.io/probe-plan/v1"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetSpec(_M):
    warmup_s: float = 0.2
    measure_s: float = 1.0
    min_reps: int = 5
    max_reps: int = 100
    # what a probe may take past its time budget before its thread is abandoned (a hung GPU or NCCL call)
    watchdog_s: float = 120.0


class Sizes(_M):
    memory_bytes: int = memory.DEFAULT_BYTES
    gemm_n: int = compute.DEFAULT_N
    pcie_bytes: int = pcie.DEFAULT_BYTES
    p2p_bytes: int = p2p.DEFAULT_BYTES
    nccl_sizes: list[int] = Field(default_factory=lambda: list(nccl.DEFAULT_SIZES))


class DcgmPlan(_M):
    level: int = 2
    host: str | None = None
    timeout_s: float | None = None  # None: the level's time (deadline.dcgm_seconds), inside the Job's deadline


class FabricRails(_M):
    """Which ports are a pool's rails, as its fabric section says (the evaluator reads them the same way): the named
    HCAs in rail order, else every HCA whose `port` is of `link_layer`, in natural order (mlx5_2 before mlx5_10)."""

    hcas: list[str] | None = None
    link_layer: str | None = None  # InfiniBand | Ethernet, as sysfs spells it
    port: int = 1


class ProbePlan(_M):
    schema_: Literal["gpucert.io/probe-plan/v1"] = Field("gpucert.io/probe-plan/v1", alias="schema")
    run_id: str
    node: str
    target: str = "local"
    probes: list[Probe] = Field(default_factory=lambda: list(Probe))
    device: Literal["cupy", "numpy"] = "cupy"
    gpus: int | None = None  # how many devices: all visible GPUs when None (numpy: 1)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    # per probe, at least this many repetitions (the spec's certify.samples): more than budget.min_reps
    samples: dict[Probe, int] = Field(default_factory=dict)
    sizes: Sizes = Field(default_factory=Sizes)
    dcgm: DcgmPlan = Field(default_factory=DcgmPlan)
    # read the node's fabric (a pool with a fabric section): the preflight then needs the RDMA tools
    fabric: bool = False
    fabric_rails: FabricRails | None = None  # which ports are the rails (None: every port, natural order)
    # each fabric pool's rails: a fabric pod given `--pool NAME` measures that pool's (fabric_rails then)
    pool_rails: dict[str, FabricRails] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
