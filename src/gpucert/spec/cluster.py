"""The ClusterSpec contract (`apiVersion: gpucert.io/v1alpha2`, `kind: ClusterSpec`): load, validate, schema.

What the user declares the cluster must be: its node pools (each with its expectations, baseline and optional pins
and straggler settings), the stack recipe and what to certify. A `gpucert.io/v1alpha1` spec (one `expect`, one
`certify.baseline`) still loads: it becomes one pool that selects every node, so the rest of gpucert sees pools
only. Pure: reads the spec file and nothing else.
"""

from __future__ import annotations

import difflib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator

from gpucert.errors import ConfigError
from gpucert.spec.documents import Document, Problem, load_document
from gpucert.spec.durations import DURATION_UNITS, Duration, duration_seconds
from gpucert.spec.fabric import FabricSpec
from gpucert.spec.kubernetes import GpuSharing, KubernetesTargetSpec, Taint, gang_unused, topology_key
from gpucert.spec.recipe import Component, PoolStack, StackSpec, after_problems
from gpucert.spec.soak import SoakSpec

__all__ = [
    "API_VERSION",
    "API_VERSIONS",
    "DURATION_UNITS",
    "POOL_NAME",
    "SPEC_NAME",
    "AcceptanceSpec",
    "CertifySpec",
    "ClusterSpec",
    "Component",
    "Expect",
    "GpuSharing",
    "KubernetesTargetSpec",
    "Pool",
    "PoolMultinode",
    "Probe",
    "SoakSpec",
    "StackSpec",
    "StragglerSpec",
    "Taint",
    "duration_seconds",
    "load_spec",
]

API_VERSION = "gpucert.io/v1alpha2"
V1ALPHA1 = "gpucert.io/v1alpha1"
API_VERSIONS = (V1ALPHA1, API_VERSION)
DEFAULT_POOL = "default"  # the one pool a v1alpha1 spec becomes
# what `gpucert init` writes where no baseline exists for a product: the spec does not load until it is replaced
BASELINE_TODO = "TODO"


class Probe(StrEnum):
    HEALTH = "health"
    DCGM = "dcgm"
    MEMORY = "memory"
    COMPUTE = "compute"
    PCIE = "pcie"
    P2P = "p2p"
    NCCL = "nccl"


# a spec's metadata.name and a pool's name (cli/args.py takes them as these on the command line)
SPEC_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
POOL_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Metadata(Document):
    name: Annotated[str, Field(min_length=1, pattern=SPEC_NAME)]


class SimulatedTargetSpec(Document):
    kind: Literal["simulated"]
    fleet: str


class LocalTargetSpec(Document):
    """This host's GPUs, probed in-process: `numpy` runs the same probes on the CPU (no GPU needed)."""

    kind: Literal["local"]
    device: Literal["cupy", "numpy"] = "cupy"
    gpus: Annotated[int, Field(ge=1, le=64)] | None = None  # all visible GPUs when absent
    profile: Literal["quick", "full", "smoke"] = "full"


class ReplayTargetSpec(Document):
    """A recorded run folder (or its evidence/) re-evaluated under this spec: `gpucert certify` on a replay target
    is `gpucert evaluate --evidence` with the folder named in the spec, relative to it."""

    kind: Literal["replay"]
    evidence: str


Target = Annotated[
    SimulatedTargetSpec | KubernetesTargetSpec | LocalTargetSpec | ReplayTargetSpec, Field(discriminator="kind")
]


class Expect(Document):
    nodes: Annotated[int, Field(ge=1)]
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] = Field(alias="gpusPerNode")
    gpu_product: str = Field(alias="gpuProduct")
    # how the pool's GPUs are shared, as GFD labels say (gpucert certifies whole GPUs: a shared one is refused)
    gpu_sharing: GpuSharing = Field(GpuSharing.NONE, alias="gpuSharing")


class DcgmSpec(Document):
    level: Annotated[int, Field(ge=1, le=4)] = 2


