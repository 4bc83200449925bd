"""`pool.fabric`: a pool's fabric declaration is one its nodes can be held to. Pure (the spec and stack.json).

Checked at configure time, before anything is measured, once per pool (one root cause, one finding): the rated
speed is one a port of the declared link layer can run at; the pool's nodes offer an RDMA device plugin resource
(the one `rails.resource` names, or any `*rdma*` resource when the rails name their HCAs), without which no fabric
pod can open the HCAs; and, when the fabric names a rack label, every node carries it (the isolation of a slow link
to a rack needs it). Once the pool is measured, a declaration its nodes contradict as a whole is one finding here,
not one per port (see Contradiction): every rail port on another link layer, rails no node has, every rail port at
one rate below the rated one or at one MTU below the declared one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpucert.evaluate.rules.fabric_ports import port_mtu, rail_port
from gpucert.measure.evidence_fabric import HcaPort, NodeFabric
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.cluster import Pool
from gpucert.spec.fabric import FabricSpec
from gpucert.stack.observe import NodeStack

__all__ = ["POOL_FABRIC", "Contradiction", "contradiction", "judge_pool_fabric", "rdma_resources"]

POOL_FABRIC = "pool.fabric"


def rdma_resources(pool: Pool, ns: NodeStack) -> dict[str, int]:
    """The RDMA device plugin resources the node offers the pool's fabric pods (allocatable > 0)."""
    assert pool.fabric is not None
    named = pool.fabric.rails.resource
    if named is not None:
        return {named: ns.resources[named]} if ns.resources.get(named, 0) > 0 else {}
    return {k: v for k, v in ns.resources.items() if "rdma" in k.lower() and v > 0}


@dataclass(frozen=True)
class Contradiction:
    """What a pool's measured nodes, as a whole, say against its fabric declaration (all None/empty: nothing).
    `layer`: the link layer(s) every candidate rail port is on, where none is on the declared one; `extra`: with the
    rails found through the resource, the fewest ports of the link layer a node has, where every node has more than
    rails.count (which of them are the rails is not known: a DGX H100's storage adapters sit among its compute
    ones); `missing`: the rails no measured node has (rails.count more than the nodes have: a node short of a rail
    that others have is a fault of that node, not this); `rate` / `mtu`: the one rate (MTU) every rail port of two
    or more nodes runs at, ACTIVE, below ratedGbps (mtu): no cable trains every port down alike."""

    nodes: int = 0
    layer: str | None = None
    extra: int | None = None
    missing: tuple[int, ...] = ()
    rate: float | None = None
    mtu: int | None = None

    @property
    def unmapped(self) -> bool:
        """No port can be told to be a rail: every one is of another link layer, or there are more than rails."""
        return self.layer is not None or self.extra is not None

    def explains(self, rail: int) -> bool:
        """Whether this explains every finding of the rail (its port, counters, affinity and RDMA figures)."""
        return self.unmapped or rail in self.missing

    def problems(self, pool: str, fabric: FabricSpec) -> list[str]:
        out = []
        if self.layer is not None:
            out.append(
                f"every rail port of its {self.nodes} measured nodes is {self.layer}, none {fabric.link_layer.value}: "
                f"correct pools[{pool}].fabric.linkLayer"
            )
        if self.extra is not None:
            out.append(
                f"every measured node has {self.extra} or more {fabric.link_layer.value} ports for the "
                f"{fabric.rails.count} rails declared, so which are the rails is not known: name their HCAs in "
                f"pools[{pool}].fabric.rails.hcas (or correct rails.count)"
            )
        if self.missing:
            rails = ", ".join(str(r) for r in self.missing)
            where = f"HCA ports {', '.join(_hca_of(fabric, r) for r in self.missing)}" if fabric.rails.hcas else ""
            where = where or f"at most {min(self.missing)} {fabric.link_layer.value} ports on a node"
            out.append(
                f"no measured node has rail(s) {rails} ({where}) of the {fabric.rails.count} declared: correct "
                f"pools[{pool}].fabric.rails"
            )
        if self.rate is not None:
            out.append(
                f"every rail port of its nodes runs at {self.rate:g} Gb/s: ratedGbps {fabric.rated_gbps:g} is not a "
                "speed these HCAs run at; correct ratedGbps (or the HCAs)"
            )
        if self.mtu is not None:
            out.append(
                f"every rail port of its nodes is active at MTU {self.mtu}: mtu {fabric.mtu} is not what these ports "
                f"run at; correct pools[{pool}].fabric.mtu (or the ports' MTU)"
            )
        return out


def _hca_of(fabric: FabricSpec, rail: int) -> str:
    assert fabric.rails.hcas is not None
    return f"{fabric.rails.hcas[rail]}/{fabric.rails.port}"


