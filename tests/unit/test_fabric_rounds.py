"""The fabric stage of `measure`: with a pool's fabric section, every pair of the pool's measured nodes is measured
once, in the rounds of plan/pairs.py (no node in two pairs of a round), each pair's document carrying its RDMA
bandwidth per rail and NCCL's transport; pools are never paired across."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from gpucert.measure.evidence import CounterWindow, FabricEvidence, NodeEvidence, NodeFabric
from gpucert.measure.evidence_fabric import merge_windows
from gpucert.plan.layout import Mode
from gpucert.plan.run import attach_windows, fabric_rounds, prepare
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import load_spec
from gpucert.spec.pools import PoolMap

ROOT = Path(__file__).resolve().parents[2]


def _pools(tmp_path: Path, fabric: tuple[bool, bool]) -> PoolMap:
    doc = yaml.safe_load((ROOT / "examples" / "fabric.yaml").read_text())
    doc["target"]["fleet"] = str(ROOT / "examples" / "fleets" / "h100-16x8-fabric.yaml")
    train = doc["pools"][0]
    train["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    other = {**copy.deepcopy(train), "name": "other", "nodeSelector": {"example.com/pool": "other"}}
    train["nodeSelector"] = {"example.com/pool": "train"}
    for pool, has in zip((train, other), fabric, strict=True):
        if not has:
            pool.pop("fabric")
    doc["pools"] = [train, other]
    del doc["certify"]["multinode"]  # one all-reduce across two pools is refused; pairs are per pool
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "spec.yaml")
    labels = {f"t{i}": {"example.com/pool": "train"} for i in range(5)}
    labels |= {f"o{i}": {"example.com/pool": "other"} for i in range(4)}
    return PoolMap(spec, labels, list(labels))


def test_each_fabric_pool_plays_its_own_tournament_side_by_side(tmp_path: Path) -> None:
    pools = _pools(tmp_path, (True, True))
    nodes = [*(f"t{i}" for i in range(5)), *(f"o{i}" for i in range(4))]
    schedule = fabric_rounds(pools, nodes)
    assert len(schedule) == 5  # five nodes: five rounds (a bye each); four nodes: three, run beside the first three
    for rnd in schedule:
        busy = [n for pair in rnd for n in pair]
        assert len(busy) == len(set(busy))
        assert all(pair[0][0] == pair[1][0] for pair in rnd)  # never a pair across pools
    pairs = {frozenset(p) for rnd in schedule for p in rnd}
    assert len(pairs) == 10 + 6


def test_a_pool_without_a_fabric_is_not_paired(tmp_path: Path) -> None:
    pools = _pools(tmp_path, (True, False))
    schedule = fabric_rounds(pools, [*(f"t{i}" for i in range(5)), *(f"o{i}" for i in range(4))])
    assert {n for rnd in schedule for p in rnd for n in p} == {f"t{i}" for i in range(5)}
    assert fabric_rounds(_pools(tmp_path, (False, False)), ["t0", "t1"]) == []


def test_measure_runs_every_pair_of_the_fabric_with_its_rdma_and_transport(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples" / "fabric.yaml")
    folder = prepare(spec, tmp_path / "reports", Mode.MEASURE)
    pairs = folder.read_fabric_pairs()
    assert pairs is not None
    assert len(pairs.pairs) == 16 * 15 // 2
    assert len({frozenset(p.nodes) for p in pairs.pairs}) == 120
    assert all(len(p.rdma) == 8 and p.transport is not None for p in pairs.pairs)
    ev = folder.read_evidence("gpu-node-3")
    assert ev is not None
    assert ev.fabric is not None
    assert ev.fabric.port("mlx5_2") is not None
    assert ev.fabric.port("mlx5_2").rate_gbps == 200.0  # type: ignore[union-attr]  # the example's trained-down port
    whole = folder.read_fabric("train")
    assert whole is not None
    assert whole.transport is not None
    assert len(whole.nodes) == 16


def _window(started: str, finished: str, before: int, after: int) -> CounterWindow:
    return CounterWindow(
        load="fabric",
        started=started,
        finished=finished,
        before={"mlx5_0/1": {"symbol_error": before}},
        after={"mlx5_0/1": {"symbol_error": after}},
    )


def test_a_nodes_windows_over_its_pairs_merge_into_one_from_first_to_last_reading() -> None:
    late = _window("2026-01-01T00:10:00+00:00", "2026-01-01T00:20:00+00:00", 15, 40)
    early = _window("2026-01-01T00:00:00+00:00", "2026-01-01T00:05:00+00:00", 5, 15)
    merged = merge_windows([late, early, _window("soon", "later", 0, 99)])  # unreadable times are left out
    assert merged is not None
    assert merged.deltas("mlx5_0/1") == {"symbol_error": 35}  # every increment between, once
    assert merged.seconds() == 1200.0
    assert merge_windows([]) is None


def test_the_fabric_stages_windows_land_in_the_nodes_evidence(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    t0, t1 = "2026-01-01T00:00:00+00:00", "2026-01-01T00:10:00+00:00"
    for node, fabric in (("a", NodeFabric()), ("b", None), ("c", NodeFabric(counters=_window(t0, t1, 0, 0)))):
        folder.write_evidence(NodeEvidence(node=node, target="kubernetes", probe_version="1", started=t0, finished=t1,
                                           fabric=fabric))  # fmt: skip
    pair = FabricEvidence(
        run_id="r",
        target="kubernetes",
        probe_version="1",
        started=t0,
        finished=t1,
        nodes=["a", "b"],
        gpus_per_node=8,
        counters={n: _window(t0, t1, 1, 3) for n in ("a", "b", "c")},
    )
    attach_windows(folder, [pair])
    a, b, c = (folder.read_evidence(n) for n in "abc")
    assert a is not None and a.fabric is not None and a.fabric.counters is not None  # noqa: PT018
    assert a.fabric.counters.deltas("mlx5_0/1") == {"symbol_error": 2}
    assert b is not None and b.fabric is None  # noqa: PT018  # no fabric reading of its own: nothing to add to
    assert c is not None and c.fabric is not None and c.fabric.counters is not None  # noqa: PT018
    assert c.fabric.counters.deltas("mlx5_0/1") == {"symbol_error": 0}  # a window of its own is kept
