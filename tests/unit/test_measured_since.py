"""plan/carried_pairs.py `measured_since`: whether a carried node was measured after the carried pairs were. Run ids
are to the second, so two runs of one second (a source and its re-test run back to back by automation) cannot be
ordered by their ids: a node measured in another run than the pairs then counts as measured since (its carried pairs
do not stand: measured again, or an error), never as carried alongside them."""

from __future__ import annotations

from gpucert.plan.carried_pairs import CarriedPairs, measured_since
from gpucert.plan.records import Carried

FIRST = "2026-12-05T12-02-44Z-acme"


def _since(pairs_in: str, node_in: str) -> bool:
    index = CarriedPairs(run=pairs_in, measured_in=pairs_in, nodes=("n1",), files=())
    carried = Carried(run=node_in, measured_in=node_in, file="evidence/n1.json", sha256="0" * 64)
    return measured_since(index, carried)


def test_a_node_measured_with_the_pairs_is_not_measured_since() -> None:
    assert not _since(FIRST, FIRST)


def test_a_later_run_is_measured_since_and_an_earlier_one_is_not() -> None:
    assert _since(FIRST, "2026-12-05T12-02-45Z-acme")
    assert not _since(FIRST, "2026-12-05T12-02-43Z-acme")


def test_another_run_of_the_same_second_counts_as_measured_since() -> None:
    assert _since(FIRST, f"{FIRST}-2")  # the second run of a name in one second: `<id>-2`
    assert _since(FIRST, "2026-12-05T12-02-44Z-other")


def test_a_run_id_without_its_time_counts_as_measured_since() -> None:
    assert _since("renamed-by-hand", FIRST)
    assert _since(FIRST, "renamed-by-hand")