class DriftSpec(Document):
    """`drift.<metric>`: each GPU against its own history. A fall is a finding when it passes the baseline's
    `drift.limit` and the run-to-run noise at this `confidence`, shared by every board and metric the run judges."""

    confidence: Annotated[float, Field(ge=0.9, lt=1)] = 0.999


class StragglerSpec(Document):
    """The peer comparisons' knobs (docs/verdict.md, "How a straggler and an unstable GPU are decided", weighs them).

    A GPU (or a node) is behind its peers when it is more than `maxDeviation` behind their median AND that stands
    out of their own spread by a robust z of `minZ` (for one figure; raised with the number compared, so a fleet's
    size does not make findings); a GPU is unstable when its slow samples are more, and deeper, than its peers'
    samples make likely at the same `minZ`. Lower values catch smaller stragglers and flag more healthy GPUs.
    """

    max_deviation: Annotated[float, Field(gt=0, lt=1)] = Field(0.05, alias="maxDeviation")
    min_z: Annotated[float, Field(ge=1, le=20)] = Field(3.5, alias="minZ")


# the probes whose samples are repetitions of a timed operation; `certify.samples` sets their minimum count
SAMPLED_PROBES = ("memory", "compute", "pcie", "p2p", "nccl")
MIN_SAMPLES = 5  # every probe's timing protocol takes at least five repetitions
MAX_SAMPLES = 1000
# the repetitions each per-GPU figure of these probes is measured with unless `certify.samples` says otherwise, set
# from measured power (benchmarks/stability.py, benchmarks/RESULTS.md "Stability"): the fewest with which a GPU slow
# in 10% of its repetitions is caught by stability.<metric> in 60% of 16 x 8 fleets or more and one slow in 20% in
# 95%. The time budget takes more where it allows (an H200's full profile takes 50 or more of each); a figure is
# believed from MIN_SAMPLES (or the spec's own count) up, so older evidence still holds
DEFAULT_SAMPLES: dict[str, int] = {"memory": 60, "compute": 60, "pcie": 60}


def _sample_counts(counts: dict[str, int]) -> dict[str, int]:
    for probe, n in counts.items():
        if probe not in SAMPLED_PROBES:
            raise ValueError(f"{probe!r} takes no timed samples; sampled probes are {', '.join(SAMPLED_PROBES)}")
        if not MIN_SAMPLES <= n <= MAX_SAMPLES:
            raise ValueError(f"{probe}: {n} samples; give {MIN_SAMPLES} to {MAX_SAMPLES}")
    return counts


class PoolMultinode(Document):
    """One pool's all-reduce across its nodes (certify.multinode.pools.<pool>)."""

    max_nodes: Annotated[int, Field(ge=2)] | None = Field(None, alias="maxNodes")


class MultinodeSpec(Document):
    """All-reduce across nodes, after every node has been measured alone (`nccl.all_reduce.multinode`)."""

    # the first N nodes that were measured, in inventory order; every measured node when absent
    max_nodes: Annotated[int, Field(ge=2)] | None = Field(None, alias="maxNodes")
    # also every pair of neighbours (1-2, 2-3, ..., N-1): a node whose pairs are all slow is the one slowing
    # the ring (`straggler.nccl.all_reduce.multinode`); pairs without a shared node run at once
    pairs: bool = False
    # the pools whose nodes run an all-reduce of their own (never one across pools: their GPUs differ), each with
    # its own maxNodes where it gives one; every pool when absent
    pools: Annotated[dict[str, PoolMultinode], Field(min_length=1)] | None = None

    def rings(self, pools: list[str]) -> list[tuple[str, int | None]]:
        """Each pool (of `pools`, in order) that runs an all-reduce across its nodes, and at most how many."""
        chosen = self.pools if self.pools is not None else dict.fromkeys(pools, PoolMultinode())
        return [(p, chosen[p].max_nodes or self.max_nodes) for p in pools if p in chosen]


