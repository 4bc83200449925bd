"""Plan and measure: the two phases that fill a run folder before evaluation, and the one entry point for them.

`prepare` is what both the `gpucert` command and the pytest plugin call: it loads nothing itself (the inputs are
validated first, plan/inputs.py's `load_inputs`), creates the run folder, and fills it for the chosen mode: the
static gate (no cluster), recorded evidence (re-evaluation), plan only (configure), plan and measure, or a re-test
(plan, then measure only what did not pass in an earlier run and carry the rest over). Every document lands on
disk the moment it is known, so an interrupted run keeps what it measured; a run that fails before it measured
anything leaves no folder behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucert.errors import ConfigError, EvidenceError, IncompleteRunError, RunInterrupted
from gpucert.measure.evidence import FabricEvidence, NodeEvidence
from gpucert.measure.probes.probe_plan import FabricRails
from gpucert.measure.targets.base import FabricTarget, MeasurePlan, Target
from gpucert.plan.carried_pairs import carried_neighbours, carried_nodes, read_carried
from gpucert.plan.domains import by_domain
from gpucert.plan.fabric_stage import (
    StageWindows,
    attach_windows,
    in_rounds,
    measure_fabric,
    measure_pairs,
    neighbour_pairs,
)
from gpucert.plan.inputs import load_inputs, waivers_path
from gpucert.plan.inventory import Inventory
from gpucert.plan.pairs import retest_rounds
from gpucert.plan.pairs import rounds as pair_rounds
from gpucert.plan.recorded import import_evidence, recorded_mode, recorded_run
from gpucert.plan.runfolder import Mode, RunFolder
from gpucert.spec.cluster import ClusterSpec, ReplayTargetSpec
from gpucert.spec.kubernetes import topology_key
from gpucert.spec.names import NameError_, check_node_name
from gpucert.spec.pools import PoolMap
from gpucert.stack.gate_inputs import GateInputs, record_gate
from gpucert.stack.observe import StackObservation, inventory_from_nodes, observe_stack

if TYPE_CHECKING:
    from gpucert.acceptance.retest import Source

__all__ = [
    "Mode",
    "Progress",
    "attach_windows",
    "fabric_rounds",
    "import_evidence",
    "load_inputs",
    "measure",
    "neighbour_pairs",
    "new_run",
    "observe_and_plan",
    "plan",
    "pool_rings",
    "prepare",
    "recorded_run",
]

Progress = Callable[[NodeEvidence], None]
GateRecord = tuple[dict[str, Any], dict[str, bytes]]  # what the static gate was given: its record and the files


def _new_folder(reports: Path, spec: ClusterSpec, suffix: str | None, waivers: bool) -> RunFolder:
    folder = RunFolder.create(reports, spec.metadata.name, suffix)
    folder.copy_inputs(spec.path, spec.baseline_paths(), waivers_path(spec) if waivers else None)
    return folder


@contextlib.contextmanager
def new_run(
    reports: Path,
    spec: ClusterSpec,
    mode: Mode,
    suffix: str | None = None,
    reevaluates: str | None = None,
    *,
    waivers: bool = True,
) -> Iterator[RunFolder]:
    """A new run folder of `mode` (recorded in run.json) for the block; if the block fails before
    any node was measured, the folder goes again, so a bad input or a cluster that cannot be reached leaves no empty
    run behind (measured evidence always stays). The spec's waivers are copied into it and run.json says so (not
    for the static gate: it judges no node)."""
    existed = os.path.exists(reports)  # False for a name too long or a path under a file: creating it says why
    folder = _new_folder(reports, spec, suffix, waivers)
    folder.write_intent(
        spec=spec.metadata.name, mode=mode, reevaluates=reevaluates, waivers=folder.waivers_copy.is_file()
    )
    try:
        yield folder
    except BaseException as exc:
        kept = folder.holds_evidence
        if not kept:
            shutil.rmtree(folder.path, ignore_errors=True)
            if not existed:
                with contextlib.suppress(OSError):
                    reports.rmdir()  # only if empty: a reports folder this run created for nothing goes too
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
            raise RunInterrupted(folder.path if kept else None) from None  # the CLI says which folder, or none
        raise


@dataclass(frozen=True, slots=True)
class _Checked:
    """What a run needs before its folder exists, every input checked: a bad one fails here and leaves no folder
    behind. Exactly one way to fill the folder follows: recorded evidence, the static gate, or a target."""

    mode: Mode
    recorded: RunFolder | None = None  # Mode.EVIDENCE: the run whose evidence is re-evaluated
    gate: GateRecord | None = None  # Mode.STATIC: what the gate was given beside the spec, to copy into inputs/
    target: Target | None = None  # PLAN, MEASURE, RETEST: the cluster (or simulator) to ask


def _check(
    spec: ClusterSpec, mode: Mode, evidence: Path | None, source: Source | None, gate: GateInputs | None
) -> _Checked:
    """Phase 1: resolve the mode (a replay spec names its recorded evidence itself) and check every input."""
    gate_record = None
    if gate is not None and gate.given:
        if mode is not Mode.STATIC:
            raise ConfigError(
                "operator values, ClusterPolicies and --base-ref are inputs of the static gate: add --static"
            )
        gate_record = record_gate(spec, gate, spec.baseline_paths())
    if isinstance(spec.target, ReplayTargetSpec) and mode in (Mode.PLAN, Mode.MEASURE):
        mode, evidence = Mode.EVIDENCE, spec.resolve(spec.target.evidence, "target.evidence")
    if mode is Mode.RETEST and (source is None or isinstance(spec.target, ReplayTargetSpec)):
        raise ConfigError(
            "a re-test measures a cluster again: it needs the earlier run (--retest RUN_DIR) and a target to measure, "
            "not recorded evidence",
            path=spec.path,
            key="target.kind",
        )
    if mode is Mode.EVIDENCE:
        if evidence is None:
            raise EvidenceError("re-evaluating needs the recorded run folder (--evidence DIR)")
        return _Checked(mode, recorded=recorded_run(evidence))
    if mode is Mode.STATIC:
        return _Checked(mode, gate=gate_record)
    if mode is Mode.RECERTIFY:  # one node, cordoned and compared with its handover: fleet/recertify.py's own walk
        raise ValueError("prepare() prepares no recertification: fleet.recertify.recertify does")
    from gpucert.measure.targets import open_target

    return _Checked(mode, target=open_target(spec))  # a bad fleet or kubeconfig fails before any folder exists


def _fill_recorded(folder: RunFolder, recorded: RunFolder) -> None:
    """Phase 3 of a re-evaluation: the recorded evidence, copied in and checked."""
    if folder.path.resolve().is_relative_to(recorded.path.resolve()):
        raise ConfigError(
            "the new run folder would be inside the run it re-evaluates: choose --reports outside it",
            path=recorded.path,
        )
    import_evidence(recorded.path, folder)


def _fill_static(folder: RunFolder, gate: GateRecord | None) -> None:
    """Phase 3 of the static gate: no cluster, no node; what the gate was given beside the spec, under inputs/."""
    folder.write_stack(StackObservation(nodes={}))
    folder.write_inventory(Inventory(target="static", nodes=()))
    if gate is not None:
        record, files = gate
        for name, content in files.items():
            where, _, stem = name.partition("/")
            folder.add_gate_input(folder.inputs / where, stem, content)
        folder.write_gate(record)


def _offers_gpus(ev: NodeEvidence | None) -> bool:
    """A member of a pool's collectives: collected, with GPUs (a node with none to offer is no member)."""
    return ev is not None and ev.collected and bool(ev.gpus)


