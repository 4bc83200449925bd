"""A test item's check key is built once: collection, the `decision` fixture and every phase's report ask for it
(at fleet scale, rebuilding it about six times an item was a cost per item)."""

from __future__ import annotations

import pytest

from gpucert.evaluate.evaluation import GpuSlot
from gpucert.plan.checks import CheckKey
from gpucert.pytest.collection import check_key


class Item:
    """What check_key reads of a pytest item: its `check` marker, parameters and stash."""

    def __init__(self) -> None:
        self.stash = pytest.Stash()
        self.callspec = type("CallSpec", (), {"params": {"gpu": GpuSlot("gpu-node-1", 3)}})()
        self.fixturenames = ["gpu", "decision"]
        self.asked = 0

    def get_closest_marker(self, name: str) -> pytest.Mark:
        self.asked += 1
        return pytest.mark.check("health.ecc").mark


def test_the_key_is_built_once_per_item() -> None:
    item = Item()
    keys = [check_key(item) for _ in range(6)]  # type: ignore[arg-type]
    assert keys == [CheckKey("health.ecc", "gpu-node-1", 3)] * 6
    assert item.asked == 1


def test_the_decision_asks_pytest_for_no_other_fixture() -> None:
    """pytest 9.1 (_pytest/fixtures.py, FixtureDef.execute) sets up every fixture a fixture names on each item,
    session-scoped ones too, each time with a new `request` fixture (RequestFixtureDef, whose __init__ inspects a
    signature): the decision reads the run from the config, so an item sets up its parameters and the decision
    only."""
    import inspect

    from fixtures.run import decision

    assert list(inspect.signature(decision._get_wrapped_function()).parameters) == ["request"]


def test_a_finding_says_every_field_it_has() -> None:
    """to_json reads the fields one by one (no deep copy): a field added to Finding must be said too."""
    import dataclasses

    from gpucert.plan.checks import CheckStatus, Finding

    f = Finding("memory.bandwidth", CheckStatus.FAIL, "n1", 3, "slow", 1.0, 2.0, "GB/s", 1.5, "x@n1", "waivers[0]")
    said = f.to_json()
    assert set(said) == {field.name for field in dataclasses.fields(Finding)}
    assert said["status"] == "fail"
    assert Finding.from_json(said) == f
