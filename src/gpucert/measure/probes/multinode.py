"""All-reduce across nodes: one process per node (an Indexed Job's pod), every GPU of each node a rank.

Rendezvous is a TCP connection from every process to process 0 (in a cluster, `<job>-0.<headless service>`):
each says who it is and how many GPUs it holds, process 0 answers with the world (nodes in rank order, the first
rank of each, and the NCCL unique id it created). The connections stay open: at the end each process reports
whether its reduced buffers were right, and the NumPy device uses them as its transport (a star through process
0), so the CPU test runs the same sweep and timing over a real network connection.

Every process must launch each collective the same number of times, so the timing here is a fixed count of
repetitions (the plan's `min_reps`), never a time budget that each node would spend differently.

The sweep runs under the watchdog the single-node probes have: a process whose GPU or NCCL call hangs holds every
other process in its collective. Past the limit each process sends process 0 how many collectives it launched
and completed, and ends without failing its pod (a failed pod would be reported before process 0's document);
process 0 names the process (node) that launched fewer than the others, or sent nothing.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from gpucert._version import __version__
from gpucert.measure.evidence import FabricEvidence, ProbeError
from gpucert.measure.probes import nccl
from gpucert.measure.probes.deadline import FABRIC_FLOOR_BPS, sweep_limit_s
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.fabric_collective import CollectiveFabric, NoFabric
from gpucert.measure.probes.rendezvous import Rendezvous, recv_msg, send_msg
from gpucert.measure.probes.runner import ProbePlan, devices_for
from gpucert.measure.probes.timing import Budget, Clock
from gpucert.measure.probes.watchdog import ProbeTimeout, within

__all__ = ["DEFAULT_PORT", "SocketCollective", "run_multinode"]

DEFAULT_PORT = 29511


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SocketCollective(nccl.NumpyCollective):
    """The NumPy device across processes: each process sums its own ranks, process 0 sums the processes' partial
    sums as they arrive over TCP and sends the total back to each.

    Its frames share the rendezvous connections with the watchdog's status words, so once the watchdog abandons the
    sweep (`stop`) this collective reads no further frame: a thread left blocked on a connection would otherwise
    take half of a peer's status and leave process 0 reading the stream out of step."""

    POLL_S = 0.05

    def __init__(self, rdzv: Rendezvous, local: int) -> None:
        super().__init__(local, rdzv.world, rdzv.first_rank)
        self.rdzv = rdzv
        self._reading = threading.Lock()  # held for a whole frame, so no frame is split between two readers
        self._stopped = threading.Event()

    def _recv(self, conn: socket.socket) -> bytes:
        while True:
            if self._stopped.is_set():
                raise ProbeTimeout("the all-reduce across nodes was abandoned by the watchdog")
            ready, _, _ = select.select([conn], [], [], self.POLL_S)
            if ready:
                with self._reading:
                    if not self._stopped.is_set():
                        return recv_msg(conn)

    def stop(self, wait_s: float) -> None:
        """No frame is read by this collective after this returns (a frame already being read is waited for, up
        to `wait_s`: its sender wrote it whole)."""
        self._stopped.set()
        if self._reading.acquire(timeout=wait_s):
            self._reading.release()

    def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None:
        total = np.sum(send, axis=0, dtype=np.float32)
        if self.rdzv.rank == 0:
            for conn in self.rdzv.socks.values():
                total += np.frombuffer(self._recv(conn), dtype=np.float32)
            payload = total.tobytes()
            for conn in self.rdzv.socks.values():
                send_msg(conn, payload)
        else:
            send_msg(self.rdzv.socks[0], total.tobytes())
            total = np.frombuffer(self._recv(self.rdzv.socks[0]), dtype=np.float32)
        for r in recv:
            np.copyto(r, total)


class _Progress:
    """A collective that counts what this process launched and saw complete (what a hang is told apart by)."""

    def __init__(self) -> None:
        self.coll: nccl.Collective | None = None  # made under the watchdog: NCCL's init waits for every rank
        self.launched = self.completed = self.ranks = 0

    def start(self, coll: nccl.Collective) -> _Progress:
        self.coll, self.ranks = coll, coll.ranks
        return self

    def clock(self) -> Clock:
        assert self.coll is not None
        return self.coll.clock()

    def buffers(self, count: int) -> tuple[list[Any], list[Any]]:
        assert self.coll is not None
        return self.coll.buffers(count)

    def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None:
        assert self.coll is not None
        self.launched += 1
        self.coll.all_reduce(send, recv, count)

    def synchronize(self) -> None:
        assert self.coll is not None
        self.coll.synchronize()
        self.completed = self.launched

    def correct(self, recv: list[Any], count: int) -> bool:
        assert self.coll is not None
        return self.coll.correct(recv, count)

    def abandon(self, wait_s: float) -> None:
        """After the watchdog: a collective that reads the rendezvous connections stops reading them."""
        if isinstance(self.coll, SocketCollective):
            self.coll.stop(wait_s)


class _Reported(ProbeTimeout):
    """A process other than 0 timed out and sent process 0 its counts."""


def _status(progress: _Progress) -> bytes:
    return json.dumps({"status": "timeout", "launched": progress.launched, "completed": progress.completed}).encode()


_STATUS_FRAME_MAX = 1 << 30  # a status word is tiny; a frame of the sweep's own is skipped, nothing bigger is read


def _read_status(conn: socket.socket, until: float) -> dict[str, Any] | None:
    """A process's word after the watchdog: its status, `done` (its sweep finished), or None (nothing came)."""
    while time.monotonic() < until:
        conn.settimeout(max(0.05, until - time.monotonic()))
        try:
            msg = recv_msg(conn, limit=_STATUS_FRAME_MAX)
        except (OSError, ValueError):
            return None
        if msg in (b"0", b"1"):  # its flag: the sweep finished there
            return {"status": "done"}
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            doc = json.loads(msg)
            if isinstance(doc, dict) and doc.get("status") == "timeout":
                return doc
    return None  # a frame of the collective's own, or silence


