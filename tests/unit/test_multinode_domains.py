"""certify.multinode with target.gang.topologyKey (docs/probes.md, "Gang admission"): one all-reduce per domain of
the label in each pool, each with its own key (`nccl.all_reduce.multinode@fleet[domain r1]`, `[train domain r1]`
with several pools), and the nodes without the label one key of their own (`[no domain]`); a pair of neighbours
never spans two domains. Without the key, the keys are those they always were."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.plan import run
from gpucert.plan.checks import CheckKey
from gpucert.plan.domains import by_domain, parse_ring, ring_detail
from gpucert.plan.required import plan_checks
from gpucert.plan.run import neighbour_pairs, pool_rings
from gpucert.spec.cluster import load_spec
from gpucert.spec.pools import PoolMap

from .test_multinode_pools import PRODUCTS, pools_spec

MULTINODE = "nccl.all_reduce.multinode"
PAIRS = f"straggler.{MULTINODE}"
RACK = "example.com/rack"


def _spec(tmp: Path, topology: bool = True, **multinode: Any) -> Path:
    path = pools_spec(tmp, multinode)
    doc = yaml.safe_load(path.read_text())
    gang = {"localQueue": "gpucert", **({"topologyKey": RACK} if topology else {})}
    doc["target"] = {"kind": "kubernetes", "image": "registry.local/p@sha256:" + "b" * 64, "gang": gang}
    path.write_text(yaml.safe_dump(doc))
    return path


def _labels(racks: dict[str, str | None]) -> dict[str, dict[str, str]]:
    pool = {"t": PRODUCTS["train"], "i": PRODUCTS["infer"]}
    return {n: {"nvidia.com/gpu.product": pool[n[0]], **({RACK: r} if r else {})} for n, r in racks.items()}


RACKS: dict[str, str | None] = {"t1": "r1", "t2": "r1", "t3": "r1", "t4": "r2", "t5": "r2", "t6": None}
RACKS |= {"i1": "r1", "i2": "r1"}


def _plan(tmp: Path, topology: bool = True, **multinode: Any) -> tuple[PoolMap, set[CheckKey]]:
    spec = load_spec(_spec(tmp, topology, **multinode))
    labels = _labels(RACKS)
    pools = PoolMap(spec, labels, list(labels))
    plan = plan_checks(spec, list(labels), ["certify"], components=[], pools=pools)
    return pools, {k for k in plan.required if k.check in (MULTINODE, PAIRS)}


def test_each_domain_of_each_pool_has_its_ring_and_the_unlabelled_nodes_a_key_of_their_own(tmp_path: Path) -> None:
    _, keys = _plan(tmp_path, pairs=True)
    assert {k.detail for k in keys if k.check == MULTINODE} == {
        "train domain r1",
        "train domain r2",
        "train no domain",
        "infer domain r1",
    }
    assert str(CheckKey(MULTINODE, None, None, "train domain r2")) == "nccl.all_reduce.multinode@fleet[train domain r2]"
    # train's rings hold five nodes (r1's three, r2's two): enough pairs; t6 is on none; infer's two are too few
    assert {k.node for k in keys if k.check == PAIRS} == {"t1", "t2", "t3", "t4", "t5"}


def test_without_the_topology_key_the_keys_are_the_pools_as_before(tmp_path: Path) -> None:
    _, keys = _plan(tmp_path, topology=False, pairs=True)
    assert {k.detail for k in keys if k.check == MULTINODE} == {"train", "infer"}
    assert {k.node for k in keys if k.check == PAIRS} == {f"t{i}" for i in range(1, 7)}


def test_the_rings_measured_are_the_domains_each_within_max_nodes_and_their_pairs_never_span_two(
    tmp_path: Path,
) -> None:
    pools, _ = _plan(tmp_path, pairs=True, maxNodes=2)
    collected = [n for n in RACKS if n != "t2"]  # t2's own probe failed: it is on no ring
    rings = pool_rings(pools, "train", collected, 2)
    assert rings == [("r1", ["t1", "t3"], 2), ("r2", ["t4", "t5"], 2)]
    for _, ring, _ in rings:
        for rnd in neighbour_pairs(ring):
            assert all({RACKS[a], RACKS[b]} == {RACKS[ring[0]]} for a, b in rnd)


def test_only_a_domain_of_one_node_says_it_is_one_and_how_to_fix_it(tmp_path: Path) -> None:
    """A domain of one node is the spec's labels, and its ring's evidence says the fix (tests/integration/
    test_gang.py); a domain of two, one of them not measured, is a measurement that did not happen, and says that
    (plan/run.py measure_fabric)."""
    spec = load_spec(_spec(tmp_path, pairs=True))

    def lone(racks: dict[str, str | None]) -> str | None:
        labels = _labels(racks)
        return run.lone_domain(PoolMap(spec, labels, list(labels)), "train", "r2")

    assert lone(RACKS) is None  # r2: t4 and t5
    assert lone(RACKS | {"t5": "r3"}) == (
        "the topology domain has one node (t4), and an all-reduce across nodes needs two: label another node into "
        f"it (kubectl label node NODE {RACK}=r2) or remove target.gang.topologyKey"
    )


class _Counted(list[str]):
    """A domain's nodes that count how often they are walked."""

    walks = 0

    def __iter__(self) -> Iterator[str]:
        self.walks += 1
        return super().__iter__()


def test_the_rings_are_found_in_one_walk_of_each_domain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each domain's nodes walked once, not once per measured node of the pool (a set of them built again for each:
    1,024 sets of 1,024 nodes for a domain of 1,024)."""
    pools, _ = _plan(tmp_path, pairs=True)
    seen: list[_Counted] = []

    def counted(nodes: Sequence[str], value_of: Callable[[str], str | None]) -> tuple[dict[str, list[str]], list[str]]:
        domains, unlabelled = by_domain(nodes, value_of)
        seen.extend(_Counted(m) for m in domains.values())
        return dict(zip(domains, seen, strict=True)), unlabelled

    monkeypatch.setattr(run, "by_domain", counted)
    assert pool_rings(pools, "train", list(RACKS), None) == [("r1", ["t1", "t2", "t3"], 2), ("r2", ["t4", "t5"], 2)]
    assert [d.walks for d in seen] == [1, 1]


@pytest.mark.parametrize(
    ("pool", "domain", "unlabelled", "detail"),
    [
        (None, None, False, None),
        ("train", None, False, "train"),
        (None, "r1", False, "domain r1"),
        ("train", "r1", False, "train domain r1"),
        (None, None, True, "no domain"),
        ("train", None, True, "train no domain"),
        ("domain", "r1", False, "domain domain r1"),  # a pool named `domain` reads back as a pool
        ("no", "r1", False, "no domain r1"),
    ],
)
def test_a_rings_detail_reads_back_one_way(pool: str | None, domain: str | None, unlabelled: bool, detail: str) -> None:
    assert ring_detail(pool, domain, unlabelled=unlabelled) == detail
    assert parse_ring(detail) == (pool, domain, unlabelled)