def _plan_and_measure(
    target: Target,
    spec: ClusterSpec,
    folder: RunFolder,
    mode: Mode,
    progress: Progress | None,
    planned: Callable[[Inventory, str], None] | None,
    source: Source | None,
) -> None:
    """Phase 3 with a target: plan; then measure every node, or (a re-test) the nodes that did not pass in the
    source run, the others carried over and joining the all-reduce across nodes as peers."""
    stack, inventory = observe_and_plan(target, spec, folder)  # the stack as written: not read back from stack.json
    measured, nodes, peers = inventory, None, []
    if mode is Mode.RETEST:
        from gpucert.acceptance.retest import prepare_retest

        assert source is not None
        again = prepare_retest(target, inventory, spec, folder, source, stack=stack)
        measured = Inventory(inventory.target, tuple(n for n in inventory.nodes if n.name in again))
        nodes = list(again)
        # the carried nodes that join the collectives: their evidence as choose read it from the source (the
        # carried copies are its bytes), not read and hashed again (1,021 documents at 1,024 nodes, ~0.9 s)
        peers = [n for n in inventory.names if n not in again and _offers_gpus(source.evidence(n))]
    if planned is not None:  # what this run measures: on a re-test, the nodes measured again
        planned(measured, target.kind)
    if mode is not Mode.PLAN:
        measure(target, inventory, spec, folder, progress, nodes=nodes, peers=peers, stack=stack)


