"""fabric.rdma_bw holds the pairs' evidence to the schedule that made it (evaluate/rules/fabric_schedule.py): every
pair of the pool's measured nodes once per rail, on the rail's HCA at both ends. A fabric stage stopped after its
first round, or a pairs.json edited after the run, is an error naming the pair, never a pass (issue 25)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.evaluate.evaluation import Evaluation
from gpucert.evaluate.pairs_index import index_pairs
from gpucert.evaluate.rules.fabric_schedule import check_schedule
from gpucert.measure.evidence import FabricPairs
from gpucert.measure.evidence_fabric import RdmaBandwidth
from gpucert.plan.carried_pairs import read_pairs
from gpucert.plan.checks import CheckKey, CheckStatus
from gpucert.plan.fabric_checks import rail_detail
from gpucert.plan.layout import Mode
from gpucert.plan.pairs import retest_rounds, rounds
from gpucert.plan.run import prepare
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import load_spec

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"gpu-node-{i}" for i in range(1, 5)]
RAILS = 2


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Evaluation:
    """A clean 4-node, 2-rail fabric measured by the simulator (6 pairs in 3 rounds)."""
    tmp = tmp_path_factory.mktemp("fab")
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-16x8-fabric.yaml").read_text())
    fleet.update(faults=[], nodes=dict(fleet["nodes"], count=4))
    fleet["fabric"].update(rails=RAILS, racks={"label": "nvidia.com/gpu.clique", "size": 2})
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    doc = yaml.safe_load((ROOT / "examples" / "fabric.yaml").read_text())
    doc["target"]["fleet"] = str(tmp / "fleet.yaml")
    pool = doc["pools"][0]
    pool["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    pool["expect"]["nodes"] = 4
    pool["fabric"]["rails"]["count"] = RAILS
    doc["certify"] = {"probes": ["health"], "multinode": {}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp / "spec.yaml")
    folder = prepare(spec, tmp / "reports", Mode.MEASURE)
    return Evaluation(folder, spec, load_baseline(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"))


def _judged(ev: Evaluation, pairs: FabricPairs) -> dict[tuple[str, int], Any]:
    """Every node-rail's fabric.rdma_bw on a fresh view of the run whose pairs.json reads as `pairs`."""
    view = Evaluation(ev.folder, ev.spec, ev.baselines)
    view.__dict__["pairs_index"] = index_pairs([pairs])  # the cached index, as if the files held `pairs`
    return {
        (n, r): view.decide(CheckKey("fabric.rdma_bw", n, None, rail_detail(r))) for n in NODES for r in range(RAILS)
    }


def _edited(ev: Evaluation, change: Callable[[dict[str, Any]], None]) -> FabricPairs:
    pairs = read_pairs(ev.folder)
    assert pairs is not None
    doc = pairs.model_dump(mode="json", by_alias=True)
    change(doc)
    return FabricPairs.model_validate(doc)


def test_the_clean_run_passes_every_node_rail(measured: Evaluation) -> None:
    pairs = read_pairs(measured.folder)
    assert pairs is not None
    assert len(pairs.pairs) == 6
    found = _judged(measured, pairs)
    assert {f.status for f in found.values()} == {CheckStatus.PASS}, found


def test_a_fabric_stage_stopped_after_its_first_round_is_an_error_on_every_node_rail(measured: Evaluation) -> None:
    """The sweep's 48-node repro in small: pairs.json as it stood when the first round ended; every node has one
    pair of its three, which passed before."""
    first = {frozenset(p) for p in rounds(NODES)[0]}

    def keep_first_round(doc: dict[str, Any]) -> None:
        doc["pairs"] = [p for p in doc["pairs"] if frozenset(p["nodes"]) in first]

    found = _judged(measured, _edited(measured, keep_first_round))
    assert {f.status for f in found.values()} == {CheckStatus.ERROR}, found
    message = found[("gpu-node-1", 0)].message
    assert "(2 of its 3 scheduled pairs)" in message, message


def _rdma(doc: dict[str, Any], pair: int, rail: int) -> dict[str, Any]:
    record: dict[str, Any] = doc["pairs"][pair]["rdma"][rail]
    return record


def _pair(doc: dict[str, Any], pair: int) -> tuple[str, str]:
    a, b = doc["pairs"][pair]["nodes"]
    return a, b


CHANGES: list[tuple[str, Callable[[dict[str, Any]], None], str, bool]] = [
    # (name, the edit of pairs.json, words of the message, whether only rail 1 of the pair's nodes errs)
    ("a pair deleted", lambda d: d["pairs"].pop(0), "no pair with", False),
    ("one rail of a pair deleted", lambda d: d["pairs"][0]["rdma"].pop(1), "no pair with", True),
    ("rail 99", lambda d: _rdma(d, 0, 1).update(rail=99), "rail 99 is not one of pool train's 2 rails", False),
    ("a rail twice", lambda d: d["pairs"][0]["rdma"].append(_rdma(d, 0, 1)), "measured more than once", True),
    ("a node with itself", lambda d: _rdma(d, 0, 1).update(server=_rdma(d, 0, 1)["client"]), "with itself", True),
    ("a peer of no pool", lambda d: _rdma(d, 0, 1).update(server="gpu-node-99"), "gpu-node-99", True),
    ("a pair twice", lambda d: d["pairs"].append(d["pairs"][0]), "measured more than once", False),
    (
        "another HCA",
        lambda d: _rdma(d, 0, 1).update(client_hca="mlx5_99/1"),
        "mlx5_99/1, not the rail's mlx5_1/1",
        True,
    ),
]