def _candidates(nf: NodeFabric, fabric: FabricSpec) -> list[HcaPort]:
    """The ports that would be rails whatever their link layer: the named HCAs' ports, else every port numbered
    rails.port."""
    if fabric.rails.hcas is not None:
        return [p for h in fabric.rails.hcas if (p := nf.port(h, fabric.rails.port)) is not None]
    return [p for p in nf.ports if p.port == fabric.rails.port]


def _uniform(values: set[float | None], nodes: int, declared: float) -> float | None:
    if nodes < 2 or len(values) != 1:
        return None
    value = values.pop()
    return value if value is not None and value < declared else None


def contradiction(fabric: FabricSpec, fabrics: Sequence[NodeFabric]) -> Contradiction:
    """What the measured nodes' fabrics (`fabrics`) contradict of the declaration as a whole."""
    if not fabrics:
        return Contradiction()
    candidates = [p for nf in fabrics for p in _candidates(nf, fabric)]
    layers = {p.link_layer or "?" for p in candidates}
    if candidates and fabric.link_layer.value not in layers:
        return Contradiction(len(fabrics), layer=", ".join(sorted(layers)))
    if fabric.rails.hcas is None:
        fewest = min(sum(p.link_layer == fabric.link_layer.value for p in _candidates(nf, fabric)) for nf in fabrics)
        if fewest > fabric.rails.count:
            return Contradiction(len(fabrics), extra=fewest)
    rails = range(fabric.rails.count)
    found = [[rail_port(nf, fabric, r) for r in rails] for nf in fabrics]
    missing = tuple(r for r in rails if all(ports[r] is None for ports in found))
    ports = [p for node in found for r, p in enumerate(node) if r not in missing]
    active = None not in ports and all(p is not None and (p.state or "").endswith("ACTIVE") for p in ports)
    if not active:
        return Contradiction(len(fabrics), missing=missing)
    rate = _uniform({p.rate_gbps for p in ports if p is not None}, len(fabrics), fabric.rated_gbps)
    mtu = _uniform({port_mtu(p, fabric) for p in ports if p is not None}, len(fabrics), fabric.mtu)
    return Contradiction(len(fabrics), missing=missing, rate=rate, mtu=None if mtu is None else int(mtu))


def _short(nodes: list[str]) -> str:
    return ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")


def judge_pool_fabric(pool: Pool, stacks: Mapping[str, NodeStack], measured: Contradiction | None = None) -> Finding:
    """The pool's fabric section against the link layer's speeds and its nodes (`stacks`: the pool's members that
    the cluster lists). `measured`: where the pool was measured, what its nodes contradict of the declaration as a
    whole. The finding names the pool in its message and in nothing else (node None)."""
    fabric = pool.fabric
    assert fabric is not None
    problems: list[str] = []
    rated = fabric.rated_problem()
    if rated:
        problems.append(f"{rated}: correct pools[{pool.name}].fabric.ratedGbps")
    if measured is not None:  # a rated speed no port runs at is said above already
        problems += replace(measured, rate=None if rated else measured.rate).problems(pool.name, fabric)
    what = f"resource {fabric.rails.resource}" if fabric.rails.resource else "RDMA resource (`*rdma*`)"
    without = sorted(n for n, ns in stacks.items() if not rdma_resources(pool, ns))
    if stacks and len(without) == len(stacks):
        problems.append(
            f"no node of the pool offers an RDMA device plugin {what}: install the RDMA shared device plugin (or "
            "the SR-IOV/host-device plugin) on its nodes, or name the resource they offer in fabric.rails.resource"
        )
    elif without:
        problems.append(f"{len(without)} nodes offer no {what}: {_short(without)}")
    if fabric.rack_label:
        unlabelled = sorted(n for n, ns in stacks.items() if fabric.rack_label not in ns.labels)
        if unlabelled:
            problems.append(
                f"{len(unlabelled)} nodes lack the rack label {fabric.rack_label}: {_short(unlabelled)}; label them "
                "or change fabric.rackLabel"
            )
    if problems:
        return Finding(POOL_FABRIC, CheckStatus.FAIL, None, None, f"pool {pool.name}: {'; '.join(problems)}")
    if not stacks:
        message = f"pool {pool.name}: the cluster lists none of its nodes, so its fabric cannot be judged"
        return Finding(POOL_FABRIC, CheckStatus.ERROR, None, None, message)
    message = (
        f"pool {pool.name}: {fabric.rails.count} rails of {fabric.rated_gbps:g} Gb/s {fabric.link_layer.value}, "
        f"RDMA resource on all {len(stacks)} nodes"
    )
    return Finding(POOL_FABRIC, CheckStatus.PASS, None, None, message, observed=fabric.rated_gbps, unit="Gb/s")
