"""The all-reduce across nodes: against its figure (the pool's fabric.ncclBusbw, else the baseline's), and the node
that slows the ring. The judging functions take the multi-node evidence and return Findings; `decide_multinode`
and `decide_pairs` find that evidence in the run's view (registered for `nccl.all_reduce.multinode` and
`straggler.nccl.all_reduce.multinode`). The fabric's own checks (ports, counters, RDMA) are fabric_checks.py's.

One number for the whole ring does not say which node slows it: every pair of neighbours runs the same
all-reduce, and a node whose every pair is behind the pairs' median (by more than the straggler limit and outside
their spread, robust z) is the one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from gpucert.evaluate.locate import because, skip, unmeasured, unmeasured_skip
from gpucert.evaluate.pairs_index import PairRow
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.rules.fabric_checks import multinode_figure
from gpucert.evaluate.rules.performance import Sampled, against_baseline, sample_problem, top_busbw
from gpucert.evaluate.rules.stragglers import MIN_PEERS
from gpucert.evaluate.stats import Summary, median, summarize
from gpucert.evaluate.view import RunView
from gpucert.measure.evidence import FabricEvidence, FabricPairs
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.domains import parse_ring, ring_prefix
from gpucert.plan.layout import multinode_file
from gpucert.spec.baseline import MetricBaseline
from gpucert.spec.kubernetes import topology_key

__all__ = [
    "MULTINODE",
    "PAIRS_CHECK",
    "admitted",
    "decide_multinode",
    "decide_pairs",
    "fabric_straggler",
    "judge_multinode",
    "judge_pairs",
    "members_problem",
    "multinode",
    "pairs_by_node",
    "pairs_problem",
    "unlabelled",
]

MULTINODE = "nccl.all_reduce.multinode"
PAIRS_CHECK = f"straggler.{MULTINODE}"


def judge_multinode(fabric: FabricEvidence, baseline: MetricBaseline) -> Finding:
    """A collective that ran, against the baseline's multi-node figure (one finding for the set, node None)."""
    if fabric.nccl is None or not fabric.nccl.points:
        return Finding(MULTINODE, CheckStatus.ERROR, None, None, "the all-reduce across nodes recorded no samples")
    where = f"{len(fabric.nodes)} nodes x {fabric.gpus_per_node} GPUs ({', '.join(fabric.nodes)}){admitted(fabric)}:"
    if not fabric.nccl.correct:
        return Finding(MULTINODE, CheckStatus.FAIL, None, None, f"{where} the reduced values were wrong")
    busbw = top_busbw(fabric.nccl)
    problem = sample_problem(busbw, baseline.expected)
    if problem is not None:
        return Finding(MULTINODE, CheckStatus.ERROR, None, None, f"{where} the samples cannot be believed: {problem}")
    found = against_baseline(MULTINODE, (where, None), Sampled(median(busbw), len(busbw), "GB/s"), baseline)
    return Finding(
        found.check,
        found.status,
        None,
        None,
        found.message,
        observed=found.observed,
        expected=found.expected,
        unit=found.unit,
        limit=found.limit,
    )


ADMISSION = {
    "kueue": " as a JobSet through Kueue (target.gang)",
    "indexed job": " as an Indexed Job (no gang admission: its ranks scheduled one by one)",
}


def admitted(fabric: FabricEvidence) -> str:
    """How the collective was admitted on Kubernetes, as the finding says it ("" where the evidence does not say:
    another target, or evidence written before it was recorded)."""
    return ADMISSION.get(fabric.admission or "", "")


