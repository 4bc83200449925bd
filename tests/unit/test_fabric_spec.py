"""A pool's fabric section (spec/fabric.py), its configure check `pool.fabric`, and the fabric checks it makes the
plan require: pure, no pytest session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.evaluate.rules.fabric_config import judge_pool_fabric
from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.plan.required import plan_checks
from gpucert.spec.cluster import load_spec
from gpucert.spec.fabric import DEFAULT_COUNTER_LIMITS, LinkLayer, port_speeds
from gpucert.spec.pools import PoolMap
from gpucert.stack.observe import NodeStack, observe_stack

ROOT = Path(__file__).resolve().parents[2]
FABRIC: dict[str, Any] = {
    "rails": {"count": 8, "resource": "rdma/rdma_shared_device_a"},
    "linkLayer": "InfiniBand",
    "ratedGbps": 400,
    "rackLabel": "example.com/rack",
}


def spec_file(tmp_path: Path, fabric: dict[str, Any] | None = FABRIC, **certify: Any) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "pools.yaml").read_text())
    doc["target"]["fleet"] = str(ROOT / "examples" / "fleets" / "pools.yaml")
    doc["pools"] = doc["pools"][:1]
    doc["pools"][0]["nodeSelector"] = {}
    doc["pools"][0]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    if fabric is not None:
        doc["pools"][0]["fabric"] = fabric
    doc["certify"].update(certify)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def node(name: str, resources: dict[str, str] | None = None, rack: str | None = "r1") -> NodeStack:
    labels = {"example.com/rack": rack} if rack else {}
    api = {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8", **(resources or {})},
        },
    }
    return observe_stack([api], [], keep_labels=["example.com/rack"]).nodes[name]


RDMA = {"rdma/rdma_shared_device_a": "63"}


def test_a_fabric_section_loads_with_its_defaults_and_their_sources(tmp_path: Path) -> None:
    fabric = load_spec(spec_file(tmp_path)).pools[0].fabric
    assert fabric is not None
    assert fabric.link_layer is LinkLayer.INFINIBAND
    assert fabric.mtu == 4096
    assert fabric.rdma_expected().expected == 360.0  # 90% of 400 Gb/s
    assert "90%" in fabric.rdma_expected().source
    limits = fabric.counter_limits()
    assert {n for n, c in limits.items() if c.max_increase == 0} == {
        "link_downed",
        "excessive_buffer_overrun_errors",
        "local_link_integrity_errors",
    }
    assert limits["symbol_error"].max_per_hour == 120
    assert "IBTA" in limits["symbol_error"].source
    assert all(c.max_per_hour for n, c in limits.items() if n in ("link_error_recovery", "port_rcv_errors"))
    assert all(len(c.source) >= 10 for c in DEFAULT_COUNTER_LIMITS.values())


def test_a_counter_limit_given_in_the_spec_replaces_the_default(tmp_path: Path) -> None:
    fabric = dict(FABRIC, counters={"symbol_error": {"maxPerHour": 10, "source": "our cabling contract, 2026"}})
    limits = load_spec(spec_file(tmp_path, fabric)).pools[0].fabric.counter_limits()  # type: ignore[union-attr]
    assert limits["symbol_error"].max_per_hour == 10
    assert limits["link_downed"].max_increase == 0


@pytest.mark.parametrize(
    ("rails", "says"),
    [
        ({"count": 8}, "name the rails' HCAs"),
        ({"count": 2, "hcas": ["mlx5_0"]}, "1 HCAs named for 2 rails"),
        ({"count": 2, "hcas": ["mlx5_0", "mlx5_0"]}, "named twice"),
    ],
)
def test_rails_that_name_no_hca_or_the_wrong_number_are_refused_naming_the_key(
    tmp_path: Path, rails: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as exc:
        load_spec(spec_file(tmp_path, dict(FABRIC, rails=rails)))
    assert "pools[0].fabric.rails" in str(exc.value)


def test_the_speeds_a_port_can_run_at() -> None:
    ib = port_speeds(LinkLayer.INFINIBAND)
    assert {400.0, 200.0, 100.0, 56.0, 800.0, 50.0} <= ib  # 4X NDR, 4X HDR, 4X EDR, 4X FDR, 4X XDR, 1X HDR
    assert 300.0 in ib  # 12X EDR
    assert 350.0 not in ib
    assert 450.0 not in ib
    assert 25.0 in port_speeds(LinkLayer.ETHERNET)
    assert 56.0 not in port_speeds(LinkLayer.ETHERNET)


def test_a_rated_speed_no_port_runs_at_is_a_configure_finding_naming_the_pool(tmp_path: Path) -> None:
    pool = load_spec(spec_file(tmp_path, dict(FABRIC, ratedGbps=350))).pools[0]
    found = judge_pool_fabric(pool, {"n1": node("n1", RDMA), "n2": node("n2", RDMA)})
    assert found.status is CheckStatus.FAIL
    assert f"pool {pool.name}" in found.message
    assert "ratedGbps 350" in found.message
    assert "300, 400" in found.message  # the speeds it could mean


def test_fabric_on_a_pool_whose_nodes_offer_no_rdma_resource_is_a_configure_finding(tmp_path: Path) -> None:
    pool = load_spec(spec_file(tmp_path)).pools[0]
    found = judge_pool_fabric(pool, {"n1": node("n1"), "n2": node("n2", {"rdma/other": "4"})})
    assert found.status is CheckStatus.FAIL
    assert f"pool {pool.name}: no node of the pool offers an RDMA device plugin resource" in found.message
    one = judge_pool_fabric(pool, {"n1": node("n1", RDMA), "n2": node("n2")})
    assert one.status is CheckStatus.FAIL
    assert "1 nodes offer no resource rdma/rdma_shared_device_a: n2" in one.message
    ok = judge_pool_fabric(pool, {"n1": node("n1", RDMA), "n2": node("n2", RDMA)})
    assert ok.status is CheckStatus.PASS, ok.message


def test_rails_named_by_hca_accept_any_rdma_resource_but_a_node_without_its_rack_label_fails(tmp_path: Path) -> None:
    fabric = dict(FABRIC, rails={"count": 2, "hcas": ["mlx5_0", "mlx5_1"]})
    pool = load_spec(spec_file(tmp_path, fabric)).pools[0]
    found = judge_pool_fabric(pool, {"n1": node("n1", {"rdma/ib": "1"}), "n2": node("n2", {"rdma/ib": "1"}, None)})
    assert found.status is CheckStatus.FAIL
    assert "1 nodes lack the rack label example.com/rack: n2" in found.message
    assert "no node" not in found.message


def test_a_pool_with_a_fabric_requires_its_checks_per_node_rail_and_rack_pair(tmp_path: Path) -> None:
    spec = load_spec(spec_file(tmp_path, multinode={}))
    labels = {f"n{i}": {"example.com/rack": "r1" if i <= 2 else "r2"} for i in range(1, 5)}
    pools = PoolMap(spec, labels, list(labels))
    plan = plan_checks(spec, list(labels), ["configure", "certify"], components=[], pools=pools)
    pool = spec.pools[0].name
    assert CheckKey("pool.fabric", None, None, pool) in plan
    for check in ("fabric.port", "fabric.counters", "fabric.affinity", "fabric.rdma_bw"):
        assert {k for k in plan.required if k.check == check and k.node} == {
            CheckKey(check, f"n{i}", None, f"rail{r}") for i in range(1, 5) for r in range(8)
        }
    assert {k for k in plan.required if k.check == "fabric.rdma_bw" and not k.node} == {
        CheckKey("fabric.rdma_bw", None, None, f"{pool} racks r1+r2")
    }
    assert {k.node for k in plan.required if k.check == "fabric.gdr"} == set(labels)
    assert {k.node for k in plan.required if k.check == "fabric.firmware"} == set(labels)
    assert {k for k in plan.required if k.check == "fabric.nccl_transport"} == {
        CheckKey("fabric.nccl_transport", None, None, pool)
    }


def test_without_a_fabric_no_fabric_check_is_required_and_the_plan_says_why(tmp_path: Path) -> None:
    spec = load_spec(spec_file(tmp_path, None))
    plan = plan_checks(spec, ["n1", "n2"], ["configure", "certify"], components=[])
    assert not [k for k in plan.required if k.check.startswith("fabric.") or k.check == "pool.fabric"]
    assert ("fabric.*", "no pool declares a fabric section") in plan.not_required


def test_a_pool_of_one_node_in_the_run_requires_no_loaded_fabric_check(tmp_path: Path) -> None:
    """A node recertified alone has no pair to load the fabric: its counters and RDMA figures are not required."""
    spec = load_spec(spec_file(tmp_path))
    plan = plan_checks(spec, ["n1"], ["certify"], components=[])
    assert CheckKey("fabric.port", "n1", None, "rail0") in plan
    assert CheckKey("fabric.counters", "n1", None, "rail0") not in plan
    assert CheckKey("fabric.rdma_bw", "n1", None, "rail0") not in plan
    assert dict(plan.not_required)["fabric.counters"].endswith("no pair loads the fabric")


@pytest.mark.parametrize("mtu", [5000, 9000, 1500, 100])
def test_an_mtu_no_rdma_port_can_be_active_at_is_refused_at_load_naming_the_key_and_the_values(
    tmp_path: Path, mtu: int
) -> None:
    """An RDMA port's active MTU is an IB MTU (enum ib_mtu, include/rdma/ib_verbs.h: 256 .. 4096), RoCE's too
    (iboe_get_mtu, include/rdma/ib_addr.h): 5000 or an Ethernet 9000 is no MTU a port can report."""
    with pytest.raises(ConfigError) as exc:
        load_spec(spec_file(tmp_path, dict(FABRIC, mtu=mtu)))
    said = str(exc.value)
    assert "pools[0].fabric.mtu" in said
    assert f"mtu {mtu}: an RDMA port's active MTU is one of 256, 512, 1024, 2048, 4096 bytes" in said
    assert "\n" not in said.strip()
    assert load_spec(spec_file(tmp_path, dict(FABRIC, mtu=2048))).pools[0].fabric.mtu == 2048  # type: ignore[union-attr]
