"""The scheduler's rules on their own: the cordon limit, the failure allowance, the order of nodes, and why a node
may not be taken (the rounds themselves run against the fake API server, tests/integration/test_schedule_live.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpucert.errors import ConfigError
from gpucert.fleet.schedule import (
    ScheduleOptions,
    claim_record,
    cordon_limit,
    eligibility,
    failure_allowance,
    oldest_first,
)
from gpucert.fleet.state import DEFAULT_POOL, Judgement, NodeStatus
from gpucert.measure.targets.base import NodeState

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def status(name: str, days: float | None, *, cordoned: bool = False, label: str | None = None) -> NodeStatus:
    labels = {"gpucert.io/certified": label} if label else {}
    state = NodeState(name, cordoned, labels, {})
    latest = Judgement("pass", NOW - timedelta(days=days), "run") if days is not None else None
    return NodeStatus(name, DEFAULT_POOL, latest, latest.at if latest else None, state)


def opts(**kw: float) -> ScheduleOptions:
    return ScheduleOptions(reports=Path("r"), handover_dir=Path("h"), max_nodes=2, **kw)  # type: ignore[arg-type]


def test_the_cordon_limit_is_the_share_rounded_down() -> None:
    assert [cordon_limit(n, 0.25) for n in (1, 3, 4, 7, 8, 1000)] == [0, 0, 1, 1, 2, 250]
    assert cordon_limit(10, 0.3) == 3  # 10 x 0.3 is 2.9999999999999996 in floating point
    assert cordon_limit(10, 0) == 0
    assert cordon_limit(10, 1) == 10


def test_one_failure_is_always_marked_then_the_share_decides() -> None:
    assert [failure_allowance(n, 0.5) for n in (1, 2, 3, 4, 10)] == [1, 1, 1, 2, 5]
    assert failure_allowance(4, 0) == 1
    assert failure_allowance(3, 0.34) == 1
    assert failure_allowance(3, 1) == 3


def test_never_certified_first_then_oldest_then_by_name() -> None:
    nodes = [status("b", 3), status("a", 3), status("c", None), status("d", 30), status("e", None)]
    assert [s.node for s in oldest_first(nodes)] == ["c", "e", "d", "a", "b"]


def test_why_a_node_may_not_be_taken() -> None:
    pool = [status(f"n{i}", 10) for i in range(8)]
    admin = status("x", 10, cordoned=True)
    failed = status("y", 10, cordoned=True, label="false")
    members = [*pool, admin, failed]
    pools = {DEFAULT_POOL: [s.state for s in members if s.state is not None]}
    o = opts(max_cordoned_share=0.3)  # 10 nodes: 3 at once; 2 are cordoned
    assert eligibility(pool[0], pools, o, NOW) is None
    assert eligibility(admin, pools, o, NOW) == "cordoned by someone else"
    assert eligibility(failed, pools, o, NOW) is None  # gpucert left it cordoned: it is taken again
    full = opts(max_cordoned_share=0.2)  # 2 at once, 2 cordoned
    assert "one more would exceed max cordoned share 0.2 (2 at once)" in str(eligibility(pool[0], pools, full, NOW))
    assert eligibility(failed, pools, full, NOW) is None  # already cordoned: no more cordons
    young = opts(min_age_s=14 * 86400, max_cordoned_share=0.3)
    assert eligibility(pool[0], pools, young, NOW) == "certified 240.0 h ago, less than the minimum age of 336 h"
    assert eligibility(pool[0], pools, young, None) is None  # its age was judged when the round chose it
    assert eligibility(NodeStatus("gone", DEFAULT_POOL, None, None, None), pools, o, NOW) == (
        "not among the target's nodes"
    )


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"max_nodes": 0}, "--max-nodes"),
        ({"max_cordoned_share": -0.1}, "--max-cordoned-share"),
        ({"max_failure_share": float("nan")}, "--max-failure-share"),
        ({"min_age_s": -1.0}, "--min-age-hours"),
        ({"wait_timeout_s": -1.0}, "--wait-timeout"),
    ],
)
def test_options_out_of_range_name_their_option(kw: dict[str, float], key: str) -> None:
    base = {"reports": Path("r"), "handover_dir": Path("h"), "max_nodes": 1}
    with pytest.raises(ConfigError) as err:
        ScheduleOptions(**{**base, **kw}).check()  # type: ignore[arg-type]
    assert err.value.key == key


def test_rounds_started_in_the_same_second_get_a_record_each(tmp_path: Path) -> None:
    """The record's name is claimed with O_EXCL: a name checked free and written later could be two rounds' one."""
    folder = tmp_path / ".schedule"
    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda _: claim_record(folder, NOW), range(16)))
    assert len(set(paths)) == 16
    assert sorted(p.name for p in paths)[:2] == ["2026-12-01T00-00-00Z-10.json", "2026-12-01T00-00-00Z-11.json"]
    assert (folder / "2026-12-01T00-00-00Z.json").exists()
