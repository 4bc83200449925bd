"""The plan: every check a spec requires of a run, and why each check it does not require is left out. Pure.

A certification is a PASS only when every required check ran and passed, so the required set comes from the spec
and the cluster's inventory alone, never from what pytest happened to collect: `-k`, `--lf`, `--deselect`, a
suite left off the command line, `-x` or an interrupt leave required checks without an outcome, and the verdict
says INCOMPLETE. The suites' parametrization and this module enumerate the same keys (a test checks that they do).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from gpucert.evaluate.rules.stragglers import MIN_PEERS
from gpucert.plan.checks import (
    DCGM_TESTS_BY_LEVEL,
    GEMM_DTYPES,
    GPU_METRICS,
    PCIE_DIRECTIONS,
    CheckKey,
    key_grid,
)
from gpucert.plan.domains import by_domain, ring_detail
from gpucert.plan.fabric_checks import fabric_certify_keys, fabric_configure_keys
from gpucert.spec.cluster import ClusterSpec, Probe
from gpucert.spec.kubernetes import topology_key
from gpucert.spec.pools import PoolMap

__all__ = [
    "HANDOVER_GPU_METRICS",
    "PAIRS_MIN_NODES",
    "SUITES",
    "Plan",
    "dcgm_tests",
    "plan_checks",
]

SUITES = ("static", "configure", "certify", "recertify", "waivers")
HEALTH_CHECKS = ("ecc", "remapped_rows", "pcie_link", "throttle", "xid", "temperature", "nvlink")
HANDOVER_GPU_METRICS = GPU_METRICS  # every per-GPU figure is held to its handover median
# a node behind the fabric is told from its pairs of neighbours only when there are enough pairs to have a median
# that one slow node cannot move: MIN_PEERS + 1 pairs, one pair per node on the ring
PAIRS_MIN_NODES = 4
STACK_NODE_CHECKS = ("stack.skew", "stack.ordering")


def dcgm_tests(level: int) -> list[str]:
    """The DCGM diagnostic tests a `dcgmi diag -r LEVEL` run must report."""
    return [t for lvl in range(1, level + 1) for t in DCGM_TESTS_BY_LEVEL[lvl]]


@dataclass(frozen=True)
class Plan:
    """The keys a run must decide, and the checks left out with the reason (shown in the verdict's coverage)."""

    suites: tuple[str, ...]
    required: frozenset[CheckKey]
    not_required: tuple[tuple[str, str], ...] = ()

    def __contains__(self, key: object) -> bool:
        return key in self.required

    def __len__(self) -> int:
        return len(self.required)

    def fleet_details(self, check: str) -> tuple[str, ...]:
        """The details of the check's keys of the fleet (the static gate's inputs, a pool's fabric, a link between
        two racks), sorted: what collection parametrizes a fleet check over. Indexed once: scanning every required
        key per fleet test cost a re-test of a few nodes a pass over the whole fleet's keys each (189,000 at
        1,024 x 8)."""
        return self._fleet_details.get(check, ())

    @cached_property
    def _fleet_details(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {}
        for k in [k for k in self.required if not k.node]:  # one pass: the fleet's keys are a handful
            if k.detail:
                found.setdefault(k.check, []).append(k.detail)
        return {check: tuple(sorted(details)) for check, details in found.items()}


@dataclass
class _Builder:
    keys: set[CheckKey] = field(default_factory=set)
    left_out: dict[str, str] = field(default_factory=dict)

    def add(self, keys: Iterable[CheckKey]) -> None:
        self.keys.update(keys)

    def skip(self, check: str, why: str) -> None:
        self.left_out.setdefault(check, why)


def plan_checks(
    spec: ClusterSpec,
    nodes: list[str],
    suites: Iterable[str],
    *,
    components: list[str],
    pools: PoolMap | None = None,
    handover: bool = False,
    recertification: bool = False,
    waivers: Sequence[str] = (),
    static: Iterable[CheckKey] = (),
    fleet_peers: int = 0,
    drift: tuple[Iterable[CheckKey], Iterable[tuple[str, str]]] = ((), ()),
) -> Plan:
    """Every check of `suites` the spec requires on `nodes` (the inventory, in its order).

    `components` are the spec's components whose version a node shows (`stack.version` per node and component);
    `pools` says which pool each node is in (from its labels; without it, only pools that select every node
    take nodes); a node in no pool or in several is held to `pool.membership` alone. `handover` says whether a
    recertification has the node's handover baseline to compare with; `waivers` are the ids of the run's waivers
    (`waivers[i]`), each in force and matching a failure or a finding of its own; `static` are the static gate's
    checks of the inputs it was given (operator values, baseline changes); `fleet_peers` how many of the fleet's
    nodes (of the recertified node's pool) a node of this run is compared with beside the run's own; `drift` the
    GPUs' checks against their own history (rules/drift_checks.drift_plan) and those left out, with why.
    """
    chosen = tuple(s for s in SUITES if s in set(suites))
    pm = pools if pools is not None else PoolMap(spec, {}, nodes)
    b = _Builder()
    if "static" in chosen:
        _static(spec, b)
        b.add(static)
    if "configure" in chosen:
        _configure(spec, pm, components, b)
    if "certify" in chosen:
        _certify(spec, pm, b, fleet_peers)
        b.add(drift[0])
        for check, why in drift[1]:
            b.skip(check, why)
    if "recertify" in chosen:
        _recertify(spec, pm, handover, b)
    if "waivers" in chosen:
        b.add(CheckKey(check, None, None, wid) for wid in waivers for check in ("waiver.expired", "waiver.unmatched"))
    return Plan(chosen, frozenset(b.keys), tuple(sorted(b.left_out.items())))


def _static(spec: ClusterSpec, b: _Builder) -> None:
    b.add([CheckKey("stack.ordering"), CheckKey("stack.version")])
    if spec.stack.component("cuda") and spec.stack.component("driver"):
        b.add([CheckKey("stack.compat")])
    else:
        b.skip("stack.compat", "the spec pins no `cuda` and `driver` pair to check")


def _configure(spec: ClusterSpec, pools: PoolMap, components: list[str], b: _Builder) -> None:
    b.add([CheckKey("inventory.nodes")])
    if pools.required:
        b.add(key_grid(["pool.membership"], pools.order))
    else:
        b.skip("pool.membership", "one pool with no nodeSelector: every node is in it")
    if pools.stray:
        names = ", ".join(pools.stray[:5]) + (" ..." if len(pools.stray) > 5 else "")
        b.skip(
            "* (but pool.membership)",
            f"{len(pools.stray)} nodes in no pool or several ({names}): nothing else is expected of them",
        )
    nodes = pools.placed
    per_node = ["node.reachable", "inventory.gpus", "inventory.product", *STACK_NODE_CHECKS]
    if spec.stack.component("cuda"):
        per_node.append("stack.compat")
    else:
        b.skip("stack.compat", "the spec declares no `cuda` component to check the driver against")
    if spec.stack.kubernetes is not None:
        per_node.append("stack.kubernetes")
    else:
        b.skip("stack.kubernetes", "the spec sets no stack.kubernetes.minVersion")
    if spec.stack.container_runtime is not None:
        per_node.append("stack.runtime")
    else:
        b.skip("stack.runtime", "the spec sets no stack.containerRuntime")
    b.add(key_grid(per_node, nodes))
    b.add(key_grid(["stack.version"], nodes, details=components))
    b.add(fabric_configure_keys(spec))


def _gpus(pools: PoolMap, nodes: list[str]) -> list[tuple[str, int]]:
    return [(n, i) for n in nodes for i in range(pools.gpus_per_node(n))]


def _certify(spec: ClusterSpec, pools: PoolMap, b: _Builder, fleet_peers: int) -> None:
    for pool in spec.pools:
        members = pools.members(pool.name)
        _certify_pool(spec, pool.name, members, b)
        _peers(spec, pool.name, members, len(members) + (fleet_peers if members else 0), b)
    fabric, left_out = fabric_certify_keys(spec, pools)
    b.add(fabric)
    for check, why in left_out.items():
        b.skip(check, why)
    multinode = spec.certify.multinode
    if multinode is None:
        b.skip("nccl.all_reduce.multinode", "certify.multinode is not set: no all-reduce across nodes was asked")
        return
    rings = multinode.rings(spec.pool_names)
    key = topology_key(spec.target)
    for name, max_nodes in rings:
        if not pools.members(name) and len(spec.pools) > 1:
            b.skip("nccl.all_reduce.multinode", f"pool {name} has no node in this run")
            continue
        detail = name if len(spec.pools) > 1 else None
        domains = None
        if key is not None:  # one ring per domain of the label; the nodes without it are a finding of their own
            domains, unlabelled = by_domain(pools.members(name), lambda n: pools.label(n, key))
            if unlabelled:
                b.add([CheckKey("nccl.all_reduce.multinode", None, None, ring_detail(detail, None, unlabelled=True))])
        _multinode(detail, pools.members(name), max_nodes, multinode.pairs, b, domains)
    left = [p for p in spec.pool_names if p not in dict(rings)]
    if left:
        b.skip("nccl.all_reduce.multinode", f"pools not in certify.multinode.pools: {', '.join(left)}")


def _multinode(
    detail: str | None,
    nodes: list[str],
    max_nodes: int | None,
    pairs: bool,
    b: _Builder,
    domains: dict[str, list[str]] | None = None,
) -> None:
    """One pool's all-reduce across its nodes (the pool its detail where the spec has several), or one per
    topology domain of its nodes (`domains`, with target.gang.topologyKey), and, with pairs, the node that slows its
    ring (a domain's pairs are its own ring's neighbours: a domain of one node has none)."""
    if domains is None:
        b.add([CheckKey("nccl.all_reduce.multinode", None, None, detail)])
        ring = nodes[:max_nodes]
    else:
        b.add(CheckKey("nccl.all_reduce.multinode", None, None, ring_detail(detail, d)) for d in domains)
        ring = [n for members in domains.values() if len(members) > 1 for n in members[:max_nodes]]
    where = f"pool {detail}: " if detail else ""
    if not pairs:
        b.skip("straggler.nccl.all_reduce.multinode", "certify.multinode.pairs is not set")
    elif len(ring) < PAIRS_MIN_NODES:
        b.skip(
            "straggler.nccl.all_reduce.multinode",
            f"{where}{len(ring)} nodes on the ring: it takes {PAIRS_MIN_NODES} to tell a slow node from its pairs",
        )
    else:
        b.add(CheckKey("straggler.nccl.all_reduce.multinode", n) for n in ring)
        if len(ring) < len(nodes):
            why = "nodes past certify.multinode.maxNodes" if domains is None else "nodes on no topology domain's ring"
            b.skip("straggler.nccl.all_reduce.multinode", f"{where}{why} ({len(ring)})")


def _one_gpu(spec: ClusterSpec, pool: str) -> str:
    return "expect.gpusPerNode is 1" if len(spec.pools) == 1 else f"pool {pool} expects 1 GPU per node"


def _certify_pool(spec: ClusterSpec, pool: str, nodes: list[str], b: _Builder) -> None:
    probes = set(spec.certify.probes)
    gpus_per_node = spec.pool(pool).expect.gpus_per_node
    b.add(key_grid(["probe.preflight"], nodes))  # the probe pod could run the probes (one cause, once)
    per_gpu = _per_gpu_checks(probes, spec.certify.dcgm.level)
    several = gpus_per_node >= 2
    if Probe.P2P in probes and several:
        per_gpu.append("p2p.bandwidth")
    elif Probe.P2P in probes:
        b.skip("p2p.bandwidth", f"{_one_gpu(spec, pool)}: there is no peer to copy to")
    b.add(key_grid(per_gpu, nodes, range(gpus_per_node)))
    if Probe.NCCL in probes and several:
        b.add(key_grid(["nccl.all_reduce"], nodes))
    elif Probe.NCCL in probes:
        b.skip("nccl.all_reduce", f"{_one_gpu(spec, pool)}: there is no all-reduce within a node")
    for probe in Probe:
        if probe not in probes:
            b.skip(f"{probe.value}.*", f"probe {probe.value!r} is not in certify.probes")


def _per_gpu_checks(probes: set[Probe], dcgm_level: int) -> list[str]:
    """The checks each GPU gets from the probes that measure one GPU at a time (in the order they are listed)."""
    per_gpu: list[str] = []
    if Probe.HEALTH in probes:
        per_gpu += [f"health.{c}" for c in HEALTH_CHECKS]
    if Probe.DCGM in probes:
        per_gpu += [f"dcgm.{t}" for t in dcgm_tests(dcgm_level)]
    if Probe.MEMORY in probes:
        per_gpu.append("memory.bandwidth")
    if Probe.COMPUTE in probes:
        per_gpu += [f"compute.gemm.{d}" for d in GEMM_DTYPES]
    if Probe.PCIE in probes:
        per_gpu += [f"pcie.{d}" for d in PCIE_DIRECTIONS]
    return per_gpu


def _peers(spec: ClusterSpec, pool: str, nodes: list[str], comparable: int, b: _Builder) -> None:
    """A node behind the others of its pool as a whole is one check per node and per-GPU metric, where there are
    enough other nodes in the pool to tell; the comparisons too few peers rule out are said (coverage.notRequired),
    never passed silently. `comparable`: the nodes of the pool a node is compared with, itself included."""
    probes = {p.value for p in spec.certify.probes}
    gpus_per_node = spec.pool(pool).expect.gpus_per_node
    several = gpus_per_node >= 2
    metrics = [m for m in GPU_METRICS if m.split(".")[0] in probes and (several or not m.startswith("p2p."))]
    if not metrics or not nodes:
        return
    where = "" if len(spec.pools) == 1 else f" in pool {pool}"
    if comparable >= MIN_PEERS + 1:
        b.add(key_grid([f"straggler.{m}" for m in metrics], nodes))
    else:
        b.skip(
            f"straggler.<metric>@<node>{where}",
            f"{comparable} node(s){where}: a node is compared with the others as a whole from {MIN_PEERS + 1}; no "
            "node-level straggler can be told",
        )
    if gpus_per_node - 1 >= MIN_PEERS and len(metrics) >= 2:  # every metric at once, against the node's peers
        b.add(key_grid(["straggler.combined"], nodes, range(gpus_per_node)))
    else:
        b.skip(f"straggler.combined{where}", "fewer than two per-GPU metrics or too few GPUs on a node to combine")
    if gpus_per_node - 1 < MIN_PEERS:
        count = f"expect.gpusPerNode is {gpus_per_node}" if not where else f"pool {pool} expects {gpus_per_node} GPUs"
        b.skip(
            f"straggler.<metric> against node peers{where}",
            f"{count}: a GPU is compared with its node's peers from {MIN_PEERS} peers; each GPU is compared with the "
            f"{'fleet' if not where else 'pool'} only",
        )
    if comparable * gpus_per_node - 1 < MIN_PEERS:
        b.skip(
            f"straggler.<metric> and stability.<metric> against the fleet{where}",
            f"{comparable * gpus_per_node} GPU(s){where}: a GPU is compared with the "
            f"{'fleet' if not where else 'pool'} from {MIN_PEERS} peers; each figure is held to the SKU baseline only",
        )


def _recertify(spec: ClusterSpec, pools: PoolMap, handover: bool, b: _Builder) -> None:
    if not handover:
        b.skip("handover.*", "no handover baseline for this node: recertified against the SKU and the fleet only")
        return
    probes = {p.value for p in spec.certify.probes}
    for node in pools.placed:
        several = pools.gpus_per_node(node) >= 2
        metrics = [
            m for m in HANDOVER_GPU_METRICS if m.split(".")[0] in probes and (several or not m.startswith("p2p."))
        ]
        gpus = _gpus(pools, [node])
        b.add(CheckKey("handover.identity", n, i) for n, i in gpus)
        b.add(CheckKey(f"handover.{m}", n, i) for n, i in gpus for m in metrics)
        if "nccl" in probes and several:
            b.add([CheckKey("handover.nccl.all_reduce", node)])
