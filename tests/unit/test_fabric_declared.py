"""What a pool's measured nodes, as a whole, contradict of its fabric declaration (rules/fabric_config.py,
`contradiction`): one pool.fabric finding, where a node's own fault stays that node's. Pure."""

from __future__ import annotations

from typing import Any

from gpucert.evaluate.rules.fabric_config import contradiction
from gpucert.evaluate.rules.fabric_ports import port_mtu, roce_mtu
from gpucert.measure.evidence_fabric import HcaPort, NodeFabric
from gpucert.spec.fabric import FabricSpec, LinkLayer

SPEC = FabricSpec.model_validate(
    {"rails": {"count": 4, "resource": "rdma/ib"}, "linkLayer": "InfiniBand", "ratedGbps": 400}
)
NAMED = SPEC.model_copy(update={"rails": SPEC.rails.model_copy(update={"hcas": [f"mlx5_{i}" for i in range(4)]})})


def port(hca: str, **changes: Any) -> HcaPort:
    fields = {"hca": hca, "port": 1, "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate_gbps": 400.0}
    fields |= {"link_layer": "InfiniBand", "active_mtu": 4096} | changes
    if fields["rate_gbps"] is not None:  # the kernel's text the number is read off (rate_show: "400 Gb/sec (4X NDR)")
        fields.setdefault("rate", f"{fields['rate_gbps']:g} Gb/sec (4X)")
    return HcaPort.model_validate(fields)


def node(hcas: int = 4, **changes: Any) -> NodeFabric:
    return NodeFabric(ports=[port(f"mlx5_{i}", **changes) for i in range(hcas)])


def test_nodes_that_match_the_declaration_contradict_nothing() -> None:
    said = contradiction(SPEC, [node(), node()])
    assert (said.layer, said.missing, said.rate, said.mtu) == (None, (), None, None)
    assert not any(said.explains(r) for r in range(4))


def test_every_rail_port_on_another_link_layer_is_the_declarations_fault() -> None:
    roce = SPEC.model_copy(update={"link_layer": LinkLayer.ETHERNET})
    said = contradiction(roce, [node(), node()])
    assert said.layer == "InfiniBand"
    assert said.explains(0)
    assert "every rail port of its 2 measured nodes is InfiniBand, none Ethernet" in said.problems("p", roce)[0]
    # one node of the other layer among nodes of the declared one is that node's fault, not the declaration's
    assert contradiction(roce, [node(), node(link_layer="Ethernet")]).layer is None


def test_more_ports_of_the_layer_than_rails_on_every_node_leaves_the_rails_unknown_when_found_by_resource() -> None:
    """A DGX H100's storage adapters (InfiniBand too on some) sit between its compute ones: with 12 ports and 8
    rails found by the resource, rail r may be a storage port. Every node with more: the pool's finding (name the
    HCAs); one node with an extra port, or the HCAs named: nothing."""
    said = contradiction(SPEC, [node(6), node(5)])
    assert said.extra == 5
    assert said.unmapped
    assert said.explains(0)
    problem = said.problems("train", SPEC)[0]
    assert "every measured node has 5 or more InfiniBand ports for the 4 rails declared" in problem
    assert "pools[train].fabric.rails.hcas" in problem
    assert contradiction(SPEC, [node(5), node(4)]).extra is None
    storage = [port(h, link_layer="Ethernet") for h in ("mlx5_4", "mlx5_5")]  # of another layer: not rails
    assert contradiction(SPEC, [node(4), NodeFabric(ports=[*node(4).ports, *storage])]).extra is None
    assert contradiction(NAMED, [node(6), node(6)]) == contradiction(NAMED, [node(), node()])


def test_rails_no_node_has_are_the_declarations_and_a_rail_one_node_lacks_is_that_nodes() -> None:
    """rails.count 4 on nodes of 2 HCAs: rails 2 and 3 are the pool's finding. A node of 3 HCAs beside nodes of 4:
    its rail 3 is its own fabric.port finding (a NIC short), not the pool's."""
    assert contradiction(SPEC, [node(2), node(2)]).missing == (2, 3)
    assert contradiction(SPEC, [node(2)]).missing == (2, 3)
    assert contradiction(SPEC, [node(3), node(4), node(4)]).missing == ()
    problem = contradiction(SPEC, [node(2), node(2)]).problems("train", SPEC)[0]
    assert problem.startswith("no measured node has rail(s) 2, 3 (at most 2 InfiniBand ports on a node) of the 4")
    assert "pools[train].fabric.rails" in problem
    # HCAs named: the named HCA no node has
    said = contradiction(NAMED, [NodeFabric(ports=[port(h) for h in ("mlx5_0", "mlx5_1", "mlx5_3")])] * 2)
    assert said.missing == (2,)
    assert "(HCA ports mlx5_2/1)" in said.problems("train", NAMED)[0]


def test_one_mtu_below_the_declared_on_every_port_of_two_nodes_is_the_declarations() -> None:
    assert contradiction(SPEC, [node(active_mtu=2048), node(active_mtu=2048)]).mtu == 2048
    assert contradiction(SPEC, [node(active_mtu=2048)]).mtu is None  # one node alone: it may be its own fault
    assert contradiction(SPEC, [node(active_mtu=2048), node()]).mtu is None
    both = contradiction(SPEC, [node(active_mtu=2048, rate_gbps=200.0), node(active_mtu=2048, rate_gbps=200.0)])
    assert (both.rate, both.mtu) == (200.0, 2048)


def test_a_roce_ports_rdma_mtu_is_the_ib_mtu_its_interfaces_mtu_holds() -> None:
    """iboe_get_mtu (include/rdma/ib_addr.h, Linux 6.8) takes the RoCE headers (96 bytes) off the interface's MTU and
    keeps the largest IB MTU that fits: a 9000-byte interface runs RDMA at 4096, a 4096-byte one at 2048, a
    1500-byte one at 1024; an active_mtu read off the port wins."""
    assert (roce_mtu(9000), roce_mtu(4192), roce_mtu(4191), roce_mtu(4096), roce_mtu(1500)) == (
        4096,
        4096,
        2048,
        2048,
        1024,
    )
    roce = SPEC.model_copy(update={"link_layer": LinkLayer.ETHERNET})
    assert port_mtu(port("mlx5_0", link_layer="Ethernet", active_mtu=None, netdev_mtu=4096), roce) == 2048
    assert port_mtu(port("mlx5_0", link_layer="Ethernet", active_mtu=1024, netdev_mtu=9000), roce) == 1024
    assert port_mtu(port("mlx5_0", active_mtu=None, netdev_mtu=4092), SPEC) is None  # IB: IPoIB's MTU is not it