def judge_pairs(
    node: str,
    values: dict[str, float],
    max_deviation: float,
    min_z: float = 3.5,
    peers: Summary | None = None,
    mine: dict[str, float] | None = None,
) -> Finding:
    """`straggler.nccl.all_reduce.multinode` for `node`, from the figures of every pair (at least MIN_PEERS + 1
    of them, and `node` in one: the caller says why not when there are fewer). `peers` is the summary of every
    pair's figure, when the caller judges every node against the same pairs (computed here otherwise); `mine`
    the pairs `node` is in, in `values`' order, when the caller has them (`pairs_by_node`)."""
    mine = mine if mine is not None else {name: v for name, v in values.items() if node in name.split(" + ")}
    peers = peers if peers is not None else summarize(list(values.values()))
    behind = {k: v for k, v in mine.items() if v / peers.median - 1 < -max_deviation and peers.z(v) < -min_z}
    detail = ", ".join(f"{k} {v:.4g} GB/s ({v / peers.median - 1:+.1%})" for k, v in mine.items())
    where = f"the median of {len(values)} pairs is {peers.median:.4g} GB/s"
    if mine and len(behind) == len(mine):
        return Finding(
            PAIRS_CHECK,
            CheckStatus.FAIL,
            node,
            None,
            f"{node} slows every ring it is in: {detail}; {where} (limit {max_deviation:.0%})",
            observed=round(min(mine.values()), 4),
            expected=round(peers.median, 4),
            unit="GB/s",
            limit=round(peers.median * (1 - max_deviation), 4),
        )
    return Finding(PAIRS_CHECK, CheckStatus.PASS, node, None, f"{node}'s pairs: {detail}; {where}")


