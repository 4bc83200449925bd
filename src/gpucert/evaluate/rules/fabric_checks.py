"""The `fabric` family (and `pool.fabric`) as a run decides it: find a pool's fabric declaration and its evidence,
or say why there is none, and hand them to the pure rules (rules/fabric_config, fabric_ports, fabric_isolation,
fabric_transport). Reads the run's view (RunView); registered in catalog.py.

One root cause, one finding: a rail whose port fails `fabric.port` skips its counters and its RDMA bandwidth with
that cause; a pair's low bandwidth is judged once, by the finding that explains it (a port, a rack link, a node's
rail, or the link between the two nodes), see rules/fabric_isolation.py.
"""

from __future__ import annotations

import statistics
from collections import Counter

from gpucert.evaluate.pairs_index import RdmaRow
from gpucert.evaluate.rules.fabric_config import POOL_FABRIC, Contradiction, contradiction, judge_pool_fabric
from gpucert.evaluate.rules.fabric_isolation import PairFigure, RailIsolation, describe, isolate_rail
from gpucert.evaluate.rules.fabric_ports import (
    gpus_of_rail,
    judge_affinity,
    judge_counters,
    judge_firmware,
    judge_gdr,
    judge_port,
    rail_port,
    rail_where,
)
from gpucert.evaluate.rules.fabric_schedule import Schedule, check_schedule
from gpucert.evaluate.rules.fabric_transport import TRANSPORT, Collective, Seen, judge_transport
from gpucert.evaluate.rules.performance import absurd_problem
from gpucert.evaluate.view import RunView
from gpucert.measure.evidence_fabric import NodeFabric
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.fabric_checks import rail_detail, rail_of
from gpucert.spec.baseline import MetricBaseline
from gpucert.spec.cluster import Pool
from gpucert.spec.fabric import FabricSpec

__all__ = ["FabricView", "decide_fabric", "fabric_view", "multinode_figure"]

PASS, FAIL, ERROR, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP
RDMA = "fabric.rdma_bw"


def multinode_figure(pool: Pool) -> MetricBaseline | None:
    """The all-reduce bus bandwidth the pool's fabric expects across its nodes (`fabric.ncclBusbw`), as a baseline
    figure; None when it names none (the SKU baseline's `nccl.all_reduce.multinode` holds then)."""
    busbw = pool.fabric.nccl_busbw if pool.fabric is not None else None
    if busbw is None:
        return None
    return MetricBaseline(expected=busbw.expected, unit="GB/s", tolerance=busbw.tolerance, source=busbw.source)


def pool_fabric(ev: RunView, pool_name: str) -> Finding:
    """`pool.fabric` of one pool: its declaration against the link layer and the nodes the cluster lists."""
    pool = ev.spec.pool(pool_name)
    members = ev.pools.members(pool_name)
    stacks = {n: ns for n in members if (ns := ev.stack.nodes.get(n)) is not None}
    measured = ev.measured and members and pool.fabric is not None
    found = judge_pool_fabric(pool, stacks, fabric_view(ev, pool).contradiction() if measured else None)
    if found.status is ERROR and not members:
        why = f"pool {pool_name} has no nodes, so its fabric cannot be judged (see inventory.nodes)"
        return Finding(POOL_FABRIC, SKIP, None, None, why, cause=str(CheckKey("inventory.nodes")))
    return found


def _pair_figure(r: RdmaRow, expected: float) -> PairFigure:
    a, b = sorted((r.client, r.server))
    if r.error:
        return PairFigure(r.rail, a, b, None, f"did not run: {r.error}")
    if r.unit != "Gb/s":
        return PairFigure(r.rail, a, b, None, f"recorded in {r.unit}, not Gb/s")
    problem = r.problem or (absurd_problem(r.top, expected) if r.top is not None else None)
    if problem or r.median is None:
        return PairFigure(r.rail, a, b, None, f"samples cannot be believed: {problem}")
    return PairFigure(r.rail, a, b, r.median)


