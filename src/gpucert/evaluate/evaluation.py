"""Everything a suite test asks of a run: find the evidence a check needs, or say why it is missing, and hand the
numbers to the pure rules (analysis/, stack/). One call shape: `Evaluation.decide(key) -> Finding`.

A check that cannot run because something it depends on failed is skipped with that cause (one root cause, one
finding); one that cannot run for no failing cause is an error. Reads the run folder through RunFolder only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from gpucert.acceptance.waivers import WaiverBook, book_for, decide_waiver
from gpucert.errors import EvidenceError
from gpucert.evaluate.fabric_decisions import decide_fabric, multinode_figure
from gpucert.evaluate.handover_decisions import against_handover, identity
from gpucert.evaluate.peers import PeerComparisons, probe_of_metric
from gpucert.evaluate.performance_decisions import judge_metric, node_straggler
from gpucert.evaluate.rules.dcgm import judge_dcgm
from gpucert.evaluate.rules.fabric import (
    MULTINODE,
    enough_pairs,
    judge_multinode,
    judge_pairs,
    members_problem,
    pair_figures,
    pairs_problem,
)
from gpucert.evaluate.rules.health import judge_health
from gpucert.evaluate.rules.performance import Sampled, evidence_problem, figure_of, sample_problem, samples_of
from gpucert.evaluate.rules.preflight import PREFLIGHT, judge_preflight
from gpucert.evaluate.stats import Summary, summarize
from gpucert.measure.evidence import FabricEvidence, FabricPairs, GpuEvidence, NodeEvidence
from gpucert.plan.checks import GPU_METRICS, CheckKey, CheckStatus, Family, Finding, family_of
from gpucert.plan.inventory import Inventory
from gpucert.plan.required import Plan, dcgm_tests, plan_checks
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec, Pool, Probe
from gpucert.spec.handover import NodeBaseline, load_node_baseline
from gpucert.spec.pools import PoolMap
from gpucert.spec.versions import normalize
from gpucert.stack import recipe, rules
from gpucert.stack.gate import Gate, gate_keys
from gpucert.stack.gate_inputs import gate_from
from gpucert.stack.observe import NodeStack, StackObservation

__all__ = ["Evaluation", "GpuSlot"]

SKIP, ERROR, FAIL, PASS = CheckStatus.SKIP, CheckStatus.ERROR, CheckStatus.FAIL, CheckStatus.PASS


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One expected GPU of one node: what per-GPU tests are parametrized over."""

    node: str
    index: int

    def __repr__(self) -> str:
        return f"{self.node}/gpu{self.index}"


def _because(check: str, node: str | None, gpu: int | None = None, detail: str | None = None) -> str:
    """The key a skip names as its cause."""
    return str(CheckKey(check, node, gpu, detail))


def _probe_of(check: str) -> Probe | None:
    """The probe whose evidence a check judges (None for handover.identity: the GPUs the node showed at all)."""
    return None if check == "handover.identity" else Probe(family_of(check).probe or check.split(".")[0])


def _skip(check: str, node: str | None, gpu: int | None, message: str, cause: str) -> Finding:
    return Finding(check, SKIP, node, gpu, message, cause=cause)