def _who_hung(rdzv: Rendezvous, mine: _Progress, wait_s: float) -> str:
    """Process 0, after its watchdog: which process (node) did not arrive, from every process's counts."""
    until = time.monotonic() + wait_s
    said: dict[int, dict[str, Any] | None] = {0: {"launched": mine.launched, "completed": mine.completed}}
    for r, conn in sorted(rdzv.socks.items()):
        said[r] = _read_status(conn, until)
    node = {p.rank: p.node for p in rdzv.peers}
    silent = [r for r, s in said.items() if s is None]
    counts = {r: int(s["launched"]) for r, s in said.items() if s is not None and "launched" in s}
    most = max(counts.values(), default=0)
    behind = [r for r, n in counts.items() if n < most]
    parts = [f"rank {r} ({node.get(r, '?')}) did not arrive: nothing came from it after the watchdog" for r in silent]
    parts += [
        f"rank {r} ({node.get(r, '?')}) did not arrive: it launched {counts[r]} collectives, the others {most}"
        for r in behind
    ]
    if not parts:
        return f"every process launched {most} collectives and none saw the last complete: the fabric between them"
    return "; ".join(parts)


def _sweep(plan: ProbePlan, rdzv: Rendezvous, make: Callable[[], nccl.Collective]) -> tuple[Any, int]:
    """The communicators and the sweep under the watchdog; past it, this process's counts go to process 0 (which
    names who hung) and the process's own error names its rank."""
    b = plan.budget
    reps = max(b.min_reps, 1)
    limit = sweep_limit_s(plan)
    # the other processes give up a little after process 0, which is then listening for their counts
    grace = min(10.0, b.watchdog_s / 2)
    limit += grace if rdzv.rank != 0 else 0.0
    progress = _Progress()

    def run() -> Any:
        return nccl.all_reduce_sweep(progress.start(make()), Budget(0.0, 0.0, reps, reps), plan.sizes.nccl_sizes)

    try:
        return within(limit, run, "the all-reduce across nodes"), reps
    except ProbeTimeout as exc:
        progress.abandon(grace / 2)  # before any status is read: the abandoned sweep reads no more frames
        if rdzv.rank != 0:
            with contextlib.suppress(OSError):
                send_msg(rdzv.socks[0], _status(progress))
            raise _Reported(f"{exc} on rank {rdzv.rank} (launched {progress.launched} collectives)") from None
        slow = f"(a fabric slower than {FABRIC_FLOOR_BPS / 1e9:g} GB/s of bus bandwidth runs past this limit too)"
        raise ProbeTimeout(f"{exc}: {_who_hung(rdzv, progress, 2 * grace + 5)} {slow}") from None


def run_multinode(
    plan: ProbePlan,
    *,
    rank: int,
    processes: int,
    host: str,
    port: int = DEFAULT_PORT,
    timeout_s: float = 600,
    collective: Callable[[Rendezvous, list[Device]], nccl.Collective] | None = None,
) -> FabricEvidence | None:
    """This process's part of the all-reduce across nodes; process 0 returns the evidence, the others None.

    On process 0 a failure is recorded in the evidence; elsewhere it raises (the pod fails with the message).
    `collective(rendezvous, devices)` makes the collective (NCCL on GPUs, the sockets' sum on the NumPy device).
    """
    started = _now()
    # before NCCL starts (process 0's unique id at the rendezvous): it reads NCCL_DEBUG_FILE then
    on_gpu = plan.device == "cupy"
    fabric = CollectiveFabric(plan.node, on_gpu=on_gpu, select=plan.fabric_rails) if plan.fabric else NoFabric()
    rdzv = Rendezvous(rank, processes, host, port, timeout_s)
    try:
        devices = devices_for(plan)

        def make_uid() -> Any:
            if not on_gpu:
                return None
            from cupy.cuda import nccl as cupy_nccl

            return nccl.unique_id_wire(cupy_nccl.get_unique_id())

        rdzv.join(plan.node, len(devices), make_uid)

        def make() -> nccl.Collective:
            if collective is not None:
                return collective(rdzv, devices)
            if on_gpu:
                return nccl.CupyNccl(devices, rdzv.world, rdzv.first_rank, rdzv.uid)
            return SocketCollective(rdzv, len(devices))

        fabric.start(rdzv, devices)
        sweep, reps = _sweep(plan, rdzv, make)
        correct = rdzv.gather_flags(sweep.correct)
        found = fabric.finish(rdzv)
        if rank != 0:
            return None
        sweep = sweep.model_copy(
            update={"correct": correct, "params": {**sweep.params, "processes": processes, "repetitions": reps}}
        )
        outcome: dict[str, Any] = {"gpus_per_node": len(devices), "nccl": sweep, **found}
    except Exception as exc:
        if isinstance(exc, _Reported):  # process 0 tells the story: a failed pod here would race its document
            print(f"gpucert.measure.probes: {exc}; process 0 names who did not arrive", file=sys.stderr)
            return None
        if rank != 0:
            raise
        error = ProbeError(probe="nccl", message=f"{type(exc).__name__}: {exc}")
        outcome = {"gpus_per_node": 0, "collected": False, "errors": [error]}
    finally:
        rdzv.close()
    return FabricEvidence(
        run_id=plan.run_id,
        target=plan.target,
        probe_version=__version__,
        started=started,
        finished=_now(),
        nodes=[p.node for p in rdzv.peers],
        **outcome,
    )