def prepare(
    spec: ClusterSpec,
    reports: Path,
    mode: Mode,
    *,
    evidence: Path | None = None,
    progress: Progress | None = None,
    planned: Callable[[Inventory, str], None] | None = None,
    source: Source | None = None,
    gate: GateInputs | None = None,
) -> RunFolder:
    """A new run folder, filled for `mode` and ready to evaluate (the one path from a spec to a run), in three
    phases: check every input (no folder yet), create the folder (inputs/ and run.json), fill it.

    A spec whose target is `replay` names its recorded evidence itself: planning or measuring it re-evaluates that.
    A re-test takes its `source`: the earlier run, opened and verified (`acceptance.retest.open_source`).
    `gate` are the static gate's inputs beside the spec (operator values, ClusterPolicies, a base ref).
    """
    checked = _check(spec, mode, evidence, source, gate)
    recorded = checked.recorded
    with new_run(
        reports,
        spec,
        recorded_mode(recorded) if recorded is not None else checked.mode,
        reevaluates=recorded.id if recorded is not None else None,
        waivers=checked.mode is not Mode.STATIC,
    ) as folder:
        if recorded is not None:
            _fill_recorded(folder, recorded)
        elif checked.target is None:
            _fill_static(folder, checked.gate)
        else:
            _plan_and_measure(checked.target, spec, folder, checked.mode, progress, planned, source)
    return folder


def plan(target: Target, spec: ClusterSpec, folder: RunFolder) -> Inventory:
    """Ask the target what it has; write stack.json and inventory.json."""
    return observe_and_plan(target, spec, folder)[1]


def observe_and_plan(target: Target, spec: ClusterSpec, folder: RunFolder) -> tuple[StackObservation, Inventory]:
    """`plan`, and the stack it wrote: a caller that measures next needs not read stack.json back (a re-test read
    it twice more, ~0.03 s each at 1,024 nodes)."""
    nodes, pods = target.observe()
    stack = observe_stack(nodes, pods, spec.stack.sources(), keep_labels=spec.kept_labels())
    for name in stack.nodes:
        try:
            check_node_name(name)
        except NameError_ as exc:
            raise IncompleteRunError(
                f"the {target.kind} target reported a node named {name!r}: {exc}; gpucert will not use it as a "
                "file name. Check what answers for the cluster"
            ) from None
    policy = getattr(target, "cluster_policy", None)
    if policy is not None:
        stack = stack.model_copy(update={"cluster_policy": policy})
    folder.write_stack(stack)
    inventory = inventory_from_nodes(target.kind, stack)
    folder.write_inventory(inventory)
    return stack, inventory