def pairs_by_node(values: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each node's pairs (named "a + b") and their figures, in `values`' order: what judge_pairs finds for one node,
    for every node in one pass."""
    out: dict[str, dict[str, float]] = {}
    for name, v in values.items():
        for node in dict.fromkeys(name.split(" + ")):
            out.setdefault(node, {})[name] = v
    return out


def enough_pairs(values: dict[str, float]) -> bool:
    return len(values) - 1 >= MIN_PEERS


def members_problem(nodes: list[str], inventory: Collection[str]) -> str | None:
    """Why a collective's member list is not one this run could have formed (a node twice, a stranger), or None."""
    if len(set(nodes)) != len(nodes):
        return f"a node is named twice among {nodes}"
    known = inventory if isinstance(inventory, frozenset) else frozenset(inventory)
    strangers = [n for n in nodes if n not in known]
    return f"{', '.join(strangers)} not in this run's inventory" if strangers else None


def pairs_problem(pairs: FabricPairs | Iterable[Sequence[str]], inventory: list[str]) -> str | None:
    """Why the pairs' evidence (the documents, or each pair's nodes) is not what this run measures: each pair two
    distinct nodes of the inventory, once."""
    every = [p.nodes for p in pairs.pairs] if isinstance(pairs, FabricPairs) else list(pairs)
    known = frozenset(inventory)
    for nodes in every:
        why = members_problem(list(nodes), known) or (None if len(nodes) == 2 else f"{list(nodes)} is no pair")
        if why:
            return why
    names = {tuple(sorted(n)) for n in every}
    return "a pair is measured twice" if len(names) != len(every) else None


def _figures(rows: Iterable[PairRow]) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Each pair's bus bandwidth at the largest message (by "a + b"), and per node the pairs it was in that did
    not run, from the index's rows."""
    values: dict[str, float] = {}
    failed: dict[str, list[str]] = {}
    for row in rows:
        name = " + ".join(row.nodes)
        if row.busbw is None:
            for node in row.nodes:
                failed.setdefault(node, []).append(f"{name}: {row.why}")
            continue
        values[name] = row.busbw
    return values, failed


ERROR, SKIP = CheckStatus.ERROR, CheckStatus.SKIP


def multinode(view: RunView, pool_name: str | None = None, domain: str | None = None) -> Finding:
    """A pool's all-reduce across its nodes (or its topology domain's: `domain`) against its figure (one finding
    for the set; `pool_name` None: the spec's one pool, whose key names no pool)."""
    found = _multinode(view, pool_name or view.spec.pools[0].name, domain)
    pool = pool_name if pool_name is not None and len(view.spec.pools) > 1 else None
    prefix = ring_prefix(pool, domain, topology_key(view.spec.target))
    return replace(found, message=f"{prefix}{found.message}") if prefix else found


def _multinode(view: RunView, pool_name: str, domain: str | None = None) -> Finding:
    if view.spec.certify.multinode is None:
        return Finding(MULTINODE, SKIP, None, None, "certify.multinode is not set: no all-reduce across nodes")
    pool = view.spec.pool(pool_name)
    baseline = view.baselines[pool.name]
    figure = multinode_figure(pool) or baseline.metrics.get(MULTINODE)  # the pool's fabric first
    if figure is None:
        return Finding(MULTINODE, ERROR, None, None, f"the baseline {baseline.sku} has no figure for it")
    fabric = view.fabrics.get(pool.name) if domain is None else view.domain_fabrics.get((pool.name, domain))
    if fabric is None:
        where = "/".join(("evidence", *multinode_file(pool.name, domain)))
        return Finding(MULTINODE, ERROR, None, None, f"no multi-node evidence was written ({where})")
    odd = (
        members_problem(fabric.nodes, view.inventory.names)
        or _strangers(view, pool.name, fabric.nodes)
        or _outsiders(view, domain, fabric.nodes)
    )
    if odd:
        return Finding(MULTINODE, ERROR, None, None, f"the multi-node evidence cannot be believed: {odd}")
    err = next(iter(fabric.errors), None)
    if err is not None:
        how = admitted(fabric)
        why = f"the all-reduce across nodes{f',{how},' if how else ''} did not run: {err.message}"
        cause = unmeasured(view)
        if cause is not None and len(fabric.nodes) < 2:
            return skip(MULTINODE, None, None, f"{why} (see {CheckKey.parse(cause).check})", cause)
        return Finding(MULTINODE, ERROR, None, None, why)
    return judge_multinode(fabric, figure)


def _outsiders(view: RunView, domain: str | None, nodes: list[str]) -> str | None:
    """Why a domain's ring is not its own: a node of another domain of the topology label (or of none) on it."""
    key = topology_key(view.spec.target)
    if domain is None or key is None:
        return None
    others = [n for n in nodes if view.pools.label(n, key) != domain]
    return f"{', '.join(others)} not in {key}={domain}" if others else None


def unlabelled(view: RunView, pool_name: str | None) -> Finding:
    """The pool's nodes without the topology label: in no domain, so on no ring; the finding names them."""
    key = topology_key(view.spec.target)
    pool = pool_name or view.spec.pools[0].name
    nodes = [n for n in view.pools.members(pool) if not (key and view.pools.label(n, key))]
    where = f"pool {pool_name}: " if pool_name is not None and len(view.spec.pools) > 1 else ""
    if key is None or not nodes:
        why = "no target.gang.topologyKey" if key is None else f"every node carries {key}"
        return Finding(MULTINODE, ERROR, None, None, f"{where}a ring of the nodes without a domain, yet {why}")
    them = "it" if len(nodes) == 1 else "them"
    return Finding(
        MULTINODE,
        ERROR,
        None,
        None,
        f"{where}{', '.join(nodes)} {'has' if len(nodes) == 1 else 'have'} no {key} label "
        f"(target.gang.topologyKey): in no topology domain, so no all-reduce across nodes measured {them}; label "
        f"{them} (kubectl label node NODE {key}=DOMAIN) or remove target.gang.topologyKey",
        observed=len(nodes),
        expected=0,
    )


def _strangers(view: RunView, pool: str, nodes: list[str]) -> str | None:
    """Why a pool's ring is not its own: a node of another pool (or of none) on it."""
    others = [n for n in nodes if view.pools.name_of(n) != pool]
    return f"{', '.join(others)} not in pool {pool}" if others else None


def decide_multinode(view: RunView, key: CheckKey) -> Finding:
    if key.check != MULTINODE:
        raise no_rule(key)
    pool, domain, no_domain = parse_ring(key.detail)
    return unlabelled(view, pool) if no_domain else multinode(view, pool, domain)


# why the pairs cannot be believed, each pair's figure, the failed pairs by node, their summary, the pairs by node
Pairs = tuple[str | None, dict[str, float], dict[str, list[str]], Summary | None, dict[str, dict[str, float]]]


def _pairs(view: RunView, pool: str | None) -> Pairs:
    """The pairs' evidence, judged once for every node of a pool: why it cannot be believed, each pair of the
    pool's figure, the pairs that did not run by node, and the figures' summary (every node of the pool is held to
    the same pairs; never to another pool's, whose GPUs and fabric differ)."""

    def judged() -> Pairs:
        index = view.pairs_index
        assert index is not None
        odd = pairs_problem((p.nodes for p in index.pairs), view.inventory.names)
        values, failed = _figures(p for p in index.pairs if all(view.pools.name_of(n) == pool for n in p.nodes))
        for node, why in _off_schedule(view, pool, {frozenset(p.nodes) for p in index.pairs}).items():
            failed.setdefault(node, []).extend(why)
        return odd, values, failed, summarize(list(values.values())) if values else None, pairs_by_node(values)

    return view.once(f"{PAIRS_CHECK}[{pool}]", judged)


def _rings(view: RunView, pool: str | None) -> list[tuple[list[str], int]]:
    """The pool's rings as their all-reduce documents name them, each with the fewest nodes whose neighbours make
    pairs (plan/run.py `pool_rings`: 3 on the pool's one ring, 2 on a topology domain's)."""
    if pool is None:
        return []
    if topology_key(view.spec.target) is None:
        ring = view.fabrics.get(pool)
        return [(list(ring.nodes), 3)] if ring is not None else []
    return [(list(f.nodes), 2) for (p, _), f in view.domain_fabrics.items() if p == pool]


def _off_schedule(view: RunView, pool: str | None, held: Collection[frozenset[str]]) -> dict[str, list[str]]:
    """For a pool without a fabric section (whatever the other pools have), its pairs are the neighbours on its
    rings (plan/fabric_stage.py `neighbour_pairs`): each pair of neighbours on the pool's rings that the run holds
    neither measured nor carried, by node (a stage stopped early, a round's document gone, a pair a re-test neither
    carried nor measured). Its nodes are never judged on their other pair alone: nothing else holds these pairs to
    their schedule (fabric_schedule.py holds a fabric section's tournament)."""
    if pool is None or view.spec.pool(pool).fabric is not None:
        return {}
    out: dict[str, list[str]] = {}
    for ring, least in _rings(view, pool):
        if len(ring) < least:
            continue
        for i in range(len(ring) if len(ring) > 2 else 1):
            a, b = ring[i], ring[(i + 1) % len(ring)]
            if frozenset((a, b)) not in held:
                why = f"{a} + {b}: the pair of neighbours on its ring was not measured (neither measured nor carried)"
                for node in dict.fromkeys((a, b)):
                    out.setdefault(node, []).append(why)
    return out


def fabric_straggler(view: RunView, node: str) -> Finding:
    """The node behind the ring: every pair of neighbours it is in is behind the pairs' median."""
    check = PAIRS_CHECK
    spec = view.spec.certify.multinode
    if spec is None or not spec.pairs:
        return Finding(check, SKIP, node, None, "certify.multinode.pairs is not set: no pairs were measured")
    ev = view.usable(node)
    if ev is None or not ev.collected:
        return unmeasured_skip(view, check, node)
    if not ev.gpus:
        return skip(check, node, None, f"{node} shows no GPU (see inventory.gpus)", because("inventory.gpus", node))
    cause = unmeasured(view)
    if view.pairs_index is None:
        if cause is not None:
            return skip(check, node, None, "no pairs of nodes were measured: not every node was", cause)
        return Finding(check, ERROR, node, None, "no pairs of nodes were measured though the spec asks for them")
    pool = view.pools.name_of(node)
    odd, values, failures, peers, by_node = _pairs(view, pool)
    if odd:
        return Finding(check, ERROR, node, None, f"the pairs' evidence cannot be believed: {odd}")
    failed = failures.get(node, [])
    if failed:
        return Finding(check, ERROR, node, None, f"the all-reduce of {node}'s pairs did not run: {' | '.join(failed)}")
    mine = by_node.get(node, {})
    if not mine or not enough_pairs(values):
        why = f"{node} was in no pair" if not mine else f"{len(values)} pairs are too few to tell a slow node"
        if cause is not None:
            return skip(check, node, None, f"{why}: not every node was measured", cause)
        return Finding(check, ERROR, node, None, f"{why}, though every node was measured")
    s = view.spec.stragglers_for(pool or view.spec.pools[0].name)
    return judge_pairs(node, values, s.max_deviation, s.min_z, peers, mine)


def decide_pairs(view: RunView, key: CheckKey) -> Finding:
    if key.node is None or key.check != PAIRS_CHECK:
        raise no_rule(key)
    return fabric_straggler(view, key.node)