@pytest.mark.parametrize(("change", "words", "rail_1_only"), [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_pairs_that_are_not_the_schedules_are_an_error_naming_the_pair(
    measured: Evaluation, change: Callable[[dict[str, Any]], None], words: str, rail_1_only: bool
) -> None:
    pairs = read_pairs(measured.folder)
    assert pairs is not None
    a, _ = _pair(pairs.model_dump(mode="json", by_alias=True), 0)
    found = _judged(measured, _edited(measured, change))
    errors = {k for k, f in found.items() if f.status is CheckStatus.ERROR}
    assert a in {n for n, _ in errors}, found
    assert all(f.status is CheckStatus.PASS for k, f in found.items() if k not in errors), found
    if rail_1_only:
        assert {r for _, r in errors} == {1}, errors
    assert all(words in found[k].message for k in errors if k[0] == a), [found[k].message for k in errors]


def test_a_re_test_that_measures_every_pair_again_still_passes(measured: Evaluation) -> None:
    """The schedule is every pair, in any order: pairs.json in another order (a re-test writes its own) holds."""

    def reverse(doc: dict[str, Any]) -> None:
        doc["pairs"].reverse()
        for p in doc["pairs"]:
            for r in p["rdma"]:
                r["client"], r["server"] = r["server"], r["client"]
                r["client_hca"], r["server_hca"] = r["server_hca"], r["client_hca"]

    found = _judged(measured, _edited(measured, reverse))
    assert {f.status for f in found.values()} == {CheckStatus.PASS}, found


@pytest.mark.parametrize(("sample", "why"), [(float("nan"), "are not numbers (nan)"), (1e300, "a sample of 1e+300")])
def test_a_figure_that_cannot_be_believed_is_said_so_not_called_slow(
    measured: Evaluation, sample: float, why: str
) -> None:
    """One pair's samples on rail 1 NaN or 1e300: an error whose message says the figure cannot be believed and
    why (it said "the link to gpu-node-9 on this rail is slow" under an error status)."""
    pairs = read_pairs(measured.folder)
    assert pairs is not None
    a, b = sorted(pairs.pairs[0].nodes)
    found = _judged(measured, _edited(measured, lambda d: _rdma(d, 0, 1).update(samples=[sample] * 5)))
    link = found[(a, 1)]
    assert link.status is CheckStatus.ERROR, link
    assert f"the link to {b} on this rail has no figure that can be believed" in link.message, link.message
    assert why in link.message
    assert "slow" not in link.message


def test_a_node_whose_every_figure_on_a_rail_cannot_be_believed_is_an_error_not_a_slow_rail(
    measured: Evaluation,
) -> None:
    def nan_node_1(doc: dict[str, Any]) -> None:
        for p in doc["pairs"]:
            if "gpu-node-1" in p["nodes"]:
                p["rdma"][0]["samples"] = [float("nan")] * 5

    found = _judged(measured, _edited(measured, nan_node_1))
    node = found[("gpu-node-1", 0)]
    assert node.status is CheckStatus.ERROR, node
    assert "most of its pairs have no figure that can be believed" in node.message, node.message
    assert "slow" not in node.message


def _port(node: str, rail: int) -> str:
    return f"mlx5_{rail}/1"


def _records(pairs: list[tuple[str, str]], rails: int) -> list[tuple[list[str], RdmaBandwidth]]:
    return [
        ([a, b], RdmaBandwidth(rail=r, client=a, server=b, client_hca=f"mlx5_{r}/1", server_hca=f"mlx5_{r}/1"))
        for a, b in pairs
        for r in range(rails)
    ]


def test_a_retest_is_held_to_its_carried_pairs_and_the_pairs_it_measured_again() -> None:
    """Issue 28: in a re-test that carried its source's pairs, each carried node needs a pair with every other
    carried node and each node measured again RETEST_PEERS carried peers; a pair neither carried nor measured is
    an error on its nodes' rails, never a pass."""
    nodes = [f"gpu-node-{i}" for i in range(1, 13)]
    again = {"gpu-node-3", "gpu-node-9"}
    carried = [n for n in nodes if n not in again]
    carried_pairs = [p for rnd in rounds(carried) for p in rnd]
    measured = [p for rnd in retest_rounds(nodes, frozenset(carried)) for p in rnd]

    def check(pairs: list[tuple[str, str]]) -> dict[tuple[str, int], list[str]]:
        records = _records(pairs, RAILS)
        return check_schedule(records, "train", nodes, set(nodes), RAILS, _port, carried).problems

    assert check(carried_pairs + measured) == {}
    without = [p for p in measured if p != measured[0]]  # one pair of gpu-node-3's left out
    node = next(n for n in measured[0] if n in again)
    problems = check(carried_pairs + without)
    assert set(problems) == {(node, r) for r in range(RAILS)}, problems
    assert "pairs with 7 carried nodes: a re-test pairs each node measured again with 8 of them" in problems[(node, 0)]
    gone = carried_pairs[0]  # a carried pair left out: both its nodes
    assert set(check(carried_pairs[1:] + measured)) == {(n, r) for n in gone for r in range(RAILS)}
    # the same records held to a full run's schedule: the nodes measured again lack most of their pairs
    full = check_schedule(_records(carried_pairs + measured, RAILS), "train", nodes, set(nodes), RAILS, _port)
    assert again <= {n for n, _ in full.problems}