def measure(
    target: Target,
    inventory: Inventory,
    spec: ClusterSpec,
    folder: RunFolder,
    progress: Progress | None = None,
    *,
    nodes: list[str] | None = None,
    peers: Sequence[str] = (),
    stack: StackObservation | None = None,
) -> None:
    """Measure every node of the inventory (or `nodes` of it) that is in exactly one pool (a node in none or
    several has no expectations to measure against: `pool.membership` is its finding); each node's evidence lands
    on disk the moment it arrives. `peers` (carried over by a re-test, each collected with GPUs to offer) join each
    pool's all-reduce across its nodes (run whole again, one job a pool) and are the peers of the pairs measured
    again; the pairs of two of them are carried, where the re-test carried its source's pairs (without a fabric
    section: each pair of neighbours on the re-test's rings that the carried pairs do not hold is measured). `stack`:
    the one `observe_and_plan` wrote (None: read from stack.json)."""
    folder.evidence_dir.mkdir(exist_ok=True)
    if stack is None:
        stack = folder.read_stack()
    pools = PoolMap(spec, {n: ns.labels for n, ns in stack.nodes.items()}, inventory.names)
    measure_plan = plan_of(spec, folder.id, pools)

    collected: list[str] = list(peers)

    def sink(ev: NodeEvidence) -> None:
        folder.write_evidence(ev)
        if _offers_gpus(ev):
            collected.append(ev.node)
        if progress is not None:
            progress(ev)

    wanted = None if nodes is None else set(nodes)  # once: a re-test's nodes, asked of every placed node
    chosen = pools.placed if wanted is None else [n for n in pools.placed if n in wanted]
    if chosen:
        target.measure(chosen, measure_plan, sink)
    order = {n: i for i, n in enumerate(inventory.names)}
    collected = sorted(collected, key=order.__getitem__)
    across, neighbours = measure_rings(target, folder, pools, collected, measure_plan)
    retest = read_carried(folder) is not None  # a re-test: the pairs of two carried nodes are the source's
    kept = carried_nodes(folder)  # the nodes whose carried pairs the evaluation holds (carried_pairs.py)
    if retest and any(p.fabric is None for p in spec.pools):  # neighbours' pairs, less those carried
        ring_pairs = [p for r in neighbours for p in r]  # in ring order, as a full run measures them
        plain = {p.name for p in spec.pools if p.fabric is None}
        ringed = frozenset(n for n in pools.placed if pools.name_of(n) in plain)  # a tournament's pairs: not theirs
        carried = carried_neighbours(folder, {frozenset(p) for p in ring_pairs}, kept, ringed)
        neighbours = in_rounds(p for p in ring_pairs if frozenset(p) not in carried)
    schedule = side_by_side([fabric_rounds(pools, collected, kept), neighbours])
    seen = StageWindows()
    seen.add(across)
    if schedule and isinstance(target, FabricTarget):
        measure_pairs(target, folder, schedule, measure_plan, seen)
    attach_windows(folder, seen)


def measure_rings(
    target: Target, folder: RunFolder, pools: PoolMap, collected: list[str], plan: MeasurePlan
) -> tuple[list[FabricEvidence], list[list[list[str]]]]:
    """Each pool's all-reduce across its measured nodes (certify.multinode: the first maxNodes of them), written as
    each ends, and the rounds of their pairs of neighbours (with `pairs`; the pools' rounds side by side: their
    nodes are apart). The pools' rings run one after another, not at once: pools often share the spine switches,
    and a ring measured while another loads the spine would be judged for the other's traffic."""
    multinode = pools.spec.certify.multinode
    if multinode is None:
        return [], []
    rings: list[FabricEvidence] = []
    per_pool: list[list[list[list[str]]]] = []
    for pool, max_nodes in multinode.rings(pools.spec.pool_names):
        if not pools.members(pool) and len(pools.spec.pools) > 1:
            continue  # none of the pool's nodes is in this run (a recertification of another pool's node)
        for domain, ring, least in pool_rings(pools, pool, collected, max_nodes):
            lone = lone_domain(pools, pool, domain) if len(ring) < 2 else None
            rings.append(measure_fabric(target, ring, plan, lone))
            folder.write_fabric(rings[-1], pool, domain)
            if multinode.pairs and len(ring) >= least and pools.spec.pool(pool).fabric is None:
                per_pool.append(neighbour_pairs(ring))  # a fabric section's pairs are its tournament's
    return rings, side_by_side(per_pool)