class FabricView:
    """One pool's fabric evidence, judged once for every check that reads it."""

    def __init__(self, ev: RunView, pool: Pool) -> None:
        assert pool.fabric is not None
        self.ev, self.pool, self.spec = ev, pool, pool.fabric
        self.members = ev.pools.members(pool.name)
        self._rails: dict[int, RailIsolation] = {}
        self._schedule: Schedule[RdmaRow] | None = None

    def node(self, node: str) -> NodeFabric | None:
        usable = self.ev.usable(node)
        return usable.fabric if usable is not None and usable.collected else None

    def unmeasured(self, check: str, node: str, detail: str | None) -> Finding | None:
        usable = self.ev.usable(node) if self.ev.measured else None
        if usable is None or not usable.collected:
            cause = self.ev.unmeasured_cause(node)
            return Finding(check, SKIP, node, None, f"{node} was not measured (see {cause.check})", cause=str(cause))
        if usable.fabric is None:
            return Finding(check, ERROR, node, None, f"{node}: no fabric evidence was written for it")
        return None

    def port(self, node: str, rail: int) -> Finding:
        """`fabric.port`; a port the pool's declaration explains as a whole (see contradiction) follows from
        pool.fabric: every port of another link layer, a rail no node has, or one whose one fault is the
        pool-wide rate or MTU."""
        nf = self.node(node)
        assert nf is not None
        said = self.contradiction()
        if said.explains(rail):
            why = _why(said) if said.unmapped else "no node of the pool has this rail"
            message = f"{node} rail {rail}: {why} (see pool.fabric)"
            return Finding("fabric.port", SKIP, node, None, message, cause=self.pool_key)
        port = rail_port(nf, self.spec, rail)
        found = judge_port(node, rail, port, self.spec)
        if found.status is not FAIL or port is None or (said.rate is None and said.mtu is None):
            return found
        update = {"rated_gbps": said.rate or self.spec.rated_gbps, "mtu": said.mtu or self.spec.mtu}
        if judge_port(node, rail, port, self.spec.model_copy(update=update)).status is not PASS:
            return found
        what = ", ".join(w for w in (port.rate if said.rate else "", f"MTU {said.mtu}" if said.mtu else "") if w)
        message = f"{rail_where(node, rail, port.key)}: {what}, as every rail port of the pool (see pool.fabric)"
        return Finding("fabric.port", SKIP, node, None, message, cause=self.pool_key)

    def skip_unmapped(self, check: str, node: str) -> Finding:
        message = f"{node}: {_why(self.contradiction())}, its rail HCAs are not known (see pool.fabric)"
        return Finding(check, SKIP, node, None, message, cause=self.pool_key)

    @property
    def pool_key(self) -> str:
        return str(CheckKey(POOL_FABRIC, None, None, self.pool.name))

    def contradiction(self) -> Contradiction:
        """What the pool's measured nodes contradict of its declaration as a whole (rules/fabric_config.py)."""
        return self.ev.once(f"fabric.contradiction.{self.pool.name}", self._contradiction)

    def _contradiction(self) -> Contradiction:
        return contradiction(self.spec, [nf for n in self.members if (nf := self.node(n)) is not None])

    def down(self, rail: int) -> dict[str, str]:
        """The nodes whose own finding explains all their pairs on `rail`, with that finding's key: a failing port
        (fabric.port), no GPUDirect RDMA (fabric.gdr: ib_write_bw --use_cuda cannot register GPU memory)."""
        out: dict[str, str] = {}
        for n in self.members:
            if self.node(n) is None:
                continue
            port = self.port(n, rail)
            if port.status is FAIL:
                out[n] = str(CheckKey("fabric.port", n, None, rail_detail(rail)))
            elif port.cause is not None and (self.contradiction().explains(rail) or self.contradiction().rate):
                out[n] = port.cause
            elif self.gdr(n).status is FAIL:
                out[n] = str(CheckKey("fabric.gdr", n))
        return out

    def gdr(self, node: str) -> Finding:
        nf = self.node(node)
        assert nf is not None
        if self.contradiction().unmapped:  # no rail NIC known to ask for DMA-BUF
            return self.skip_unmapped("fabric.gdr", node)
        rails = range(self.spec.rails.count)
        hcas = [p.hca for r in rails if (p := rail_port(nf, self.spec, r)) is not None]
        return judge_gdr(node, nf.gdr, hcas, list(range(self.ev.pools.gpus_per_node(node))))

    def schedule(self) -> Schedule[RdmaRow]:
        """The pool's pairs' RDMA records held to the round-robin schedule of its measured nodes (a re-test's: its
        carried pairs and those it measured again), once (the all-reduce across the pool is no pair of the
        schedule: a two-node pool's ring is its one pair again)."""
        if self._schedule is None:
            index = self.ev.pairs_index
            records = ((r.doc, r) for r in (index.rdma if index is not None else []))
            measured = [n for n in self.members if (u := self.ev.usable(n)) is not None and u.collected and u.gpus]
            self._schedule = check_schedule(
                records,
                self.pool.name,
                self.members,
                set(measured),
                self.spec.rails.count,
                self._hca,
                carried=self.ev.pairs_carried_for,
            )
        return self._schedule

    def _hca(self, node: str, rail: int) -> str | None:
        nf = self.node(node)
        port = rail_port(nf, self.spec, rail) if nf is not None else None
        return port.key if port is not None else None

    def rail(self, rail: int) -> RailIsolation:
        """The rail's pairs that fit the schedule, isolated once (every node's check and every rack pair's read
        the same)."""
        if rail not in self._rails:
            limit = self.spec.rdma_expected().limit
            figures = [_pair_figure(r, limit) for r in self.schedule().kept.get(rail, [])]
            self._rails[rail] = isolate_rail(rail, figures, limit, self.members, self.racks(), self.down(rail))
        return self._rails[rail]

    def racks(self) -> dict[str, str | None]:
        label = self.spec.rack_label
        return {n: self.ev.pools.label(n, label) if label else None for n in self.members}


