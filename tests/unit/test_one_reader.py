"""Issue 24: gpucert's own documents go through gpucert/files.py's one writer and one reader (its one error line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.fleet.recertify import ANNOTATION_LAST, ANNOTATION_LAST_RUN
from gpucert.fleet.state import node_statuses
from gpucert.measure.targets.base import NodeState
from gpucert.measure.targets.simulated import SimulatedNodeControl


def test_a_simulated_nodes_state_is_written_whole_and_a_damaged_one_is_one_line(tmp_path: Path) -> None:
    control = SimulatedNodeControl(tmp_path)
    control.cordon("gpu-node-1")
    assert control.state("gpu-node-1")["unschedulable"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["gpu-node-1.json"]  # no fixed-name `.tmp` beside it
    (tmp_path / "gpu-node-1.json").write_text('{"unschedulable": tr')  # cut off
    with pytest.raises(EvidenceError, match=r"gpu-node-1\.json: not JSON \(line 1"):
        control.state("gpu-node-1")


@pytest.mark.parametrize("key", [ANNOTATION_LAST_RUN, ANNOTATION_LAST])
@pytest.mark.parametrize("text", ['{"time": "2026-', '["pass"]'])
def test_a_damaged_certification_annotation_fails_closed_naming_node_and_annotation(key: str, text: str) -> None:
    node = NodeState("gpu-node-3", annotations={key: text})
    with pytest.raises(EvidenceError) as err:
        node_statuses([], [node])
    msg = str(err.value)
    assert "\n" not in msg
    assert f"node gpu-node-3: annotation {key} is not " in msg
    assert f"kubectl annotate node gpu-node-3 {key}-" in msg


def test_no_annotation_is_a_node_never_certified() -> None:
    (status,) = node_statuses([], [NodeState("gpu-node-3")])
    assert status.latest is None
    assert status.certified_at is None