class Evaluation:
    """The run folder's inventory, stack observation and evidence, with the decision of every check."""

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
        self.peers = PeerComparisons(self.peer_evidence, spec, self.baselines)

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
    def recertification(self) -> dict[str, Any] | None:
        return self.folder.read_recertify()

    @cached_property
    def handover(self) -> NodeBaseline | None:
        """The node's handover baseline as the run used it (copied into inputs/, so it is signed with the run)."""
        path = self.folder.handover_copy
        return load_node_baseline(path) if path.exists() else None

    @cached_property
    def fleet_peers(self) -> list[NodeEvidence]:
        return self.folder.read_fleet_peers()

    waiver_book: cached_property[WaiverBook | None] = cached_property(book_for)

    @cached_property
    def fabric(self) -> FabricEvidence | None:
        return self.folder.read_fabric()

    @cached_property
    def fabric_pairs(self) -> FabricPairs | None:
        return self.folder.read_fabric_pairs()

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

    def evidence_problem(self, node: str) -> str | None:
        """Why the node's evidence cannot be used (unreadable, not gpucert's, another node's), or None."""
        try:
            self.evidence(node)
        except EvidenceError as exc:
            return str(exc)
        return None

    def usable(self, node: str) -> NodeEvidence | None:
        """The node's evidence when it can be used, else None (node.reachable says why)."""
        if self.evidence_problem(node):
            return None
        ev = self.evidence(node)
        return None if ev is not None and ev.timing_problem() else ev

    def _measured_node(self, node: str) -> NodeEvidence | None:
        ev = self.usable(node) if self.measured else None
        return ev if ev is not None and ev.collected else None

    @cached_property
    def pools(self) -> PoolMap:
        """Which pool each node is in, from the labels the cluster reported (stack.json)."""
        labels = {n: ns.labels for n, ns in self.stack.nodes.items()}
        return PoolMap(self.spec, labels, self.inventory.names)

    def pool_of(self, node: str) -> Pool | None:
        return self.pools.pool_of(node)

    def rails_of(self, node: str) -> int:
        """How many rails the fabric of the node's pool has (0: its pool declares no fabric)."""
        pool = self.pool_of(node)
        return pool.fabric.rails.count if pool is not None and pool.fabric is not None else 0

    def baseline_of(self, node: str) -> GpuBaseline:
        """The SKU baseline of the node's pool (the plan asks nothing else of a node outside exactly one pool)."""
        pool = self.pools.name_of(node)
        if pool is None:
            raise ValueError(f"{node} is not in exactly one pool: it has no baseline (see pool.membership)")
        return self.baselines[pool]

    def _outside_pools(self, check: str, node: str, gpu: int | None = None) -> Finding | None:
        """A node in no pool or several has no expectations: its checks follow from pool.membership."""
        if self.pools.name_of(node) is not None:
            return None
        message = f"{node} is not in exactly one pool, so nothing is expected of it (see pool.membership)"
        return _skip(check, node, gpu, message, _because("pool.membership", node))

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
            waivers=self.waiver_book.ids if self.waiver_book is not None else (),
            fleet_peers=len(self.fleet_peers),
        )

    def _peer_evidence(self) -> list[NodeEvidence]:
        """Every node a figure is compared with: this run's measured nodes and the fleet's peers."""
        measured = [self._measured_node(node) for node in self.inventory.names]
        return [ev for ev in [*measured, *self.fleet_peers] if ev is not None]

    def gpu_total(self) -> int:
        """GPUs seen: by the probes where a node was measured, else as the cluster labels them."""
        total = 0
        for n in self.inventory.nodes:
            ev = self._measured_node(n.name)
            total += len(ev.gpus) if ev is not None else (n.gpu_count or 0)
        return total

    def measured_at(self) -> dict[str, str | None]:
        """When each node's evidence was finished (None for a node not measured)."""
        return {n: (ev.finished if (ev := self._measured_node(n)) else None) for n in self.inventory.names}

    @cached_property
    def unknown_evidence(self) -> list[str]:
        """Evidence files for nodes the inventory does not list: not this cluster's, so never judged."""
        known = set(self.inventory.names)
        return [p.name for p in self.folder.evidence_files() if p.stem not in known]

    @cached_property
    def _duplicate_gpus(self) -> dict[str, list[str]]:
        """Per node, each GPU identity (UUID or serial) reported more than once in the fleet, with where."""
        return rules.duplicate_gpus({n: ev.gpus for n in self.inventory.names if (ev := self._measured_node(n))})

    def _probe_products(self, node: str) -> str | None:
        ev, pool = self._measured_node(node), self.pool_of(node)
        if ev is None or pool is None:
            return None
        b = self.baselines[pool.name]
        return rules.probe_products(node, ev.gpus, pool.expect.gpu_product, b.memory_mib, b.sku)

    def components(self) -> list[str]:
        return rules.pinned_components(self.spec, set(self.spec.stack.sources()))

    def dcgm_tests(self) -> list[str]:
        return dcgm_tests(self.spec.certify.dcgm.level)

    # ---- one call shape ---------------------------------------------------------------------------------------

    def decide(self, key: CheckKey) -> Finding:
        """The Finding of one check: what the suites turn into a test outcome. A skip stands only when the check it
        follows from fails; when that check passes, the skip is an error (the evidence contradicts itself)."""
        found = self._decide(key)
        if found.status is SKIP and found.cause is not None:
            cause = self._decide(CheckKey.parse(found.cause))
            if cause.status not in (FAIL, ERROR):
                message = (
                    f"skipped because of {found.cause}, which did not fail ({cause.status.value}): {found.message}"
                )
                return dataclasses.replace(found, status=ERROR, message=message, cause=None)
        return found

    def _decide(self, key: CheckKey) -> Finding:  # noqa: C901, PLR0912
        family = family_of(key.check)
        node, gpu = key.node, key.gpu
        if key.node is None and key.detail is not None and family in (Family.STACK, Family.BASELINE):
            assert self.gate is not None  # the plan asks these only of a gate with inputs
            return self.gate.decide(key)
        if key.node is None and family is Family.STACK:
            return recipe.decide(key.check, self.spec)
        if key.check == "inventory.nodes":
            return self.node_count()
        if key.check == "pool.membership" and node is not None:
            return self.pools.judge(node)
        if family in (Family.FABRIC, Family.POOL):
            return decide_fabric(self, key)
        outside = self._outside_pools(key.check, node, gpu) if node is not None else None
        if outside is not None:
            return outside
        if key.check == "node.reachable" and node is not None:
            return self.reachable(node)
        if key.check == PREFLIGHT and node is not None:
            return judge_preflight(node, self.usable(node), self.evidence_problem(node))
        if family in (Family.STACK, Family.INVENTORY) and node is not None:
            return self.configure(key.check, node, key.detail)
        if family is Family.HEALTH and node is not None and gpu is not None:
            return self.health(key.check, GpuSlot(node, gpu))
        if family is Family.DCGM and node is not None and gpu is not None:
            return self.dcgm(key.check.removeprefix("dcgm."), GpuSlot(node, gpu))
        if key.check == MULTINODE:
            return self.multinode()
        if key.check == f"straggler.{MULTINODE}" and node is not None:
            return self.fabric_straggler(node)
        if key.check == "handover.identity" and node is not None and gpu is not None:
            return identity(self, GpuSlot(node, gpu))
        if family is Family.HANDOVER and node is not None:
            return against_handover(self, key.check.removeprefix("handover."), node, gpu)
        if family is Family.STRAGGLER and key.check.removeprefix("straggler.") in GPU_METRICS and gpu is None and node:
            return node_straggler(self, key.check.removeprefix("straggler."), node)
        if family is Family.PERFORMANCE and node is not None:
            return self.metric(key.check, node, gpu)
        if family is Family.WAIVER and key.detail is not None:
            return decide_waiver(key.check, key.detail, self)
        raise ValueError(f"no rule decides {key}: not a check of gpucert's vocabulary")

    # ---- configure -------------------------------------------------------------------------------------------

    def _node_stack(self, check: str, node: str) -> NodeStack | Finding:
        ns = self.stack.nodes.get(node)
        cause = _because("node.reachable", node)
        if ns is None:
            return _skip(check, node, None, f"{node} is not listed by the cluster (see node.reachable)", cause)
        if not ns.ready:
            return _skip(check, node, None, f"{node} is not Ready (see node.reachable)", cause)
        return ns

    def node_count(self) -> Finding:
        unknown = self.unknown_evidence
        if unknown:
            return Finding(
                "inventory.nodes",
                FAIL,
                None,
                None,
                f"evidence/ holds documents for nodes the inventory does not list: {', '.join(unknown)}; evidence "
                "that is not of this cluster's nodes cannot be part of its certification",
            )
        if self.recertification is not None:
            return Finding("inventory.nodes", PASS, None, None, f"recertification of {self.recertification['node']}")
        found = {p.name: self.pools.members(p.name) for p in self.spec.pools}
        return rules.node_count(found, self.spec, self.pools.stray)

    def reachable(self, node: str) -> Finding:
        error = None
        if self.measured:
            problem = self.evidence_problem(node)
            ev = self.evidence(node) if problem is None else None
            if problem is not None:
                error = f"its evidence cannot be used: {problem}"
            elif ev is not None and ev.timing_problem():
                error = f"its evidence cannot be believed: {ev.timing_problem()}"
            elif ev is None:
                error = "no evidence was written for this node"
            elif not ev.collected and not self._preflight_failed(node):
                error = "; ".join(e.message for e in ev.errors) or "the probe did not run"
        return rules.reachable(self.stack.nodes.get(node), node, error)

    def _preflight_failed(self, node: str) -> bool:
        """The node's probe pod ran and its preflight failed, and this run judges probe.preflight."""
        ev = self.usable(node) if self.measured else None
        return ev is not None and bool(ev.preflight_failed) and CheckKey(PREFLIGHT, node) in self.plan

    def unmeasured_cause(self, node: str) -> CheckKey:
        """What a check of an unmeasured node follows from: its failed preflight, or node.reachable."""
        return CheckKey(PREFLIGHT if self._preflight_failed(node) else "node.reachable", node)

    def _unmeasured_skip(self, check: str, node: str, gpu: int | None = None) -> Finding:
        cause = self.unmeasured_cause(node)
        why = "no probe ran there: its preflight failed" if cause.check == PREFLIGHT else "was not measured"
        return _skip(check, node, gpu, f"{node} {why} (see {cause.check})", str(cause))

    def configure(self, check: str, node: str, component: str | None = None) -> Finding:  # noqa: C901, PLR0912
        ns = self._node_stack(check, node)
        if isinstance(ns, Finding):
            return ns
        pool = self.pool_of(node)
        assert pool is not None  # decide() answered for a node outside exactly one pool
        stack = self.spec.stack_for(pool.name)
        match check:
            case "stack.version":
                assert component is not None
                found = rules.version(ns, stack, component)
                ev = self._measured_node(node) if component == "driver" else None
                pin = stack.component("driver")
                seen = ev.system.driver_version if ev is not None else None
                if found.status is PASS and pin is not None and seen and normalize(seen) != normalize(pin.version):
                    message = f"{node}: the probe saw driver {seen} on the host (NVML), where the pin is {pin.version}"
                    return dataclasses.replace(found, status=FAIL, message=message, observed=seen)
                return found
            case "stack.skew":  # against the node's pool: another pool may run another OS or kernel
                peers = {n: self.stack.nodes[n] for n in self.pools.members(pool.name) if n in self.stack.nodes}
                return rules.skew(ns, peers)
            case "stack.compat":
                found = rules.compat(ns, stack)
                if found.status is SKIP and "driver" in self.components():
                    return dataclasses.replace(found, cause=_because("stack.version", node, None, "driver"))
                return found
            case "stack.ordering":
                return rules.ordering(ns, stack)
            case "stack.kubernetes":
                return rules.kubernetes_version(ns, stack)
            case "stack.runtime":
                return rules.runtime(ns, stack)
            case "inventory.gpus":
                ev = self._measured_node(node)
                found = rules.gpu_count(ns, pool.expect, len(ev.gpus) if ev is not None else None)
                twice = self._duplicate_gpus.get(node)
                if twice:
                    message = f"{node}: the same GPU is reported more than once: {'; '.join(twice)}"
                    return dataclasses.replace(found, status=FAIL, message=message)
                nameless = rules.nameless_gpus(node, ev.gpus if ev is not None else [])
                if nameless:
                    return dataclasses.replace(found, status=ERROR, message=nameless)
                indices = sorted(g.index for g in ev.gpus) if ev is not None else []
                if indices != list(range(len(indices))):
                    message = f"{node}: the probe numbered its GPUs {indices}, not 0..{len(indices) - 1}"
                    return dataclasses.replace(found, status=FAIL, message=message)
                return found
            case "inventory.product":
                found = rules.gpu_product(ns, pool.expect)
                seen = self._probe_products(node)
                return dataclasses.replace(found, status=FAIL, message=seen) if seen and found.status is PASS else found
        raise ValueError(f"unknown configure check {check!r}")

    # ---- certify: find the evidence, or say why it is missing -------------------------------------------------

    def _node_evidence(self, check: str, node: str) -> NodeEvidence | Finding:
        """The node's evidence for `check`: that of its probe, or (handover.identity) the GPUs the node showed."""
        probe = _probe_of(check)
        if probe is not None and probe not in self.spec.certify.probes:
            return Finding(check, SKIP, node, None, f"probe {probe.value!r} is not in certify.probes")
        ev = self.usable(node)
        if ev is None or not ev.collected:
            return self._unmeasured_skip(check, node)
        if probe is None:
            return ev
        err = ev.error_for(probe.value)
        if err is not None and err.unavailable:
            if probe in (Probe.P2P, Probe.NCCL) and len(ev.gpus) < 2 <= self.pools.gpus_per_node(node):
                message = f"{node} shows {len(ev.gpus)} GPU: nothing to measure between GPUs (see inventory.gpus)"
                return _skip(check, node, None, message, _because("inventory.gpus", node))
            message = f"{node}: the {probe.value} probe could not run there: {err.message}"
            return Finding(check, ERROR, node, None, message)
        if err is not None:
            return Finding(check, ERROR, node, None, f"{node}: the {probe.value} probe failed: {err.message}")
        return ev

    def _gpu_evidence(self, check: str, gpu: GpuSlot) -> GpuEvidence | Finding:
        ev = self._node_evidence(check, gpu.node)
        if isinstance(ev, Finding):
            return dataclasses.replace(ev, node=gpu.node, gpu=gpu.index)
        g = ev.gpu(gpu.index)
        if g is None:
            message = f"{gpu!r} is not present: the node shows {len(ev.gpus)} GPUs (see inventory.gpus)"
            return _skip(check, gpu.node, gpu.index, message, _because("inventory.gpus", gpu.node))
        probe = _probe_of(check)
        err = ev.error_for(probe.value, gpu.index, check) if probe is not None else None
        if err is not None:  # this GPU's alone: the other GPUs of the node stand
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu!r}: the {err.probe} probe failed: {err.message}")
        return g

    def health(self, check: str, gpu: GpuSlot) -> Finding:
        g = self._gpu_evidence(check, gpu)
        if isinstance(g, Finding):
            return g
        if g.health is None:
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu!r}: the health probe recorded nothing")
        return judge_health(check, g.health, self.baseline_of(gpu.node), gpu.node, gpu.index)

    def dcgm(self, test: str, gpu: GpuSlot) -> Finding:
        check = f"dcgm.{test}"
        g = self._gpu_evidence(check, gpu)
        if isinstance(g, Finding):
            return g
        ev = self.evidence(gpu.node)
        if ev is None or ev.dcgm is None:
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu.node}: no DCGM diagnostic was recorded")
        return judge_dcgm(test, gpu.node, gpu.index, ev.dcgm, self.spec.certify.dcgm.level, serial=g.serial)

    def sampled(self, metric: str, node: str, gpu: int | None) -> Sampled | None:
        """The median of one measurement and its sample count; None when not measured (or not to be believed)."""
        ev = self.usable(node)
        if ev is None or not ev.collected:
            return None
        b = self.baseline_of(node).metrics.get(metric)
        least = self.spec.certify.min_samples(probe_of_metric(metric))
        if sample_problem(samples_of(ev, metric, gpu), b.expected if b else None, least) is not None:
            return None
        return figure_of(ev, metric, gpu)

    def _figure(self, metric: str, node: str, gpu: int | None) -> Sampled | Finding:
        """The GPU's (or node's) figure for `metric`, or the Finding that says why there is none to judge."""
        ev = self._node_evidence(metric, node) if gpu is None else self._gpu_evidence(metric, GpuSlot(node, gpu))
        if isinstance(ev, Finding):
            return ev
        node_ev = self.evidence(node)
        assert node_ev is not None
        where = node if gpu is None else f"{node}/gpu{gpu}"
        wrong = evidence_problem(node_ev, metric, self.baseline_of(node).metrics[metric].unit, gpu)
        if wrong is not None:
            return Finding(metric, wrong[0], node, gpu, f"{where}: {wrong[1]}")
        samples = samples_of(node_ev, metric, gpu)
        if not samples:
            return Finding(metric, ERROR, node, gpu, f"{where}: the probe recorded no samples of {metric}")
        least = self.spec.certify.min_samples(probe_of_metric(metric))
        problem = sample_problem(samples, self.baseline_of(node).metrics[metric].expected, least)
        if problem is not None:
            return Finding(metric, ERROR, node, gpu, f"{where}: the {metric} samples cannot be believed: {problem}")
        sampled = figure_of(node_ev, metric, gpu)
        assert sampled is not None
        return sampled

    def peer_evidence(self, pool: str) -> list[NodeEvidence]:
        """The evidence a node is compared with: its pool's measured nodes (and, on recertification, the fleet's
        latest evidence of that pool), never another pool's. The one place that says who the peers are."""
        members = self.pools.members(pool)
        measured = [ev for node in members if (ev := self._measured_node(node)) is not None]
        return [*measured, *(self.fleet_peers if members else [])]

    def metric(self, metric: str, node: str, gpu: int | None) -> Finding:
        """The figure against its pool's SKU baseline, then against its peers (evaluation_performance)."""
        return judge_metric(self, metric, node, gpu)

    # ---- across nodes ----------------------------------------------------------------------------------------

    def _unmeasured(self) -> str | None:
        """The first inventory node that was not measured or showed no GPU, as a cause (a collective across
        nodes needs every node, and each with its GPUs)."""
        for node in self.inventory.names:
            ev = self.usable(node)
            if ev is None or not ev.collected:
                return str(self.unmeasured_cause(node))
            if not ev.gpus:
                return _because("inventory.gpus", node)
        return None

    def multinode(self) -> Finding:
        """The all-reduce across nodes against the baseline's multi-node figure (one finding for the set)."""
        if self.spec.certify.multinode is None:
            return Finding(MULTINODE, SKIP, None, None, "certify.multinode is not set: no all-reduce across nodes")
        pool = self.spec.pools[0]  # a spec with certify.multinode has one pool
        baseline = self.baselines[pool.name]
        figure = multinode_figure(pool) or baseline.metrics.get(MULTINODE)  # the pool's fabric first
        if figure is None:
            return Finding(MULTINODE, ERROR, None, None, f"the baseline {baseline.sku} has no figure for it")
        fabric = self.fabric
        if fabric is None:
            return Finding(MULTINODE, ERROR, None, None, "no multi-node evidence was written (evidence/multinode/)")
        odd = members_problem(fabric.nodes, self.inventory.names)
        if odd:
            return Finding(MULTINODE, ERROR, None, None, f"the multi-node evidence cannot be believed: {odd}")
        err = next(iter(fabric.errors), None)
        if err is not None:
            why = f"the all-reduce across nodes did not run: {err.message}"
            cause = self._unmeasured()
            if cause is not None and len(fabric.nodes) < 2:
                return _skip(MULTINODE, None, None, f"{why} (see {CheckKey.parse(cause).check})", cause)
            return Finding(MULTINODE, ERROR, None, None, why)
        return judge_multinode(fabric, figure)

    def fabric_straggler(self, node: str) -> Finding:
        """The node behind the ring: every pair of neighbours it is in is behind the pairs' median."""
        check = f"straggler.{MULTINODE}"
        multinode = self.spec.certify.multinode
        if multinode is None or not multinode.pairs:
            return Finding(check, SKIP, node, None, "certify.multinode.pairs is not set: no pairs were measured")
        ev = self.usable(node)
        if ev is None or not ev.collected:
            return self._unmeasured_skip(check, node)
        if not ev.gpus:
            return _skip(
                check, node, None, f"{node} shows no GPU (see inventory.gpus)", _because("inventory.gpus", node)
            )
        cause = self._unmeasured()
        if self.fabric_pairs is None:
            if cause is not None:
                return _skip(check, node, None, "no pairs of nodes were measured: not every node was", cause)
            return Finding(check, ERROR, node, None, "no pairs of nodes were measured though the spec asks for them")
        odd, values, failures, peers = self._pairs
        if odd:
            return Finding(check, ERROR, node, None, f"the pairs' evidence cannot be believed: {odd}")
        failed = failures.get(node, [])
        if failed:
            message = f"the all-reduce of {node}'s pairs did not run: {' | '.join(failed)}"
            return Finding(check, ERROR, node, None, message)
        mine = [name for name in values if node in name.split(" + ")]
        if not mine or not enough_pairs(values):
            why = f"{node} was in no pair" if not mine else f"{len(values)} pairs are too few to tell a slow node"
            if cause is not None:
                return _skip(check, node, None, f"{why}: not every node was measured", cause)
            return Finding(check, ERROR, node, None, f"{why}, though every node was measured")
        s = self.spec.stragglers_for(self.spec.pools[0].name)
        return judge_pairs(node, values, s.max_deviation, s.min_z, peers)

    @cached_property
    def _pairs(self) -> tuple[str | None, dict[str, float], dict[str, list[str]], Summary | None]:
        """The pairs' evidence, judged once for every node: why it cannot be believed, each pair's figure, the
        pairs that did not run by node, and the figures' summary (every node is held to the same pairs)."""
        assert self.fabric_pairs is not None
        odd = pairs_problem(self.fabric_pairs, self.inventory.names)
        values, failed = pair_figures(self.fabric_pairs)
        return odd, values, failed, summarize(list(values.values())) if values else None
