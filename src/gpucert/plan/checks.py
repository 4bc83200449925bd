"""The check-id vocabulary and the Finding every check produces. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from enum import StrEnum
from functools import partial
from itertools import product
from typing import Any, NamedTuple, cast

__all__ = [
    "DCGM_EXTRA_TESTS_BY_LEVEL",
    "DCGM_TESTS_BY_LEVEL",
    "FABRIC_METRICS",
    "GEMM_DTYPES",
    "GPU_METRICS",
    "HIGHER_IS_BETTER",
    "MAX_TOLERANCE",
    "METRICS",
    "NODE_METRICS",
    "PCIE_DIRECTIONS",
    "PERFORMANCE_PREFIXES",
    "PREREQUISITE_CHECKS",
    "REPEATED_METRICS",
    "CheckKey",
    "CheckStatus",
    "Family",
    "Finding",
    "check_category",
    "family_of",
    "key_grid",
]

GEMM_DTYPES = ("fp16", "bf16", "tf32", "fp32", "fp64")
PCIE_DIRECTIONS = ("h2d", "d2h")
# the measured metrics, each a check id of its own and a key of a SKU baseline's `metrics`
GPU_METRICS = (
    "memory.bandwidth",
    *(f"compute.gemm.{d}" for d in GEMM_DTYPES),
    *(f"pcie.{d}" for d in PCIE_DIRECTIONS),
    "p2p.bandwidth",
)
NODE_METRICS = ("nccl.all_reduce",)  # one figure per node
FABRIC_METRICS = ("nccl.all_reduce.multinode",)  # one figure for a set of nodes together
METRICS = (*GPU_METRICS, *NODE_METRICS, *FABRIC_METRICS)
# every figure gpucert measures is a bandwidth or a rate: more is better, so a baseline holds it to a `min`
HIGHER_IS_BETTER: frozenset[str] = frozenset(METRICS)
# the widest tolerance a baseline may give a metric: a GPU more than a quarter short of its SKU's figure is broken,
# not within its spec sheet (a tolerance of 0.4 passes a GPU at 60%); wider only when loosened on purpose
MAX_TOLERANCE: dict[str, float] = dict.fromkeys(METRICS, 0.25)
# the metrics whose samples are one GPU's (or one node's) repetitions over time: what can come and go, and what
# `stability.<metric>` judges. P2P samples come from a GPU's different pairs, the multi-node figure from a set.
REPEATED_METRICS = tuple(m for m in METRICS if not m.startswith("p2p.") and m not in FABRIC_METRICS)

# DCGM 4.x test names by the run level that first includes them (dcgmi diag -r LEVEL): a certification requires
# each of them; the extra ones depend on the DCGM release (nvbandwidth 4.0+, nccl_tests 4.5+) or on an installed
# package (eud), so DCGM may report them and they are never required
DCGM_TESTS_BY_LEVEL: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("pcie", "memory"),
    3: ("diagnostic", "memory_bandwidth", "targeted_stress", "targeted_power"),
    4: ("memtest", "pulse_test"),
}
DCGM_EXTRA_TESTS_BY_LEVEL: dict[int, tuple[str, ...]] = {3: ("nvbandwidth", "nccl_tests", "eud")}


class CheckStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    WAIVED = "waived"  # failed, and a waiver in force accepts the deviation (never an error, a skip or a missing check)


class CheckKey(NamedTuple):
    """One check of a run: what a suite test decides, where (fleet, node or GPU), and of what (the component a
    `stack.version` pin names). The plan lists the keys a spec requires; each test item decides exactly one.

    A NamedTuple, where the house's value types are frozen dataclasses: a fleet's plan is 189,000 keys at 1,024 x 8,
    made, hashed and looked up in sets and dicts about four times each per run, and a tuple's construction, hash and
    equality are the interpreter's own (a frozen dataclass's are Python functions: 0.54 against 0.25 us to make,
    0.16 against 0.06 us to hash; cProfile does not even show them, as every dataclass's generated `__init__` is
    `<string>:2`). Immutable and compared by value as before; unlike a dataclass it also equals a plain tuple of the
    same fields, which no caller builds."""

    check: str
    node: str | None = None
    gpu: int | None = None
    detail: str | None = None

    def __str__(self) -> str:
        where = "fleet" if self.node is None else self.node if self.gpu is None else f"{self.node}/gpu{self.gpu}"
        return f"{self.check}@{where}" + (f"[{self.detail}]" if self.detail else "")

    @classmethod
    def parse(cls, text: str) -> CheckKey:
        """The key `str(key)` wrote: `check@node/gpuN[detail]`, `check@node`, `check@fleet`."""
        check, _, rest = text.partition("@")
        rest, _, detail = rest.partition("[")
        node, _, gpu = rest.partition("/gpu")
        return cls(check, None if node == "fleet" else node, int(gpu) if gpu else None, detail.rstrip("]") or None)

    def sort_key(self) -> tuple[str, str, int, str]:
        return (self.node or "", self.check, -1 if self.gpu is None else self.gpu, self.detail or "")

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "node": self.node, "gpu": self.gpu, "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckKey:
        return cls(d["check"], d.get("node"), d.get("gpu"), d.get("detail"))


_KEY = partial(tuple.__new__, CheckKey)  # a key of a 4-tuple of its fields, as CheckKey(*fields) makes it


def key_grid(
    checks: Iterable[str],
    nodes: Iterable[str],
    gpus: Iterable[int | None] = (None,),
    details: Iterable[str | None] = (None,),
) -> Iterator[CheckKey]:
    """Every key of each of `checks` on each of `nodes`, each of `gpus` (a node's own check: None) and each of
    `details`, in no order the caller may count on. Made without a Python call per key (itertools.product of the
    fields, each 4-tuple made a key by tuple.__new__, as the NamedTuple's own __new__ does in a Python frame): a
    plan is most of a fleet's keys, 189,000 at 1,024 x 8, and a re-test of three of its nodes makes them all."""
    return cast("Iterator[CheckKey]", map(_KEY, product(checks, nodes, gpus, details)))


@dataclass(frozen=True, slots=True)
class Finding:
    """What one check decided about one node (and GPU, where the check is per GPU).

    A skip names its `cause`: the key of the check whose failure it follows from (one root cause, one finding).
    A skip without a failing cause is not a pass: the plugin reports it as an error.
    """

    check: str
    status: CheckStatus
    node: str | None = None
    gpu: int | None = None
    message: str = ""
    observed: float | str | None = None
    expected: float | str | None = None
    unit: str | None = None
    limit: float | str | None = None
    cause: str | None = None
    waiver: str | None = None  # `waivers[i]`: the one that accepts this failure (waived), or a waiver.* check's own

    def __init__(
        self,
        check: str,
        status: CheckStatus,
        node: str | None = None,
        gpu: int | None = None,
        message: str = "",
        observed: float | str | None = None,
        expected: float | str | None = None,
        unit: str | None = None,
        limit: float | str | None = None,
        cause: str | None = None,
        waiver: str | None = None,
    ) -> None:
        # The dataclass's frozen __init__ sets each field by object.__setattr__(self, NAME, value), which looks NAME
        # up on the class for every field of every finding: 2.3 us a finding here, a run's 191,000 (one per check,
        # a re-test's carried ones too) 0.4 s that cProfile does not show (each dataclass's generated __init__ is
        # '<string>:2', and its entries overwrite each other's). Each slot's own descriptor sets it directly (1.4
        # us); the fields, their order and defaults stay the dataclass's (tests/unit/test_plan_index.py).
        s = _FINDING_SLOTS
        s[0](self, check)
        s[1](self, status)
        s[2](self, node)
        s[3](self, gpu)
        s[4](self, message)
        s[5](self, observed)
        s[6](self, expected)
        s[7](self, unit)
        s[8](self, limit)
        s[9](self, cause)
        s[10](self, waiver)

    @property
    def where(self) -> str:
        if self.node is None:
            return "fleet"
        return self.node if self.gpu is None else f"{self.node}/gpu{self.gpu}"

    def to_json(self) -> dict[str, Any]:
        # every field is a scalar: read them (dataclasses.asdict deep-copies, a cost per check at fleet scale)
        out: dict[str, Any] = {
            "check": self.check,
            "node": self.node,
            "gpu": self.gpu,
            "status": self.status.value,
            "observed": self.observed,
            "expected": self.expected,
            "limit": self.limit,
            "unit": self.unit,
            "message": self.message,
            "cause": self.cause,
        }
        if self.waiver is not None:
            out["waiver"] = self.waiver
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        return cls(
            check=d["check"],
            status=CheckStatus(d["status"]),
            node=d.get("node"),
            gpu=d.get("gpu"),
            message=d.get("message", ""),
            observed=d.get("observed"),
            expected=d.get("expected"),
            unit=d.get("unit"),
            limit=d.get("limit"),
            cause=d.get("cause"),
            waiver=d.get("waiver"),
        )


# each field's slot descriptor's __set__, in the fields' order: what Finding.__init__ sets a field by
_FINDING_SLOTS: tuple[Callable[[Finding, object], None], ...] = tuple(
    getattr(Finding, f.name).__set__ for f in fields(Finding)
)


class Family(StrEnum):
    """The families of check ids: what a check judges, which suite holds it, how the reports group it."""

    STACK = "stack"
    INVENTORY = "inventory"
    NODE = "node"
    HEALTH = "health"
    DCGM = "dcgm"
    PERFORMANCE = "performance"
    STRAGGLER = "straggler"
    STABILITY = "stability"  # a GPU whose samples are unstable where its peers' are not
    HANDOVER = "handover"
    DRIFT = "drift"  # a GPU against its own history (every signed run of the node before this one)
    WAIVER = "waiver"
    POOL = "pool"  # pool.membership: every node in exactly one of the spec's pools
    BASELINE = "baseline"  # baseline.change: the static gate's review of an edited SKU baseline
    PROBE = "probe"  # probe.preflight: the probe pod could run the probes at all (CuPy, NVML, NCCL, dcgmi, ...)
    FABRIC = "fabric"  # a pool's multi-node network: ports, counters, GDR, RDMA bandwidth, NCCL's transport

    @property
    def suite(self) -> str:
        """The suite whose tests decide this family's checks (`static` holds fleet-level stack checks too)."""
        if self in (Family.STACK, Family.INVENTORY, Family.NODE, Family.POOL):
            return "configure"
        return {Family.HANDOVER: "recertify", Family.WAIVER: "waivers", Family.BASELINE: "static"}.get(self, "certify")

    @property
    def category(self) -> str:
        """The report category (Allure's categories, the tags of its results)."""
        return {
            Family.STACK: "Stack",
            Family.INVENTORY: "Stack",
            Family.NODE: "Infrastructure",
            Family.PROBE: "Infrastructure",
            Family.HEALTH: "Health",
            Family.DCGM: "DCGM",
            Family.STRAGGLER: "Stragglers",
            Family.STABILITY: "Stragglers",
            Family.HANDOVER: "Handover",
            Family.DRIFT: "Handover",
            Family.WAIVER: "Waivers",
            Family.POOL: "Stack",
            Family.BASELINE: "Baselines",
            Family.FABRIC: "Fabric",
        }.get(self, "Performance")

    @property
    def probe(self) -> str | None:
        """The probe whose evidence this family judges, where one probe does (the rest: the check's prefix)."""
        return {Family.HEALTH: "health", Family.DCGM: "dcgm"}.get(self)


# the checks other checks depend on: when one fails, those are skipped naming it as their cause (one root cause, one
# finding). A waiver accepts a measured deviation; it cannot stand in for the checks that could not run, nor for a
# pinned version the spec agreed on, nor for its own bookkeeping
PREREQUISITE_CHECKS = (
    "node.reachable",
    "probe.preflight",
    "inventory.nodes",
    "inventory.gpus",
    "stack.version",
    "handover.identity",
)

# the measured metrics' prefixes: `memory.bandwidth`, `compute.gemm.<dtype>`, `pcie.<dir>`, `p2p.bandwidth`, `nccl.*`
PERFORMANCE_PREFIXES = ("memory", "compute", "pcie", "p2p", "nccl")


def family_of(check: str) -> Family:
    """The family of a check id; ValueError for an id outside the vocabulary."""
    prefix = check.split(".", 1)[0]
    if prefix in PERFORMANCE_PREFIXES:
        return Family.PERFORMANCE
    try:
        return Family(prefix)
    except ValueError:
        raise ValueError(f"{check!r} is not a gpucert check id") from None


def check_category(check: str) -> str:
    """The report category a check id belongs to: Stack, Health, DCGM, Performance, Stragglers, Infrastructure."""
    return family_of(check).category
