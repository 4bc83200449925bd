"""Everything a suite test asks of a run: the run's files, read once, and one Finding per check.

The suites stay one line each; this module finds the right evidence, decides what a missing dependency means
(skip with its reason: one root cause, one finding) and hands the numbers to the pure rules in analysis/ and stack/.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cached_property
from pathlib import Path
from typing import Any

from gpucert.analysis.health import judge_health
from gpucert.analysis.performance import (
    MIN_PEERS,
    STRAGGLER_MIN_Z,
    Sampled,
    StragglerIndex,
    against_baseline,
    figure_of,
    top_busbw,
)
from gpucert.analysis.stats import median, summarize
from gpucert.baseline import GpuBaseline
from gpucert.checks import DCGM_TESTS_BY_LEVEL, FABRIC_METRICS, NODE_METRICS, CheckStatus, Finding
from gpucert.evidence import (
    FabricEvidence,
    FabricPairs,
    GpuEvidence,
    NodeEvidence,
    read_evidence,
    read_fabric,
    read_fabric_pairs,
)
from gpucert.handover import NodeBaseline, handover_tolerance, load_node_baseline
from gpucert.inventory import Inventory, read_inventory
from gpucert.spec import ClusterSpec, Probe
from gpucert.stack import rules
from gpucert.stack.observe import NodeStack, StackObservation, read_stack

__all__ = ["FABRIC_METRICS", "NODE_METRICS", "Evaluation", "GpuSlot"]

SKIP, ERROR = CheckStatus.SKIP, CheckStatus.ERROR


class GpuSlot:
    """One expected GPU of one node: what per-GPU tests are parametrized over."""

    __slots__ = ("index", "node")

    def __init__(self, node: str, index: int) -> None:
        self.node = node
        self.index = index

    def __repr__(self) -> str:
        return f"{self.node}/gpu{self.index}"


def _probe_of(check: str) -> Probe:
    return Probe(check.split(".")[0]) if not check.startswith("health.") else Probe.HEALTH


class Evaluation:
    """The run folder's inventory, stack observation and evidence, with the judgement of every check."""

    def __init__(self, run_dir: Path, spec: ClusterSpec, baseline: GpuBaseline) -> None:
        self.run_dir = run_dir
        self.spec = spec
        self.baseline = baseline
        self._evidence: dict[str, NodeEvidence | None] = {}
        self._stragglers: dict[str, StragglerIndex] = {}

    # ---- the run's files -------------------------------------------------------------------------------------

    @cached_property
    def inventory(self) -> Inventory:
        return read_inventory(self.run_dir / "inventory.json")

    @cached_property
    def stack(self) -> StackObservation:
        return read_stack(self.run_dir / "stack.json")

    @property
    def measured(self) -> bool:
        """Whether this run measured nodes (a configure-only run has no evidence folder)."""
        return (self.run_dir / "evidence").is_dir()

    @cached_property
    def recertification(self) -> dict[str, Any] | None:
        """What `gpucert recertify` wrote about the run (the node, its handover baseline), or None."""
        path = self.run_dir / "recertify.json"
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data

    @cached_property
    def handover(self) -> NodeBaseline | None:
        """The node's handover baseline as the run used it (copied into inputs/, so it is signed with the run)."""
        path = self.run_dir / "inputs" / "handover.yaml"
        return load_node_baseline(path) if path.exists() else None

    @cached_property
    def fleet_peers(self) -> list[NodeEvidence]:
        """Other nodes' latest evidence, copied into fleet/ by recertify: the peers a lone node is compared with."""
        folder = self.run_dir / "fleet"
        return [read_evidence(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []

    @cached_property
    def fabric(self) -> FabricEvidence | None:
        return read_fabric(self.run_dir / "evidence") if self.measured else None

    @cached_property
    def fabric_pairs(self) -> FabricPairs | None:
        return read_fabric_pairs(self.run_dir / "evidence") if self.measured else None

    def evidence(self, node: str) -> NodeEvidence | None:
        if node not in self._evidence:
            path = self.run_dir / "evidence" / f"{node}.json"
            self._evidence[node] = read_evidence(path) if path.exists() else None
        return self._evidence[node]

    # ---- configure -------------------------------------------------------------------------------------------

    def _node_stack(self, node: str) -> NodeStack | Finding:
        ns = self.stack.nodes.get(node)
        if ns is None:
            return Finding("", SKIP, node, None, f"{node} is not listed by the cluster (see node.reachable)")
        if not ns.ready:
            return Finding("", SKIP, node, None, f"{node} is not Ready (see node.reachable)")
        return ns

    def components(self) -> list[str]:
        return rules.pinned_components(self.spec, set(self.spec.stack.sources()))

    def node_count(self) -> Finding:
        if self.recertification is not None:
            node = self.recertification["node"]
            return Finding("inventory.nodes", SKIP, None, None, f"recertification of {node}: one node is measured")
        return rules.node_count(self.inventory.names, self.spec)

    def reachable(self, node: str) -> Finding:
        error = None
        if self.measured:
            ev = self.evidence(node)
            if ev is None:
                error = "no evidence was written for this node"
            elif not ev.collected:
                error = "; ".join(e.message for e in ev.errors) or "the probe did not run"
        return rules.reachable(self.stack.nodes.get(node), node, error)

    def configure(self, check: str, node: str, component: str | None = None) -> Finding:
        ns = self._node_stack(node)
        if isinstance(ns, Finding):
            return Finding(check, SKIP, node, None, ns.message)
        match check:
            case "stack.version":
                assert component is not None
                return rules.version(ns, self.spec, component)
            case "stack.skew":
                return rules.skew(ns, self.stack.nodes)
            case "stack.compat":
                return rules.compat(ns, self.spec)
            case "stack.ordering":
                return rules.ordering(ns, self.spec)
            case "stack.kubernetes":
                return rules.kubernetes_version(ns, self.spec)
            case "stack.runtime":
                return rules.runtime(ns, self.spec)
            case "inventory.gpus":
                ev = self.evidence(node) if self.measured else None
                return rules.gpu_count(ns, self.spec, len(ev.gpus) if ev and ev.collected else None)
            case "inventory.product":
                return rules.gpu_product(ns, self.spec)
        raise ValueError(f"unknown configure check {check!r}")

    # ---- certify ---------------------------------------------------------------------------------------------

    def _node_evidence(self, check: str, node: str) -> NodeEvidence | Finding:
        probe = _probe_of(check)
        if probe not in self.spec.certify.probes:
            return Finding(check, SKIP, node, None, f"probe {probe.value!r} is not in certify.probes")
        ev = self.evidence(node)
        if ev is None or not ev.collected:
            return Finding(check, SKIP, node, None, f"{node} was not measured (see node.reachable)")
        err = ev.error_for(probe.value)
        if err is not None and err.unavailable:
            return Finding(check, SKIP, node, None, f"{node}: the {probe.value} probe is unavailable: {err.message}")
        if err is not None:
            return Finding(check, ERROR, node, None, f"{node}: the {probe.value} probe failed: {err.message}")
        return ev

    def _gpu_evidence(self, check: str, gpu: GpuSlot) -> GpuEvidence | Finding:
        ev = self._node_evidence(check, gpu.node)
        if isinstance(ev, Finding):
            return Finding(check, ev.status, gpu.node, gpu.index, ev.message)
        g = ev.gpu(gpu.index)
        if g is None:
            return Finding(
                check,
                SKIP,
                gpu.node,
                gpu.index,
                f"{gpu!r} is not present: the node shows {len(ev.gpus)} GPUs (see inventory.gpus)",
            )
        err = ev.error_for(_probe_of(check).value, gpu.index, check)  # this GPU's alone: the others stand
        if err is not None:
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu!r}: the {err.probe} probe failed: {err.message}")
        return g

    def health(self, check: str, gpu: GpuSlot) -> Finding:
        g = self._gpu_evidence(check, gpu)
        if isinstance(g, Finding):
            return g
        if g.health is None:
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu!r}: the health probe recorded nothing")
        return judge_health(check, g.health, self.baseline, gpu.node, gpu.index)

    def dcgm_tests(self) -> list[str]:
        level = self.spec.certify.dcgm.level
        return [t for lvl in range(1, level + 1) for t in DCGM_TESTS_BY_LEVEL[lvl]]

    def dcgm(self, test: str, gpu: GpuSlot) -> Finding:
        check = f"dcgm.{test}"
        g = self._gpu_evidence(check, gpu)
        if isinstance(g, Finding):
            return g
        ev = self.evidence(gpu.node)
        assert ev is not None
        d = ev.dcgm
        if d is None:
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu.node}: no DCGM diagnostic was recorded")
        if d.runtime_error:
            return Finding(check, ERROR, gpu.node, gpu.index, f"{gpu.node}: dcgmi diag failed: {d.runtime_error}")
        result = d.results.get(test)
        if result is None:
            return Finding(
                check,
                CheckStatus.FAIL,
                gpu.node,
                gpu.index,
                f"{gpu!r}: DCGM level {d.level} did not run the {test} test (exit code {d.exit_code})",
            )
        mine = result.gpus.get(gpu.index)
        if mine is not None and mine.status == "Fail":
            why = mine.describe()  # with the DCGM_FR_* id, category and severity where DCGM gave them
            return Finding(
                check,
                CheckStatus.FAIL,
                gpu.node,
                gpu.index,
                f"{gpu!r}: DCGM {test} Fail: {why}",
                observed="Fail",
                expected="Pass",
            )
        if result.summary == "Fail" and not any(r.status == "Fail" for r in result.gpus.values()):
            return Finding(
                check,
                CheckStatus.FAIL,
                gpu.node,
                gpu.index,
                f"{gpu!r}: DCGM {test} summary is Fail though no GPU result is ({'; '.join(result.info)})",
                observed="Fail",
                expected="Pass",
            )
        status = mine.status if mine is not None else (result.summary or "Pass")
        if status == "Skip":
            return Finding(check, SKIP, gpu.node, gpu.index, f"{gpu!r}: DCGM skipped {test}")
        return Finding(
            check,
            CheckStatus.PASS,
            gpu.node,
            gpu.index,
            f"{gpu!r}: DCGM {test} {status}",
            observed=status,
            expected="Pass",
        )

    def sampled(self, metric: str, node: str, gpu: int | None) -> Sampled | None:
        """The median of one measurement and its sample count, or None when it was not measured."""
        ev = self.evidence(node)
        return figure_of(ev, metric, gpu) if ev is not None and ev.collected else None

    def p2p_matrix(self, node: str) -> list[list[float | None]] | None:
        """Median peer copy bandwidth per (source, destination) pair of one node; None on the diagonal."""
        ev = self.evidence(node)
        if ev is None or ev.p2p is None or not ev.gpus:
            return None
        n = len(ev.gpus)
        m: list[list[float | None]] = [[None] * n for _ in range(n)]
        for p in ev.p2p.pairs:
            if p.samples and p.src < n and p.dst < n:
                m[p.src][p.dst] = median(p.samples)
        return m

    def nccl_curve(self, node: str) -> list[tuple[int, float]]:
        """(message size, median bus bandwidth) over the node's all-reduce sweep."""
        ev = self.evidence(node)
        if ev is None or ev.nccl is None:
            return []
        return [(p.size_bytes, median(p.busbw)) for p in ev.nccl.points if p.busbw]

    def evidence_for(self, finding: Finding) -> dict[str, object] | None:
        """The evidence behind a finding, as JSON-ready data, for the reports' failure details."""
        node = finding.node
        if finding.check in FABRIC_METRICS:
            return self.fabric.model_dump(mode="json") if self.fabric else None
        if finding.check.removeprefix("straggler.") in FABRIC_METRICS:
            mine = [p for p in (self.fabric_pairs.pairs if self.fabric_pairs else []) if node in p.nodes]
            return {"pairs": [p.model_dump(mode="json") for p in mine]}
        if node is None:
            return {"nodes": self.inventory.names}
        family = finding.check.removeprefix("straggler.").split(".")[0]
        if family in ("stack", "inventory", "node"):
            ns = self.stack.nodes.get(node)
            return ns.model_dump(mode="json") if ns is not None else None
        ev = self.evidence(node)
        if ev is None:
            return None
        if family == "nccl":
            return ev.nccl.model_dump(mode="json") if ev.nccl else None
        if family == "p2p":
            pairs = [
                p.model_dump(mode="json") for p in (ev.p2p.pairs if ev.p2p else []) if finding.gpu in (p.src, p.dst)
            ]
            return {"unit": ev.p2p.unit if ev.p2p else None, "pairs": pairs}
        gpu = ev.gpu(finding.gpu) if finding.gpu is not None else None
        if gpu is None:
            return {"errors": [e.model_dump(mode="json") for e in ev.errors]}
        if family == "health":
            return gpu.health.model_dump(mode="json") if gpu.health else None
        if family == "dcgm" and ev.dcgm is not None:
            test = ev.dcgm.results.get(finding.check.removeprefix("dcgm."))
            return {
                "version": ev.dcgm.version,
                "exit_code": ev.dcgm.exit_code,
                "result": test.model_dump(mode="json") if test else None,
            }
        metric = finding.check.removeprefix("straggler.")
        m = gpu.measurements.get(metric)
        return {
            "gpu": gpu.index,
            "uuid": gpu.uuid,
            "serial": gpu.serial,
            metric: m.model_dump(mode="json") if m else None,
        }

    def _straggler_index(self, metric: str) -> StragglerIndex:
        if metric not in self._stragglers:
            values: dict[tuple[str, int | None], Sampled] = {}
            measured = [self.evidence(node) for node in self.inventory.names]
            for ev in [*measured, *self.fleet_peers]:
                if ev is None or not ev.collected:
                    continue
                node = ev.node
                indices: list[int | None] = [None] if metric in NODE_METRICS else [g.index for g in ev.gpus]
                for idx in indices:
                    s = figure_of(ev, metric, idx)
                    if s is not None:
                        values[(node, idx)] = s
            self._stragglers[metric] = StragglerIndex(
                metric,
                values,
                max_deviation=self.spec.certify.stragglers.max_deviation,
                higher_is_better=self.baseline.metrics[metric].comparison.value == "min",
            )
        return self._stragglers[metric]

    def multinode(self, metric: str = "nccl.all_reduce.multinode") -> Finding:
        """The all-reduce across nodes against the baseline's multi-node figure (one finding for the set)."""
        if self.spec.certify.multinode is None:
            return Finding(
                metric, SKIP, None, None, "certify.multinode is not set: no all-reduce across nodes was asked"
            )
        if metric not in self.baseline.metrics:
            return Finding(metric, SKIP, None, None, f"the baseline {self.baseline.sku} has no figure for {metric}")
        fabric = self.fabric
        if fabric is None:
            return Finding(metric, ERROR, None, None, "no multi-node evidence was written (evidence/multinode/)")
        err = next(iter(fabric.errors), None)
        if err is not None:
            status = SKIP if err.unavailable else ERROR
            return Finding(metric, status, None, None, f"the all-reduce across nodes did not run: {err.message}")
        if fabric.nccl is None or not fabric.nccl.points:
            return Finding(metric, ERROR, None, None, "the all-reduce across nodes recorded no samples")
        where = f"{len(fabric.nodes)} nodes x {fabric.gpus_per_node} GPUs ({', '.join(fabric.nodes)}):"
        if not fabric.nccl.correct:
            return Finding(metric, CheckStatus.FAIL, None, None, f"{where} the reduced values were wrong")
        busbw = top_busbw(fabric.nccl)
        sampled = Sampled(median(busbw), len(busbw), "GB/s")
        found = against_baseline(metric, (where, None), sampled, self.baseline.metrics[metric])
        return dataclasses.replace(found, node=None)

    # ---- recertify: the node against its own handover baseline ------------------------------------------------

    def _no_handover(self, check: str, node: str, gpu: int | None) -> Finding | None:
        if self.recertification is None:
            return Finding(check, SKIP, node, gpu, "not a recertification: handover checks run in `gpucert recertify`")
        if self.handover is None:
            return Finding(
                check,
                SKIP,
                node,
                gpu,
                f"{node} has no handover baseline: recertified against the SKU baseline and the fleet only",
            )
        return None

    def recertify_summary(self) -> str:
        """One sentence for the reports: what this recertification compared the node with."""
        recert = self.recertification
        if recert is None:
            return ""
        node, peers = recert["node"], len(recert.get("fleetPeers") or {})
        fleet = f"the fleet's latest evidence ({peers} nodes)" if peers else "no fleet evidence (no earlier runs)"
        if self.handover is None:
            return (
                f"Recertification of {node}: NO HANDOVER BASELINE for this node; recertified against the SKU "
                f"baseline {self.baseline.sku} and {fleet} only"
            )
        r = self.handover.recorded
        return (
            f"Recertification of {node} against its handover baseline (run {r.run}, {r.date}"
            + (f", certificate {r.certificate}" if r.certificate else ", unsigned")
            + f"), the SKU baseline {self.baseline.sku} and {fleet}"
        )

    def identity(self, gpu: GpuSlot) -> Finding:
        """The GPU in this slot is the one recorded at handover (by serial, else by UUID)."""
        check = "handover.identity"
        missing = self._no_handover(check, gpu.node, gpu.index)
        if missing is not None:
            return missing
        assert self.handover is not None
        g = self._gpu_evidence("health.identity", gpu)
        if isinstance(g, Finding):
            return dataclasses.replace(g, check=check)
        was = self.handover.gpu(gpu.index)
        if was is None:
            return Finding(check, CheckStatus.FAIL, gpu.node, gpu.index, f"{gpu!r} was not present at handover")
        then, now, what = (was.serial, g.serial, "serial") if was.serial else (was.uuid, g.uuid, "UUID")
        if then == now:
            return Finding(check, CheckStatus.PASS, gpu.node, gpu.index, f"{gpu!r}: {what} {now} as at handover")
        return Finding(
            check,
            CheckStatus.FAIL,
            gpu.node,
            gpu.index,
            f"{gpu!r} was swapped since handover (run {self.handover.recorded.run}): {what} {then} then, {now} now; "
            "record a new handover baseline once the new GPU is certified",
            observed=now,
            expected=then,
        )

    def against_handover(self, metric: str, node: str, gpu: int | None) -> Finding:
        """The figure against the node's own handover median, within max(3 x recorded spread, 3 %)."""
        check = f"handover.{metric}"
        missing = self._no_handover(check, node, gpu)
        if missing is not None:
            return missing
        assert self.handover is not None
        if metric not in self.baseline.metrics:
            return Finding(check, SKIP, node, gpu, f"the baseline {self.baseline.sku} has no figure for {metric}")
        ev = self._node_evidence(metric, node) if gpu is None else self._gpu_evidence(metric, GpuSlot(node, gpu))
        if isinstance(ev, Finding):
            return dataclasses.replace(ev, check=check)
        if gpu is None:
            rec = self.handover.node_metrics.get(metric)
        else:
            was = self.handover.gpu(gpu)
            if was is not None and self.identity(GpuSlot(node, gpu)).status is CheckStatus.FAIL:
                return Finding(
                    check, SKIP, node, gpu, f"{node}/gpu{gpu} is not the GPU of handover (see handover.identity)"
                )
            rec = was.metrics.get(metric) if was is not None else None
        if rec is None:
            return Finding(
                check,
                SKIP,
                node,
                gpu,
                f"{metric} was not recorded at handover for this {'node' if gpu is None else 'GPU'}",
            )
        node_ev = self.evidence(node)
        assert node_ev is not None
        now = figure_of(node_ev, metric, gpu)
        if now is None:
            return Finding(check, ERROR, node, gpu, f"{node}: the probe recorded no samples of {metric}")
        tol = handover_tolerance(rec.spread)
        sign = 1.0 if self.baseline.metrics[metric].comparison.value == "min" else -1.0
        deviation = now.value / rec.median - 1
        where = node if gpu is None else f"{node}/gpu{gpu}"
        word = "below" if deviation < 0 else "above"
        msg = (
            f"{where} {metric} {now.value:.4g} {now.unit} (median of {now.n} samples) is {abs(deviation):.1%} {word} "
            f"its handover median {rec.median:.4g} {rec.unit} (run {self.handover.recorded.run}, spread "
            f"{rec.spread:.1%} over {rec.n} samples, tolerance {tol:.1%})"
        )
        status = CheckStatus.FAIL if sign * deviation < -tol else CheckStatus.PASS
        return Finding(check, status, node, gpu, msg, observed=round(now.value, 4), expected=rec.median, unit=rec.unit)

    def fabric_straggler(self, node: str) -> Finding:
        """The node behind the ring: every pair of neighbours it is in is behind the pairs' median."""
        check = "straggler.nccl.all_reduce.multinode"
        multinode = self.spec.certify.multinode
        if multinode is None or not multinode.pairs:
            return Finding(
                check, SKIP, node, None, "certify.multinode.pairs is not set: no pairs of nodes were measured"
            )
        pairs = self.fabric_pairs
        if pairs is None:
            return Finding(
                check, SKIP, node, None, "no pairs of nodes were measured (it takes three measured nodes and a cluster)"
            )
        values: dict[tuple[str, int | None], float] = {}
        failed: list[str] = []
        for pair in pairs.pairs:
            name = " + ".join(pair.nodes)
            if pair.errors or pair.nccl is None or not pair.nccl.points or not pair.nccl.correct:
                if node in pair.nodes:
                    why = "; ".join(e.message for e in pair.errors) or "no correct samples"
                    failed.append(f"{name}: {why}")
                continue
            values[(name, None)] = median(top_busbw(pair.nccl))
        mine = {k: v for k, v in values.items() if node in k[0].split(" + ")}
        if failed:
            return Finding(
                check, ERROR, node, None, f"the all-reduce of {node}'s pairs did not run: {' | '.join(failed)}"
            )
        if not mine:
            return Finding(check, SKIP, node, None, f"{node} was in no pair (not measured, or past maxNodes)")
        if len(values) - 1 < MIN_PEERS:
            return Finding(check, SKIP, node, None, f"{len(values)} pairs are too few to tell which node is behind")
        peers = summarize(list(values.values()))
        limit = self.spec.certify.stragglers.max_deviation
        behind = {k: v for k, v in mine.items() if v / peers.median - 1 < -limit and peers.z(v) < -STRAGGLER_MIN_Z}
        detail = ", ".join(f"{k[0]} {v:.4g} GB/s ({v / peers.median - 1:+.1%})" for k, v in mine.items())
        where = f"the median of {len(values)} pairs is {peers.median:.4g} GB/s"
        if len(behind) == len(mine):
            worst = min(mine.values())
            return Finding(
                check,
                CheckStatus.FAIL,
                node,
                None,
                f"{node} slows every ring it is in: {detail}; {where} (limit {limit:.0%})",
                observed=round(worst, 4),
                expected=round(peers.median, 4),
                unit="GB/s",
            )
        return Finding(check, CheckStatus.PASS, node, None, f"{node}'s pairs: {detail}; {where}")

    def metric(self, metric: str, node: str, gpu: int | None) -> Finding:
        """Against the baseline first; inside it, against the GPU's peers on the node and in the fleet."""
        if metric not in self.baseline.metrics:
            return Finding(metric, SKIP, node, gpu, f"the baseline {self.baseline.sku} has no figure for {metric}")
        ev = self._node_evidence(metric, node) if gpu is None else self._gpu_evidence(metric, GpuSlot(node, gpu))
        if isinstance(ev, Finding):
            return ev
        node_ev = self.evidence(node)
        assert node_ev is not None
        sampled = figure_of(node_ev, metric, gpu)
        if sampled is None:
            return Finding(metric, ERROR, node, gpu, f"{node}: the probe recorded no samples of {metric}")
        base = against_baseline(metric, (node, gpu), sampled, self.baseline.metrics[metric])
        if base.status is not CheckStatus.PASS:
            return base
        straggler = self._straggler_index(metric).judge((node, gpu))
        return straggler if straggler.status is not CheckStatus.PASS else base
