"""RunView: the typed, read-only view of one run that every rule reads: the spec and each pool's SKU baseline, the
run folder's inventory, stack observation, evidence (each node's, the fleet's peers', the fabric's), handover
baseline, recertification record and waivers, the pools, the plan, and the peers a figure is compared with.

It reads the run folder through RunFolder only, each document once, on first use. It decides nothing: the rules
(evaluate/rules/, registered by family in evaluate/catalog.py) do; `decide` is the Evaluation's, which a rule asks
for another check's finding (what a waiver matches). Figures that cannot be believed are no figures (`sampled`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from gpucert.errors import EvidenceError
from gpucert.evaluate.pairs_index import PairsIndex, index_pairs
from gpucert.evaluate.peers import PeerComparisons
from gpucert.evaluate.rules.drift import drift_metrics, drift_plan
from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.view_figures import ViewFigures
from gpucert.measure.evidence import FabricEvidence, GpuEvidence, NodeEvidence
from gpucert.plan.carried_pairs import carried_nodes, iter_carried, read_carried
from gpucert.plan.checks import CheckKey, Finding
from gpucert.plan.history_records import Snapshot
from gpucert.plan.inputs import run_inputs
from gpucert.plan.inventory import Inventory
from gpucert.plan.layout import run_id_time
from gpucert.plan.pairs_files import iter_pairs, pairs_files
from gpucert.plan.records import RecertifyRecord, read_recertify_record
from gpucert.plan.required import Plan, dcgm_tests, plan_checks
from gpucert.plan.rings import read_domain_rings, read_rings
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec, Pool, Probe
from gpucert.spec.handover import NodeBaseline, load_node_baseline, sha256_of
from gpucert.spec.pools import PoolMap
from gpucert.spec.waivers import Waivers, load_waivers, waiver_id
from gpucert.stack import rules as stack_rules
from gpucert.stack.gate import Gate, gate_keys
from gpucert.stack.gate_inputs import gate_from
from gpucert.stack.observe import StackObservation

if TYPE_CHECKING:
    from gpucert.evaluate.told import Told

__all__ = ["PREFLIGHT", "GpuSlot", "RunView"]

T = TypeVar("T")
PREFLIGHT = "probe.preflight"


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One expected GPU of one node: what per-GPU tests are parametrized over."""

    node: str
    index: int

    def __repr__(self) -> str:
        return f"{self.node}/gpu{self.index}"