class CertifySpec(Document):
    baseline: str | None = None  # v1alpha1 only: in v1alpha2 each pool names its baseline
    dcgm: DcgmSpec = Field(default_factory=DcgmSpec)
    probes: Annotated[list[Probe], Field(min_length=1)] = Field(default_factory=lambda: list(Probe))
    stragglers: StragglerSpec = Field(default_factory=StragglerSpec)
    drift: DriftSpec = Field(default_factory=DriftSpec)
    # at least this many samples per probe (repetitions; probes take more where their time budget allows): more
    # samples make each GPU's figure steadier, so smaller stragglers stand out, for more time on every node
    samples: Annotated[
        dict[str, Annotated[int, Field(ge=MIN_SAMPLES, le=MAX_SAMPLES)]], AfterValidator(_sample_counts)
    ] = Field(default_factory=dict, examples=[{"memory": 60, "compute": 60}])
    multinode: MultinodeSpec | None = None

    def min_samples(self, probe: str) -> int:
        """The fewest samples a figure of `probe` may rest on: the spec's count, at least the protocol's five."""
        return max(MIN_SAMPLES, self.samples.get(probe, 0))

    def planned_samples(self) -> dict[str, int]:
        """The repetitions each probe is asked for: the spec's counts, DEFAULT_SAMPLES for the probes it leaves out."""
        return {**DEFAULT_SAMPLES, **self.samples}

    @field_validator("probes")
    @classmethod
    def _once_each(cls, probes: list[Probe]) -> list[Probe]:
        twice = sorted({p.value for p in probes if probes.count(p) > 1})
        if twice:
            raise ValueError(f"probes listed twice: {', '.join(twice)}; list each probe once")
        return probes


class AcceptanceSpec(Document):
    """Handover acceptance: the deviations the parties accepted, and how old carried-over evidence may be."""

    waivers: str | None = None  # a `kind: Waivers` document, relative to this spec
    # who may approve a waiver: every name a waiver's approvedBy gives must be one of these (when set)
    approvers: list[Annotated[str, Field(min_length=1)]] | None = None
    # a re-test (`gpucert certify --retest RUN`) measures again any passing node whose evidence is older than this
    max_evidence_age: Duration | None = Field(None, alias="maxEvidenceAge")
    # `gpucert accept` requires a passing soak (`gpucert soak`) of at least this many clean hours per node
    soak_hours: Annotated[int, Field(ge=1)] | None = Field(None, alias="soakHours")

    @property
    def max_evidence_age_s(self) -> int | None:
        return duration_seconds(self.max_evidence_age) if self.max_evidence_age is not None else None


class Pool(Document):
    """One node pool: the nodes its selector (node labels, e.g. GFD's) picks, what they must be, and their
    baseline. Peers for straggler detection are the pool's nodes, never another pool's."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=POOL_NAME)]
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    expect: Expect
    baseline: str
    stack: PoolStack | None = None
    stragglers: StragglerSpec | None = None
    # taints the pool's nodes carry (e.g. a NoExecute nvidia.com/gpu): every gpucert pod tolerates them
    taints: list[Taint] = Field(default_factory=list)
    fabric: FabricSpec | None = None  # the pool's multi-node network (spec/fabric.py)

    def selects(self, labels: dict[str, str]) -> bool:
        """Whether a node with these labels is one of the pool's (every selector label, equal)."""
        return all(labels.get(k) == v for k, v in self.node_selector.items())


