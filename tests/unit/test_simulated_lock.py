"""The simulated node's recertification lock: one holder at a time, and no lock honoured forever."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpucert.errors import NodeBusyError
from gpucert.measure.targets.simulated import LOCK_MAX_AGE_S, SimulatedNodeControl


def _contend(state_dir: str, start: float, name: str, holding: str) -> str:
    while time.time() < start:  # every process reaches for the lock at the same moment
        pass
    control = SimulatedNodeControl(Path(state_dir))
    try:
        with control.lock("gpu-node-1", name):
            marker = Path(holding) / name
            marker.touch()
            time.sleep(0.3)
            others = [p.name for p in Path(holding).iterdir() if p.name != name]
            marker.unlink()
            return "held-alone" if not others else f"held-with:{','.join(others)}"
    except NodeBusyError:
        return "busy"


def _nothing() -> None:
    pass


# not "fork": a test worker has threads (an xdist IO thread, an HTTP server a fixture left running), and a child
# forked from a threaded process can wait forever on a lock one of those threads held (seen: a hung `make test`)
START = multiprocessing.get_context("forkserver")
START.set_forkserver_preload([__name__])  # the server imports this module (and gpucert) once; children fork ready


@pytest.mark.parametrize("round_", range(3))
def test_only_one_of_many_racing_holders_gets_the_lock(tmp_path: Path, round_: int) -> None:
    holding = tmp_path / "holding"
    holding.mkdir()
    ctx = START
    start = time.time() + 1.0  # every process is up by then
    with ctx.Pool(8) as pool:
        results = pool.starmap(_contend, [(str(tmp_path), start, f"p{i}", str(holding)) for i in range(8)])
    assert results.count("held-alone") >= 1
    assert not [r for r in results if r.startswith("held-with")], results
    assert not list(tmp_path.glob(".*.tmp")), "no temporary lock file is left behind"


def _lock_file(tmp_path: Path, **content: object) -> None:
    (tmp_path / "gpu-node-1.lock").write_text(json.dumps({"holder": "someone", **content}))


def _ago(seconds: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_live_holder_on_this_host_keeps_the_node(tmp_path: Path) -> None:
    _lock_file(tmp_path, pid=os.getppid(), host=socket.gethostname(), acquired=_ago(60))
    with (
        pytest.raises(NodeBusyError, match="already being recertified by someone"),
        SimulatedNodeControl(tmp_path).lock("gpu-node-1", "me"),
    ):
        pass


def test_a_holder_on_another_host_is_honoured_until_the_stated_limit(tmp_path: Path) -> None:
    _lock_file(tmp_path, pid=1, host="other-host", acquired=_ago(60))
    with pytest.raises(NodeBusyError), SimulatedNodeControl(tmp_path).lock("gpu-node-1", "me"):
        pass
    _lock_file(tmp_path, pid=1, host="other-host", acquired=_ago(LOCK_MAX_AGE_S + 60))
    control = SimulatedNodeControl(tmp_path)
    with control.lock("gpu-node-1", "me"):
        assert control.holder("gpu-node-1") == "me"
    assert not (tmp_path / "gpu-node-1.lock").exists()


def test_a_dead_holder_or_an_unreadable_lock_is_taken_over(tmp_path: Path) -> None:
    dead = START.Process(target=_nothing)
    dead.start()
    dead.join()
    _lock_file(tmp_path, pid=dead.pid, host=socket.gethostname(), acquired=_ago(5))
    control = SimulatedNodeControl(tmp_path)
    with control.lock("gpu-node-1", "me"):
        assert control.holder("gpu-node-1") == "me"
    (tmp_path / "gpu-node-1.lock").write_text("")  # what a holder killed between create and write once left
    with control.lock("gpu-node-1", "me"):
        assert control.holder("gpu-node-1") == "me"


def test_a_node_name_cannot_point_the_lock_elsewhere(tmp_path: Path) -> None:
    from gpucert.spec.names import NameError_

    with pytest.raises(NameError_), SimulatedNodeControl(tmp_path / "state").lock("../../victim", "me"):
        pass