def _why(said: Contradiction) -> str:
    return f"every rail port is {said.layer}" if said.layer else f"{said.extra} or more ports for the rails"


def fabric_view(ev: RunView, pool: Pool) -> FabricView:
    views: dict[str, FabricView] = ev.once("fabric.views", dict)
    if pool.name not in views:
        views[pool.name] = FabricView(ev, pool)
    return views[pool.name]


def _node_rail(view: FabricView, check: str, node: str, rail: int) -> Finding:
    nf = view.node(node)
    assert nf is not None
    spec: FabricSpec = view.spec
    port = rail_port(nf, spec, rail)
    port_found = view.port(node, rail)
    if check == "fabric.port":
        return port_found
    said = view.contradiction()
    if said.explains(rail) or (check == "fabric.affinity" and said.missing):
        # GPU g's rail is g * count // gpus: a count no node has maps GPUs to rails they do not use
        why = _why(said) if said.unmapped else "the rail count"
        message = f"{node} rail {rail}: follows from {why} (see pool.fabric)"
        return Finding(check, SKIP, node, None, message, cause=view.pool_key)
    cause = str(CheckKey("fabric.port", node, None, rail_detail(rail)))
    if check == "fabric.affinity" and port is not None:
        gpus = gpus_of_rail(rail, spec.rails.count, view.ev.pools.gpus_per_node(node))
        return judge_affinity(node, rail, port.key, gpus, nf.affinity)
    if port_found.status is FAIL or port is None:
        where = rail_where(node, rail, port.key if port is not None else f"?/{spec.rails.port}")
        return Finding(check, SKIP, node, None, f"{where}: its port fails (see fabric.port)", cause=cause)
    if check == "fabric.counters":
        return judge_counters(node, rail, port.key, nf.counters, spec)
    if port_found.cause is not None and said.rate:  # every port at one rate below ratedGbps: the RDMA bar is wrong
        message = f"{rail_where(node, rail, port.key)}: its bar follows from ratedGbps (see pool.fabric)"
        return Finding(check, SKIP, node, None, message, cause=port_found.cause)
    if view.gdr(node).status is FAIL:
        message = f"{rail_where(node, rail, port.key)}: no GPUDirect RDMA to measure from GPU memory (see fabric.gdr)"
        return Finding(check, SKIP, node, None, message, cause=str(CheckKey("fabric.gdr", node)))
    return _rdma_node(view, node, rail, port.key)