class ClusterSpec(Document):
    api_version: Literal["gpucert.io/v1alpha1", "gpucert.io/v1alpha2"] = Field(alias="apiVersion")
    kind: Literal["ClusterSpec"]
    metadata: Metadata
    target: Target
    expect: Expect | None = None  # v1alpha1 only: becomes the one pool
    pools: list[Pool] = Field(default_factory=list)
    stack: StackSpec = Field(default_factory=StackSpec)
    certify: CertifySpec
    acceptance: AcceptanceSpec = Field(default_factory=AcceptanceSpec)
    soak: SoakSpec | None = None  # the burn-in `gpucert soak` runs (docs/soak.md)

    _path: Path | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _measurable(self) -> ClusterSpec:
        if self.certify.multinode is not None and isinstance(self.target, LocalTargetSpec):
            raise ValueError(
                "certify.multinode needs several nodes: a `local` target is this host alone; remove "
                "certify.multinode or certify a kubernetes (or simulated) target"
            )
        return self

    @property
    def path(self) -> Path | None:
        """The file this spec was read from (None for a spec built in code)."""
        return self._path

    # ---- pools: the rest of gpucert sees pools only -------------------------------------------------------------

    def pool(self, name: str) -> Pool:
        found = next((p for p in self.pools if p.name == name), None)
        if found is None:
            raise KeyError(f"spec {self.metadata.name} has no pool {name!r}")
        return found

    @property
    def pool_names(self) -> list[str]:
        return [p.name for p in self.pools]

    def stack_for(self, pool: str) -> StackSpec:
        """The stack a pool's nodes must run: the cluster's recipe with the pool's own versions in it."""
        own = self.pool(pool).stack
        if own is None:
            return self.stack
        versions = {c.name: c.version for c in own.components}
        components = [c.model_copy(update={"version": versions.get(c.name, c.version)}) for c in self.stack.components]
        return self.stack.model_copy(update={"components": components})

    def stragglers_for(self, pool: str) -> StragglerSpec:
        return self.pool(pool).stragglers or self.certify.stragglers

    def selector_labels(self) -> set[str]:
        """Every node label a pool selects on: the plan keeps them in stack.json, so membership re-evaluates."""
        return {k for p in self.pools for k in p.node_selector}

    def kept_labels(self) -> set[str]:
        """Every node label the evaluation reads: the pools' selectors, their fabrics' rack labels, the topology key."""
        racks = {p.fabric.rack_label for p in self.pools if p.fabric and p.fabric.rack_label}
        return self.selector_labels() | racks | set(filter(None, [topology_key(self.target)]))

    def resolve(self, relative: str, key: str = "") -> Path:
        """A path the spec names, relative to the spec's own folder (ConfigError when it cannot be resolved)."""
        base = self._path.parent if self._path is not None else Path.cwd()
        try:
            return (base / relative).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop (RuntimeError before 3.13); a NUL byte
            raise ConfigError(f"{relative!r} cannot be resolved: {exc}", path=self._path, key=key) from None

    def baseline_paths(self) -> dict[str, Path]:
        """Each pool's SKU baseline file, resolved relative to the spec."""
        key = "certify.baseline" if self.api_version == V1ALPHA1 else "pools[{}].baseline"
        return {p.name: self.resolve(p.baseline, key.format(i)) for i, p in enumerate(self.pools)}


def _versioned(spec: ClusterSpec) -> list[Problem]:
    """What each apiVersion requires: v1alpha1 one `expect` and `certify.baseline`; v1alpha2 `pools`."""
    missing = "required key is missing; add it"
    if spec.api_version == V1ALPHA1:
        problems: list[Problem] = []
        if spec.pools:
            problems.append((("pools",), f"`pools` needs apiVersion {API_VERSION}; change apiVersion to it"))
        if spec.expect is None:
            problems.append((("expect",), f"{missing} (or declare pools under apiVersion {API_VERSION})"))
        if spec.certify.baseline is None:
            problems.append((("certify", "baseline"), missing))
        return problems + _multinode_pools(spec, [DEFAULT_POOL])
    moved = "in v1alpha2 each pool has its own: move it under pools[]"
    problems = []
    if spec.expect is not None:
        problems.append((("expect",), f"`expect` is v1alpha1's; {moved} (pools[].expect)"))
    if spec.certify.baseline is not None:
        problems.append((("certify", "baseline"), f"`certify.baseline` is v1alpha1's; {moved} (pools[].baseline)"))
    if not spec.pools:
        problems.append((("pools",), f"{missing}: declare at least one pool (name, nodeSelector, expect, baseline)"))
    return problems + _pool_problems(spec)


