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
