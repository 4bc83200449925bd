"""A soak on a simulated fleet holds its nodes (sweep defect 17) as it does a cluster's by Lease: each node's lock
(the one `gpucert recertify` takes, under the reports folder) for as long as the controller runs, so a
recertification of a soaking node and a second soak of the same spec are refused; released at the end, and taken
over from a controller that died (a lock names its process: kill -9 leaves one behind)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpucert.errors import NodeBusyError
from gpucert.fleet.soak import start_soak
from gpucert.fleet.soak.controller import Progress
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.spec.cluster import load_spec

from .soak_spec import soak_spec


def test_a_running_soak_refuses_a_recertification_and_a_second_soak(tmp_path: Path) -> None:
    spec = soak_spec(tmp_path, {"duration": "4h", "round": "1h"})
    reports = tmp_path / "reports"
    control = SimulatedTarget.from_spec(load_spec(spec)).node_control(reports)  # what recertify locks
    refused: list[str] = []

    def during(p: Progress) -> None:
        if p.round != 1:
            return
        with pytest.raises(NodeBusyError, match="gpu-node-1") as busy, control.lock("gpu-node-1", "someone@host/1"):
            pass
        refused.append(str(busy.value))
        with pytest.raises(NodeBusyError) as again:
            start_soak(spec, reports)
        refused.append(str(again.value))

    result = start_soak(spec, reports, on_progress=during)
    assert result.result == "pass"
    assert len(refused) == 2
    assert f"soak {result.run.name}" in refused[0]
    runs = [p.name for p in reports.iterdir() if not p.name.startswith(".")]
    assert runs == [result.run.name]  # the refused soak left no run folder (`gpucert metrics` reads the newest)
    assert control.holder("gpu-node-1") is None  # released at the end
    assert control.holder("gpu-node-2") is None


def test_the_lock_of_a_controller_that_died_is_taken_over(tmp_path: Path) -> None:
    spec = soak_spec(tmp_path, {"duration": "4h", "round": "1h"})
    reports = tmp_path / "reports"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    lock: dict[str, Any] = {
        "holder": "soak an-old-run",
        "pid": int(dead.stdout),
        "host": socket.gethostname(),
        "acquired": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    folder = reports / ".simulated-nodes" / load_spec(spec).metadata.name
    folder.mkdir(parents=True)
    (folder / "gpu-node-1.lock").write_text(json.dumps(lock), encoding="utf-8")
    assert start_soak(spec, reports).result == "pass"
    assert not (folder / "gpu-node-1.lock").exists()