def _pin_problems(i: int, pool: Pool, declared: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    for j, pin in enumerate(pool.stack.components if pool.stack else []):
        if pin.name in declared:
            continue
        close = difflib.get_close_matches(pin.name, declared, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"declared components: {', '.join(declared) or 'none'}"
        message = f"{pin.name!r} is not a component of stack.components, so a pool cannot pin it; {hint}"
        problems.append((("pools", i, "stack", "components", j, "name"), message))
    return problems


def _pool_problems(spec: ClusterSpec) -> list[Problem]:
    """Pools that cannot partition the nodes, or pins of components the recipe does not declare."""
    problems: list[Problem] = []
    declared = [c.name for c in spec.stack.components]
    seen: dict[str, int] = {}
    selectors: dict[tuple[tuple[str, str], ...], str] = {}
    for i, pool in enumerate(spec.pools):
        if pool.name in seen:
            message = f"pool {pool.name!r} is declared twice (also pools[{seen[pool.name]}]); name each pool once"
            problems.append((("pools", i, "name"), message))
        seen.setdefault(pool.name, i)
        if pool.baseline.startswith(BASELINE_TODO):
            message = (
                f"no baseline yet for {pool.expect.gpu_product} (a TODO left by `gpucert init`): write "
                "baselines/gpus/<SKU>.yaml with each figure and its source, and name it here"
            )
            problems.append((("pools", i, "baseline"), message))
        key = tuple(sorted(pool.node_selector.items()))
        if len(spec.pools) > 1 and not pool.node_selector:
            message = (
                "an empty nodeSelector selects every node: with several pools, give each pool the labels of its "
                "nodes (e.g. nvidia.com/gpu.product)"
            )
            problems.append((("pools", i, "nodeSelector"), message))
        elif key in selectors:
            message = f"selects the same nodes as pool {selectors[key]!r}; give each pool its own labels"
            problems.append((("pools", i, "nodeSelector"), message))
        selectors.setdefault(key, pool.name)
        problems += _pin_problems(i, pool, declared)
    return problems + _multinode_pools(spec, list(seen))


def _multinode_pools(spec: ClusterSpec, pools: list[str]) -> list[Problem]:
    """Every pool `certify.multinode.pools` names is one of `pools` (a v1alpha1 spec's one is `default`): a misspelt
    name would leave every pool without its all-reduce, listed as not required, and the run could pass."""
    multinode = spec.certify.multinode
    problems: list[Problem] = []
    for name in (multinode.pools if multinode is not None else None) or {}:
        if name not in pools:
            close = difflib.get_close_matches(name, pools, n=1)
            fix = f"did you mean {close[0]!r}?" if close else "name one of them, or remove it"
            if spec.api_version == V1ALPHA1:
                fix = f"a {V1ALPHA1} spec has one pool, {DEFAULT_POOL!r}: name it, or remove `pools`"
            message = f"{name!r} is not a pool of this spec ({', '.join(pools)}): {fix}"
            problems.append((("certify", "multinode", "pools", name), message))
    return problems


def _as_pools(spec: ClusterSpec) -> ClusterSpec:
    """A v1alpha1 spec as the one pool it declares (every node the target selects), so the rest sees pools only."""
    if spec.api_version != V1ALPHA1:
        return spec
    assert spec.expect is not None
    assert spec.certify.baseline is not None
    pool = Pool.model_validate(
        {
            "name": DEFAULT_POOL,
            "expect": spec.expect,
            "baseline": spec.certify.baseline,
            "stragglers": spec.certify.stragglers,
        }
    )
    certify = spec.certify.model_copy(update={"baseline": None})
    return spec.model_copy(update={"pools": [pool], "expect": None, "certify": certify})


def load_spec(path: Path | str) -> ClusterSpec:
    """Read and validate a ClusterSpec (v1alpha1 or v1alpha2); raises ConfigError naming file, key path and line.
    The spec returned declares pools, whatever its version."""
    p = Path(path)

    def check(spec: ClusterSpec) -> list[Problem]:
        target, multinode = spec.target, spec.certify.multinode is not None
        gang = gang_unused(target, multinode) if isinstance(target, KubernetesTargetSpec) else []
        return _versioned(spec) + after_problems(spec.stack.components) + gang

    spec = _as_pools(load_document(p, ClusterSpec, check=check))
    spec._path = p.resolve()
    return spec