def pool_rings(
    pools: PoolMap, pool: str, collected: list[str], max_nodes: int | None
) -> list[tuple[str | None, list[str], int]]:
    """The pool's rings: (domain, its measured nodes, the fewest nodes whose neighbours make pairs). One ring of
    the pool's nodes; with target.gang.topologyKey one per domain of the label, one after another, as the pools'
    (a domain's nodes without the label are on none: their finding is the plan's `no domain` key)."""
    mine = [n for n in collected if pools.name_of(n) == pool]
    key = topology_key(pools.spec.target)
    if key is None:
        return [(None, mine[:max_nodes], 3)]
    domains = by_domain(pools.members(pool), lambda n: pools.label(n, key))[0]
    where = {n: d for d, members in domains.items() for n in members}  # one pass: linear in the pool's nodes
    rings: dict[str, list[str]] = {d: [] for d in domains}
    for n in mine:
        if (d := where.get(n)) is not None:
            rings[d].append(n)
    return [(d, ring[:max_nodes], 2) for d, ring in rings.items()]


def lone_domain(pools: PoolMap, pool: str, domain: str | None) -> str | None:
    """Why a topology domain's ring cannot run where the domain itself holds one node of the pool (not where its
    other nodes could not be measured): the spec's labels, not a measurement, and the words say the fix."""
    key = topology_key(pools.spec.target)
    if domain is None or key is None:
        return None
    members = [n for n in pools.members(pool) if pools.label(n, key) == domain]
    if len(members) != 1:
        return None
    return (
        f"the topology domain has one node ({members[0]}), and an all-reduce across nodes needs two: label another "
        f"node into it (kubectl label node NODE {key}={domain}) or remove target.gang.topologyKey"
    )


def plan_of(spec: ClusterSpec, run_id: str, pools: PoolMap) -> MeasurePlan:
    """What every node's pods measure: the probes, and per node its pool's GPU count, rails and RDMA resource."""
    return MeasurePlan(
        run_id=run_id,
        probes=tuple(spec.certify.probes),
        dcgm_level=spec.certify.dcgm.level,
        samples=spec.certify.planned_samples(),
        gpus={n: pools.gpus_per_node(n) for n in pools.placed},
        fabric=any(p.fabric is not None for p in spec.pools),
        rails=rails_plan(spec),
        pools={n: p for n in pools.placed if (p := pools.name_of(n)) is not None},
        rdma=rdma_resources(spec),
    )


def rdma_resources(spec: ClusterSpec) -> dict[str, str]:
    """The RDMA device plugin resource each fabric pool's pods request (rails.resource; the others fall back to
    target.fabricResources)."""
    return {p.name: p.fabric.rails.resource for p in spec.pools if p.fabric is not None and p.fabric.rails.resource}


def rails_plan(spec: ClusterSpec) -> dict[str, FabricRails]:
    """Which ports each fabric pool's pods measure as its rails: its own fabric section's (pools may have different
    HCAs, rail counts, link layers)."""
    return {
        p.name: FabricRails(hcas=p.fabric.rails.hcas, link_layer=p.fabric.link_layer.value, port=p.fabric.rails.port)
        for p in spec.pools
        if p.fabric is not None
    }


def fabric_rounds(pools: PoolMap, nodes: list[str], carried: Collection[str] = ()) -> list[list[list[str]]]:
    """Every pair of the measured nodes of each pool with a fabric section, in the rounds of a round-robin
    tournament (plan/pairs.py): no node in two pairs at once, the pools' rounds run side by side (their nodes are
    apart). A pair's document carries its all-reduce, its RDMA bandwidth per rail and NCCL's transport. A re-test
    whose pairs of two `carried` nodes come from its source measures only the pairs with a node measured again
    (plan/pairs.py `retest_rounds`: each against RETEST_PEERS carried peers where the pool has them)."""
    per_pool = [
        [[list(p) for p in r] for r in (retest_rounds(mine, frozenset(carried)) if carried else pair_rounds(mine))]
        for pool in pools.spec.pools
        if pool.fabric is not None
        for mine in ([n for n in nodes if pools.name_of(n) == pool.name],)
    ]
    return side_by_side(per_pool)


def side_by_side(per_pool: Sequence[Sequence[list[list[str]]]]) -> list[list[list[str]]]:
    """Schedules of pools whose nodes are apart, run at once: round i of each is round i of the whole."""
    longest = max((len(r) for r in per_pool), default=0)
    return [[p for r in per_pool if i < len(r) for p in r[i]] for i in range(longest)]