class RunView(ViewFigures):
    """One run folder with the spec and baselines it is judged against, read once, never written."""

    def __init__(
        self, run_dir: Path | RunFolder, spec: ClusterSpec, baselines: GpuBaseline | Mapping[str, GpuBaseline]
    ) -> None:
        self.folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(run_dir)
        self.spec = spec
        # each pool's SKU baseline (one baseline given: every pool's)
        self.baselines = (
            {p.name: baselines for p in spec.pools} if isinstance(baselines, GpuBaseline) else dict(baselines)
        )
        self._evidence: dict[str, NodeEvidence | None] = {}
        self._problems: dict[str, str] = {}
        self._usable: dict[str, NodeEvidence | None] = {}
        self._once: dict[str, Any] = {}
        # per node, each (metric, GPU)'s believable figure, or why not (None: no samples): a float and a count each
        self._figures: dict[str, dict[tuple[str, int | None], Sampled | str | None]] = {}
        self._figure_keys: dict[tuple[str, int | None], tuple[str, int | None]] = {}  # one (metric, GPU) for all nodes
        self._gpus: dict[str, dict[int, GpuEvidence]] = {}  # per node, its usable evidence's GPUs by index
        self._baseline_of: dict[str, GpuBaseline] = {}
        self._pool_names: dict[str, str | None] = {}
        self._held: dict[str, Told] = {}
        self.peers = PeerComparisons(self.peer_evidence, spec, self.baselines, believe=self._believe_pool)

    @classmethod
    def from_run(cls, run_dir: Path | RunFolder) -> Self:
        """The run as it was judged: by the spec and each pool's SKU baseline its folder keeps in inputs/ (signed
        with it), read once and validated as when they were given (plan.inputs.run_inputs). How the pytest plugin
        opens every run; ConfigError or EvidenceError when they cannot be read."""
        folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(run_dir)
        spec, baselines = run_inputs(folder)
        return cls(folder, spec, baselines)

    def decide(self, key: CheckKey) -> Finding:
        """Another check's finding (the Evaluation's decision): what a rule asks of a check it follows from."""
        raise NotImplementedError("a RunView reads; the Evaluation decides")

    def once(self, name: str, compute: Callable[[], T]) -> T:
        """`compute()`, computed once per run under `name`: what a rule derives from the whole run (the fabric's
        pairs, the waiver book) and every key of its family reads."""
        if name not in self._once:
            self._once[name] = compute()
        return cast("T", self._once[name])

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    # ---- the run's documents, read once ----------------------------------------------------------------------

    @cached_property
    def inventory(self) -> Inventory:
        return self.folder.read_inventory()

    @cached_property
    def stack(self) -> StackObservation:
        return self.folder.read_stack()

    @property
    def measured(self) -> bool:
        return self.folder.measured

    @cached_property
    def recertification(self) -> RecertifyRecord | None:
        return read_recertify_record(self.folder)

    @cached_property
    def handover(self) -> NodeBaseline | None:
        """The node's handover baseline as the run used it (copied into inputs/, so it is signed with the run)."""
        path = self.folder.handover_copy
        return load_node_baseline(path) if path.exists() else None

    @cached_property
    def history(self) -> Snapshot | None:
        """Each node's history as verified when the run was prepared (inputs/history.json, signed with the run);
        None for a run prepared without one."""
        path = self.folder.history_copy
        if not path.exists():
            return None
        try:
            return Snapshot.model_validate_json(path.read_bytes())
        except ValueError as exc:
            raise EvidenceError(f"not a history snapshot gpucert wrote ({exc})", path=path) from None

    @cached_property
    def fleet_peers(self) -> list[NodeEvidence]:
        return self.folder.read_fleet_peers()

    @cached_property
    def waivers(self) -> Waivers | None:
        """The run's waivers (inputs/waivers.yaml, approved by the spec's approvers); None for a run prepared
        without waivers."""
        path = self.folder.waivers_copy
        return load_waivers(path, self.spec.acceptance.approvers) if path.exists() else None

    @cached_property
    def run_time(self) -> datetime:
        """The time a run's waivers are judged at: its newest measurement (evidence, and the identities a re-test
        read from carried nodes), so the same evidence re-evaluated is judged the same; a run that measured nothing:
        the time its folder was made (its id)."""
        stamps = [e.finished for n in self.inventory.names if (e := self.usable(n)) is not None]
        stamps += [ev.finished for ev in self.folder.read_identities()]
        times = []
        for stamp in stamps:
            try:
                times.append(datetime.fromisoformat(stamp).astimezone(UTC))
            except ValueError:
                continue
        if times:
            return max(times)
        return run_id_time(self.folder.id) or datetime.now(UTC)

    @cached_property
    def fabrics(self) -> dict[str, FabricEvidence]:
        """Each pool's all-reduce across its nodes, by pool (a one-pool run written before pools had rings of their
        own kept its ring at evidence/multinode/nccl.json: its pool's)."""
        rings = read_rings(self.folder)
        if len(self.spec.pools) == 1 and self.spec.pools[0].name not in rings and None in rings:
            rings[self.spec.pools[0].name] = rings[None]
        return {p: f for p, f in rings.items() if p is not None and p in self.spec.pool_names}

    @cached_property
    def domain_fabrics(self) -> dict[tuple[str, str], FabricEvidence]:
        """Each topology domain's all-reduce across its nodes, by (pool, domain) (target.gang.topologyKey)."""
        return {k: f for k, f in read_domain_rings(self.folder).items() if k[0] in self.spec.pool_names}

    @cached_property
    def pairs_index(self) -> PairsIndex | None:
        """Every pair the run holds (its own and, for a re-test, those of two carried nodes: plan/carried_pairs.py),
        indexed once and read one document at a time (the rules read this: a fleet's pairs as models do not fit in
        memory); None when it holds none."""
        multinode = self.folder.pairs_path.parent
        if not self.folder.measured or (read_carried(self.folder) is None and not pairs_files(multinode)):
            return None
        return index_pairs(chain(iter_carried(self.folder), iter_pairs(multinode)))

    @cached_property
    def pairs_carried_for(self) -> frozenset[str]:
        """The nodes whose pairs with each other a re-test carried from its source run (none for any other run), as
        far as its re-test record bears carried.json out (plan/carried_pairs.py `carried_nodes`): the pair schedule
        asks each of them for a pair with every other, and each node measured again for its re-test's pairs
        (rules/fabric_schedule.py)."""
        return carried_nodes(self.folder)

    # ---- each node's evidence --------------------------------------------------------------------------------

    def evidence(self, node: str) -> NodeEvidence | None:
        """The node's evidence, None when none was written; EvidenceError when it cannot be believed."""
        if node in self._problems:
            raise EvidenceError(self._problems[node])
        if node not in self._evidence:
            try:
                self._evidence[node] = self.folder.read_evidence(node)
            except EvidenceError as exc:
                self._problems[node] = str(exc)
                raise
        return self._evidence[node]

    def hold(self, held: Mapping[str, tuple[NodeEvidence, Told]]) -> None:
        """Take each node's evidence held by its head, with the figures its source derived of it (evaluate/held.py:
        a re-test's carried nodes, where acceptance/retest_kept.py `held_figures` found them derived alike), in place
        of reading its document; a node already read keeps what was read."""
        for node, (ev, told) in held.items():
            if node not in self._evidence and node not in self._problems:
                self._evidence[node] = ev
                self._held[node] = told

    def held(self, node: str) -> Told | None:
        """What the view holds of a held node in place of its document (its source's figures); None for another."""
        return self._held.get(node)

    def release(self, node: str) -> None:
        """Forget the node's evidence (read again if asked again): for a reader that visits each node once and
        keeps only what it derived, so a fleet's evidence is never in memory at once (the exporter)."""
        self._evidence.pop(node, None)
        self._usable.pop(node, None)
        self._figures.pop(node, None)
        self._gpus.pop(node, None)

    def evidence_problem(self, node: str) -> str | None:
        """Why the node's evidence cannot be used (unreadable, not gpucert's, another node's), or None."""
        try:
            self.evidence(node)
        except EvidenceError as exc:
            return str(exc)
        return None

    def usable(self, node: str) -> NodeEvidence | None:
        """The node's evidence when it can be used, else None (node.reachable says why). Answered once per node:
        every check of the node asks (at 1,024 x 8, 300,000 times in a run)."""
        if node not in self._usable:
            ev = None if self.evidence_problem(node) else self.evidence(node)
            self._usable[node] = None if ev is not None and ev.timing_problem() else ev
        return self._usable[node]

    def measured_node(self, node: str) -> NodeEvidence | None:
        """The node's evidence when the run measured it and its probes ran, else None."""
        ev = self.usable(node) if self.measured else None
        return ev if ev is not None and ev.collected else None

    def preflight_failed(self, node: str) -> bool:
        """The node's probe pod ran and its preflight failed, and this run judges probe.preflight."""
        ev = self.usable(node) if self.measured else None
        return ev is not None and bool(ev.preflight_failed) and CheckKey(PREFLIGHT, node) in self.plan

    def unmeasured_cause(self, node: str) -> CheckKey:
        """What a check of an unmeasured node follows from: its failed preflight, or node.reachable."""
        return CheckKey(PREFLIGHT if self.preflight_failed(node) else "node.reachable", node)

    def gpu_of(self, node: str, index: int) -> GpuEvidence | None:
        """`NodeEvidence.gpu(index)` of the node's usable evidence (None without one), by index: every per-GPU check
        of the node asks for its GPU (a list scanned each time was 150,000 scans at 256 x 8)."""
        gpus = self._gpus.get(node)
        if gpus is None:
            gpus = self._gpus[node] = {}
            ev = self.usable(node)
            for g in ev.gpus if ev is not None else ():
                gpus.setdefault(g.index, g)  # the first of an index, as NodeEvidence.gpu answers
        return gpus.get(index)

    # ---- pools, baselines, peers ----------------------------------------------------------------------------

    @cached_property
    def pools(self) -> PoolMap:
        """Which pool each node is in, from the labels the cluster reported (stack.json)."""
        labels = {n: ns.labels for n, ns in self.stack.nodes.items()}
        return PoolMap(self.spec, labels, self.inventory.names)

    def pool_of(self, node: str) -> Pool | None:
        return self.pools.pool_of(node)

    def pool_name(self, node: str) -> str:
        """The pool of a node a pooled rule is asked about: the registry asks those rules only of nodes in exactly
        one pool (pool.membership judges the others)."""
        pool = self.pool_name_of(node)
        if pool is None:
            raise ValueError(f"a pooled rule was asked of {node}, which is not in exactly one pool")
        return pool

    @cached_property
    def asked_probes(self) -> frozenset[Probe]:
        """The probes the spec asks for (certify.probes), as a set: every check asks."""
        return frozenset(self.spec.certify.probes)

    def pool_name_of(self, node: str) -> str | None:
        """`pools.name_of(node)`, once per node: every check of the node asks."""
        if node not in self._pool_names:
            self._pool_names[node] = self.pools.name_of(node)
        return self._pool_names[node]

    def rails_of(self, node: str) -> int:
        """How many rails the fabric of the node's pool has (0: its pool declares no fabric)."""
        pool = self.pool_of(node)
        return pool.fabric.rails.count if pool is not None and pool.fabric is not None else 0

    def baseline_of(self, node: str) -> GpuBaseline:
        """The SKU baseline of the node's pool (the plan asks nothing else of a node outside exactly one pool)."""
        found = self._baseline_of.get(node)
        if found is not None:  # asked by every check of the node, and for every figure of it
            return found
        pool = self.pools.name_of(node)
        if pool is None:
            raise ValueError(f"{node} is not in exactly one pool: it has no baseline (see pool.membership)")
        found = self._baseline_of[node] = self.baselines[pool]
        return found

    def peer_evidence(self, pool: str) -> list[NodeEvidence]:
        """The evidence a node is compared with: its pool's measured nodes (and, on recertification, the fleet's
        latest evidence of that pool), never another pool's. The one place that says who the peers are."""
        members = self.pools.members(pool)
        usable = (self.usable(node) for node in members) if self.measured else ()  # measured_node's, one stat
        measured = [ev for ev in usable if ev is not None and ev.collected]
        return [*measured, *(self.fleet_peers if members else [])]

    # ---- what the run must decide ----------------------------------------------------------------------------

    @cached_property
    def gate(self) -> Gate | None:
        """The static gate's inputs beside the spec (operator values, base-ref baselines), when it was given any."""
        return gate_from(self.folder, self.spec)

    @cached_property
    def plan(self) -> Plan:
        """Every check this run must decide: the suites follow from the run folder (static, configure only,
        measured, recertification), the keys from the spec, the inventory and the pools of its nodes (and the
        fleet's nodes a recertified node is compared with)."""
        return plan_checks(
            self.spec,
            self.inventory.names,
            self.folder.suites,
            components=self.components(),
            pools=self.pools,
            static=gate_keys(self.spec, self.gate.deployments, self.gate.reviews) if self.gate else (),
            handover=self.handover is not None,
            recertification=self.recertification is not None,
            waivers=[waiver_id(i) for i in range(len(self.waivers.waivers))] if self.waivers is not None else (),
            fleet_peers=len(self.fleet_peers),
            drift=self._drift_plan(),
        )

    def baseline_digest(self, node: str) -> str | None:
        """sha256 of the SKU baseline the node's pool is judged against (as copied into the run)."""
        pool = self.pools.name_of(node)
        if pool is None:
            return None

        def digest() -> str | None:
            path = self.folder.baseline_copy_for(pool)
            return sha256_of(path) if path.is_file() else None

        return self.once(f"baseline.sha256/{pool}", digest)  # asked once per GPU and drift metric

    def _drift_plan(self) -> tuple[list[CheckKey], list[tuple[str, str]]]:
        if not self.measured:
            return [], []
        probes = {p.value for p in self.spec.certify.probes}
        boards: dict[str, list[tuple[int, str | None]]] = {}
        digests: dict[str, str | None] = {}
        metrics: dict[str, list[str]] = {}
        earlier = self.history.nodes if self.history is not None else {}
        for node in self.pools.placed:
            if node not in earlier:  # drift_plan leaves a node without history out whatever its boards: their
                boards[node] = []  # serials, its pool's baseline digest and its metrics are not asked for
                continue
            ev = self.measured_node(node)
            serials = {g.index: g.serial for g in ev.gpus} if ev is not None else {}
            boards[node] = [(i, serials.get(i)) for i in range(self.pools.gpus_per_node(node))]
            digests[node] = self.baseline_digest(node)
            metrics[node] = drift_metrics(probes, set(self.baseline_of(node).metrics))
        return drift_plan(self.history, boards, digests, metrics)

    def components(self) -> list[str]:
        return stack_rules.pinned_components(self.spec, set(self.spec.stack.sources()))

    def dcgm_tests(self) -> list[str]:
        return dcgm_tests(self.spec.certify.dcgm.level)

    # ---- what the reports say beside the checks ---------------------------------------------------------------

    def gpu_total(self) -> int:
        """GPUs seen: by the probes where a node was measured, else as the cluster labels them."""
        total = 0
        for n in self.inventory.nodes:
            ev = self.measured_node(n.name)
            total += len(ev.gpus) if ev is not None else (n.gpu_count or 0)
        return total

    def measured_at(self) -> dict[str, str | None]:
        """When each node's evidence was finished (None for a node not measured)."""
        return {n: (ev.finished if (ev := self.measured_node(n)) else None) for n in self.inventory.names}

    @cached_property
    def unknown_evidence(self) -> list[str]:
        """Evidence files for nodes the inventory does not list: not this cluster's, so never judged."""
        known = set(self.inventory.names)
        return [p.name for p in self.folder.evidence_files() if p.stem not in known]