def _rdma_node(view: FabricView, node: str, rail: int, port: str) -> Finding:
    iso = view.rail(rail)
    where = rail_where(node, rail, port)
    odd = view.schedule().of(node, rail)
    if odd:
        more = f"; and {len(odd) - 3} more" if len(odd) > 3 else ""
        message = f"{where}: its pairs are not the schedule's (every pair of the pool once): {'; '.join(odd[:3])}{more}"
        return Finding(RDMA, ERROR, node, None, message)
    limit = f"{iso.limit:.4g} Gb/s"
    if node in iso.nodes:
        slow = iso.nodes[node]
        worst = min((p.gbps for p in slow if p.gbps is not None), default=None)
        if worst is None:  # not one figure: nothing says the rail is slow, only that its evidence cannot be used
            message = f"{where}: most of its pairs have no figure that can be believed: {describe(slow)}"
            return Finding(RDMA, ERROR, node, None, message)
        message = f"{where}: slow with most of its peers, so the fault is on this node's rail: {describe(slow)}"
        return Finding(
            RDMA, FAIL, node, None, f"{message} (limit {limit})", observed=worst, limit=iso.limit, unit="Gb/s"
        )
    if node in iso.links:
        links = iso.links[node]
        peers = ", ".join(p.peer(node) for p in links)
        worst = min((p.gbps for p in links if p.gbps is not None), default=None)
        if worst is None:  # a NaN or a 1e300 says nothing of the link's speed: the figure is what is wrong
            message = f"{where}: the link to {peers} on this rail has no figure that can be believed: {describe(links)}"
            return Finding(RDMA, ERROR, node, None, message)
        message = f"{where}: the link to {peers} on this rail is slow, the rest of both nodes' pairs are not: "
        return Finding(
            RDMA,
            FAIL,
            node,
            None,
            message + f"{describe(links)} (limit {limit})",
            observed=worst,
            limit=iso.limit,
            unit="Gb/s",
        )
    mine = iso.of(node)
    if not mine:
        return Finding(RDMA, ERROR, node, None, f"{where}: no pair with this node was measured on this rail")
    covered = sorted({iso.cause[(p.a, p.b)] for p in mine if (p.a, p.b) in iso.cause})
    figures = [p.gbps for p in mine if p.gbps is not None and (p.a, p.b) not in iso.cause]
    median = statistics.median(figures) if figures else None
    said = f"{len(mine)} pairs, median {median:.4g} Gb/s" if median is not None else f"{len(mine)} pairs"
    beside = f"; slow pairs covered by {', '.join(covered)}" if covered else ""
    return Finding(RDMA, PASS, node, None, f"{where}: {said} (limit {limit}){beside}", observed=median, unit="Gb/s")


def _firmware(view: FabricView, node: str) -> Finding:
    def firmware(n: str) -> dict[str, str | None]:
        nf = view.node(n)
        ports = [rail_port(nf, view.spec, r) for r in range(view.spec.rails.count)] if nf is not None else []
        return {p.hca: p.fw_ver for p in ports if p is not None}

    pin = view.ev.spec.stack_for(view.pool.name).component("hca-firmware")
    counts = Counter(v for n in view.members for v in firmware(n).values() if v)
    majority = counts.most_common(1)[0][0] if counts else None
    return judge_firmware(node, firmware(node), pin.version if pin is not None else None, majority)


