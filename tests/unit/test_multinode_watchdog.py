"""The all-reduce across nodes under the watchdog (issue 21, item 8): a process whose collective hangs no longer
holds the Job until its deadline, and process 0 names the rank (node) that did not arrive.

Three processes (threads here, each with its own TCP connection to process 0, as pods have) run the real
rendezvous and sweep on the NumPy device; rank 1 hangs preparing the second size's buffers (a hung fill kernel)
and never launches that size's all-reduce, as a rank whose GPU hangs. Before the fix every process waited on it
until the Job's deadline.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from typing import Any

import pytest

from gpucert.measure.evidence import FabricEvidence
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.multinode import SocketCollective, run_multinode
from gpucert.measure.probes.rendezvous import Peer, Rendezvous, recv_msg, send_msg
from gpucert.measure.probes.runner import ProbePlan
from gpucert.measure.probes.watchdog import ProbeTimeout


class HangsAfter(SocketCollective):
    """Rank 1's collective: the second size's buffers never come (the fill kernel on its GPU hangs)."""

    release = threading.Event()

    def __init__(self, rdzv: Rendezvous, local: int) -> None:
        super().__init__(rdzv, local)
        self.sizes = 0

    def buffers(self, count: int) -> tuple[list[Any], list[Any]]:
        self.sizes += 1
        if self.sizes > 1:
            self.release.wait()  # never set: the watchdog abandons this thread
        return super().buffers(count)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_hung_rank_is_named_and_nobody_waits_for_the_deadline() -> None:
    plan = ProbePlan(
        run_id="r",
        node="x",
        device="numpy",
        gpus=1,
        budget={"min_reps": 3, "warmup_s": 0, "measure_s": 0, "watchdog_s": 1.0},
        sizes={"nccl_sizes": [1 << 12, 1 << 14]},
    )
    port = free_port()
    out: dict[int, Any] = {}

    def rank(r: int) -> None:
        def hanging(rdzv: Rendezvous, devices: list[Device]) -> SocketCollective:
            return HangsAfter(rdzv, len(devices))

        try:
            out[r] = run_multinode(
                plan.model_copy(update={"node": f"node-{r}"}),
                rank=r,
                processes=3,
                host="localhost",
                port=port,
                timeout_s=20,
                collective=hanging if r == 1 else None,
            )
        except Exception as exc:
            out[r] = exc

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in (0, 1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a process still waits on the hung rank"
    fabric = out[0]
    assert isinstance(fabric, FabricEvidence)
    assert not fabric.collected
    (err,) = fabric.errors
    # the watchdog plus the time the sweep's few KiB take at the fabric floor (deadline.sweep_limit_s)
    assert re.search(r"the all-reduce across nodes did not finish in 1(\.\d+)? s", err.message), err.message
    assert "rank 1 (node-1) did not arrive" in err.message
    assert "rank 2" not in err.message  # it launched as many collectives as process 0
    assert out[1] is None  # the others end as the command's rank N does: process 0's document tells the story
    assert out[2] is None
    counts = re.search(r"it launched (\d+) collectives, the others (\d+)", err.message)
    if counts is not None:  # rank 1's counts reached process 0 (on the NumPy device its hung reader may take them)
        assert int(counts[1]) < int(counts[2])
    else:
        assert "rank 1 (node-1) did not arrive: nothing came from it after the watchdog" in err.message


def test_an_abandoned_sweep_reads_no_frame_after_the_watchdog() -> None:
    """The CI failure of 2026-12-05 (`MemoryError` in place of the hung rank's name): process 0's abandoned sweep
    was still blocked reading a peer's connection when that peer's status word came, took part of it, and left
    process 0 reading a length out of step. Once stopped, the collective must leave every frame to the watchdog."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        rdzv = Rendezvous(0, 2, "localhost", 0)
        rdzv.peers = [Peer(0, "node-0", 1), Peer(1, "node-1", 1)]
        rdzv.socks = {1: ours}
        coll = SocketCollective(rdzv, 1)
        send, recv = coll.buffers(4)
        failed: list[BaseException] = []

        def sweep() -> None:
            try:
                coll.all_reduce(send, recv, 4)
            except BaseException as exc:
                failed.append(exc)

        worker = threading.Thread(target=sweep, daemon=True)
        worker.start()
        time.sleep(3 * SocketCollective.POLL_S)  # blocked on the peer, as at the watchdog
        coll.stop(1.0)
        send_msg(theirs, b'{"status": "timeout", "launched": 80, "completed": 80}')
        worker.join(5)
        assert not worker.is_alive()
        assert isinstance(failed[0], ProbeTimeout)
        ours.settimeout(5)
        assert json.loads(recv_msg(ours))["launched"] == 80  # whole, for the watchdog to read


def test_a_length_past_the_limit_is_refused_not_allocated() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(struct.pack("!Q", 1 << 62))
        with pytest.raises(ValueError, match="frame of 4611686018427387904 bytes"):
            recv_msg(ours)
