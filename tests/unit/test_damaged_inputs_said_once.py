"""Messages for damaged inputs: the file named once, the key at fault, and what to do (a hostile-input sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.fleet.soak.folder import SoakFolder
from gpucert.plan.inventory import Inventory, Node
from gpucert.plan.recorded import import_evidence
from gpucert.plan.runfolder import RunFolder
from gpucert.stack.observe import NodeStack, StackObservation


def test_a_damaged_soak_round_names_the_key_and_how_to_run_it_again(tmp_path: Path) -> None:
    """It said "is not a soak round gpucert wrote (ValidationError)": no key, no fix, and resume stopped there."""
    soak = SoakFolder(RunFolder(tmp_path / "run"))
    raw = soak.raw_path(0, "gpu-node-1")
    raw.parent.mkdir(parents=True)
    raw.write_text('{"round": "zero"}')
    with pytest.raises(EvidenceError) as err:
        soak.read_raw(0, "gpu-node-1")
    message = str(err.value)
    assert message.startswith(f"{raw}: is not a soak round gpucert wrote (")
    assert " at " in message.split("(", 1)[1]  # the key at fault
    assert f"move the file out of the run folder and run `gpucert soak --resume {tmp_path / 'run'}` again" in message
    assert message.count(str(raw)) == 1


def test_a_damaged_recorded_evidence_file_is_named_once(tmp_path: Path) -> None:
    """It said "X: X: not JSON ...": the path of the file twice."""
    recorded = RunFolder(tmp_path / "recorded")
    recorded.evidence_dir.mkdir(parents=True)
    recorded.write_inventory(Inventory("simulated", (Node("gpu-node-1", 8, "NVIDIA-H100-80GB-HBM3", 8, True),)))
    recorded.write_stack(StackObservation(nodes={"gpu-node-1": NodeStack(node="gpu-node-1", ready=True)}))
    damaged = recorded.evidence_path("gpu-node-1")
    damaged.write_text('{"schema": 1')
    new = RunFolder(tmp_path / "new")
    new.path.mkdir()
    with pytest.raises(EvidenceError) as err:
        import_evidence(recorded.path, new)
    assert str(err.value).startswith(f"{damaged}: not JSON (line 1")
    assert str(err.value).count(str(damaged)) == 1