def _rdma_racks(ev: RunView, detail: str) -> Finding:
    pool_name, _, racks = detail.partition(" racks ")
    a, _, b = racks.partition("+")
    view = fabric_view(ev, ev.spec.pool(pool_name))
    slow = {r: view.rail(r).racks[(a, b)] for r in range(view.spec.rails.count) if (a, b) in view.rail(r).racks}
    if slow:
        rails = ", ".join(str(r) for r in slow)
        pairs = [p for ps in slow.values() for p in ps]
        message = f"pool {pool_name}: the link between racks {a} and {b} is slow on rail(s) {rails}: {describe(pairs)}"
        worst = min((p.gbps for p in pairs if p.gbps is not None), default=None)
        return Finding(RDMA, FAIL, None, None, message, observed=worst, unit="Gb/s")
    racks_of = view.racks()
    across = [
        (p, view.rail(r).cause.get((p.a, p.b)))
        for r in range(view.spec.rails.count)
        for p in view.rail(r).pairs
        if {racks_of.get(p.a), racks_of.get(p.b)} == {a, b}
    ]
    if not across and all(view.contradiction().explains(r) for r in range(view.spec.rails.count)):
        message = f"pool {pool_name}: racks {a} and {b}: no rail of the declaration is on the nodes (see pool.fabric)"
        return Finding(RDMA, SKIP, None, None, message, cause=view.pool_key)
    if not across:
        return Finding(RDMA, ERROR, None, None, f"pool {pool_name}: no pair across racks {a} and {b} was measured")
    if all(cause == view.pool_key for _, cause in across):  # the bar itself is the pool's finding
        message = f"pool {pool_name}: racks {a} and {b}: the RDMA bar follows from ratedGbps (see pool.fabric)"
        return Finding(RDMA, SKIP, None, None, message, cause=view.pool_key)
    message = f"pool {pool_name}: racks {a} and {b}: {len(across)} pairs across, not slow"
    return Finding(RDMA, PASS, None, None, message)


def _transport(ev: RunView, pool_name: str) -> Finding:
    """Every collective across the pool's nodes: the all-reduce across them all and each pair's."""
    pool = ev.spec.pool(pool_name)
    members = ev.pools.members(pool_name)
    index = ev.pairs_index
    inside = set(members)
    ran = [*ev.fabrics.values(), *ev.domain_fabrics.values()]
    collectives: list[Collective | Seen] = [
        Collective(f.nodes, f.gpus_per_node or pool.expect.gpus_per_node, f.transport)
        for f in ran
        if set(f.nodes) <= inside
    ]
    for row in index.pairs if index is not None else []:
        seen = row.transport
        if seen is None or not inside.issuperset(row.nodes):
            continue  # nothing of NCCL's output read (judge_transport names the nodes no collective covers)
        gpus = pool.expect.gpus_per_node  # a pair that names no GPU count: its pool's, as for the rings
        collectives.append(Collective(seen.nodes, gpus, seen.transport) if isinstance(seen, Collective) else seen)
    gdr_off = [n for n in members if ev.decide(CheckKey("fabric.gdr", n)).status is FAIL]
    return judge_transport(pool_name, collectives, members, gdr_off)


def decide_fabric(ev: RunView, key: CheckKey) -> Finding:
    if key.check == POOL_FABRIC and key.detail is not None:
        return pool_fabric(ev, key.detail)
    if key.check == TRANSPORT and key.detail is not None:
        return _transport(ev, key.detail)
    if key.check == RDMA and key.node is None and key.detail is not None:
        return _rdma_racks(ev, key.detail)
    node = key.node
    pool = ev.pool_of(node) if node is not None else None
    if node is None or pool is None or pool.fabric is None:
        return Finding(key.check, ERROR, node, None, f"{key}: the node's pool declares no fabric")
    view = fabric_view(ev, pool)
    missing = view.unmeasured(key.check, node, key.detail)
    if missing is not None:
        return missing
    if key.check == "fabric.gdr":
        return view.gdr(node)
    if key.check == "fabric.firmware":
        return view.skip_unmapped(key.check, node) if view.contradiction().unmapped else _firmware(view, node)
    rail = rail_of(key.detail)
    if rail is None or rail >= pool.fabric.rails.count:
        return Finding(key.check, ERROR, node, None, f"{key}: no such rail in pool {pool.name}'s fabric")
    return _node_rail(view, key.check, node, rail)
