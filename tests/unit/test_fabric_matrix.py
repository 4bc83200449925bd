"""report.html's rails x nodes matrix keeps its axis labels readable at fleet scale (issue 25's reports): the labels
are dark on light where the cells' text is white, the rail header and the node column stay in view as the matrix
scrolls (sticky), and past 64 nodes a cell is its colour alone, its status in its title."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.report.fabric_html import rail_matrix
from gpucert.report.verdict import Outcome


def _render(nodes: int) -> str:
    view: Any = SimpleNamespace(spec=SimpleNamespace(rails=SimpleNamespace(count=2)))
    names = [f"gpu-node-{i}" for i in range(1, nodes + 1)]
    outcomes = {
        CheckKey(c, n, None, f"rail{r}"): Outcome(Finding(c, CheckStatus.PASS, n, None, "ok"))
        for n in names
        for r in range(2)
        for c in ("fabric.port", "fabric.rdma_bw")
    }
    slow = CheckKey("fabric.rdma_bw", "gpu-node-7", None, "rail1")
    outcomes[slow] = Outcome(Finding(slow.check, CheckStatus.FAIL, "gpu-node-7", None, "rail 1 slow"))
    return rail_matrix(view, outcomes, names)


def test_at_80_nodes_every_label_stays_readable_and_in_view() -> None:
    html = _render(80)
    labels = re.findall(r"<th style='([^']*)'>(gpu-node-\d+)</th>", html)
    assert [n for _, n in labels] == [f"gpu-node-{i}" for i in range(1, 81)]  # one row label per node
    assert all("color:#222" in s and "position:sticky;left:0" in s for s, _ in labels)  # dark, fixed at the left
    heads = re.findall(r"<th style='([^']*)'>(rail \d)</th>", html)
    assert [h for _, h in heads] == ["rail 0", "rail 1"]
    assert all("color:#222" in s and "position:sticky;top:0" in s for s, _ in heads)  # fixed on top
    assert "overflow:auto" in html  # the matrix scrolls in its own box, its labels with it
    assert ">pass<" not in html  # 160 cells of colour alone ...
    assert "title='gpu-node-7 rail 1: port: pass; rdma_bw: fail\nrail 1 slow'" in html  # ... each saying its status
    assert html.count("#c0392b") == 1


def test_a_small_fabric_writes_each_cells_status() -> None:
    html = _render(8)
    assert html.count(">pass<") == 15
    assert html.count(">fail<") == 1
