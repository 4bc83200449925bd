"""All-reduce bus bandwidth over every GPU of the node, one process, CuPy's NCCL bindings.

algbw = bytes / time and busbw = algbw · 2(n-1)/n, as nccl-tests computes them for all-reduce; every rank's
input is filled with (rank + 1), so each reduced element must equal n(n+1)/2: a wrong result fails the probe.

Timing follows nccl-tests (BenchTime, src/common.cu, nccl-tests 2.19.6): `iters` all-reduces launched back to back
and one clock pair around them, the time per all-reduce being the span over `iters`. Timing each call alone from
the host adds a launch and a synchronisation to every call, which at 16 MiB and below is a large part of the call.
On GPUs the pair is a CUDA event pair on rank 0's stream (an all-reduce cannot complete on one rank before every
rank has contributed); the NumPy collective uses the host clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from gpucert.measure.evidence import NcclEvidence, NcclPoint
from gpucert.measure.probes.device import Device, missing_gpu_extra
from gpucert.measure.probes.timing import Budget, Clock, time_region

__all__ = [
    "BASELINE_SIZE",
    "DEFAULT_SIZES",
    "Collective",
    "CupyNccl",
    "NumpyCollective",
    "all_reduce_sweep",
    "busbw_factor",
    "new_communicator",
    "unique_id_wire",
]

# the message size the baselines quote their all-reduce bus bandwidth at (`nccl.all_reduce` is judged there)
BASELINE_SIZE = 8 << 30
DEFAULT_SIZES = [*(1 << s for s in range(20, 33, 2)), BASELINE_SIZE]  # 1 MiB .. 4 GiB x4, then 8 GiB


def busbw_factor(ranks: int) -> float:
    return 2 * (ranks - 1) / ranks


DEFAULT_ITERS = 20  # nccl-tests' default `-n 20`: all-reduces per timed sample


class Collective(Protocol):
    ranks: int

    def clock(self) -> Clock: ...

    def buffers(self, count: int) -> tuple[list[Any], list[Any]]: ...
    def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None: ...
    def synchronize(self) -> None: ...
    def correct(self, recv: list[Any], count: int) -> bool: ...


class NumpyCollective:
    """n host arrays as n ranks: the reduction is summed and handed to every rank, as all-reduce does.

    Alone the process's arrays are the whole world; a subclass across processes holds ranks `first_rank ..` of a
    larger `world` and only changes how the sum travels.
    """

    def __init__(self, ranks: int, world: int | None = None, first_rank: int = 0) -> None:
        self.local = ranks
        self.ranks = world or ranks
        self.first_rank = first_rank

    def buffers(self, count: int) -> tuple[list[Any], list[Any]]:
        send = [np.full(count, self.first_rank + r + 1, dtype=np.float32) for r in range(self.local)]
        return send, [np.empty(count, dtype=np.float32) for _ in range(self.local)]

    def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None:
        total = np.sum(send, axis=0, dtype=np.float32)
        for r in recv:
            np.copyto(r, total)

    def synchronize(self) -> None:
        return None

    def clock(self) -> Clock:
        return _HostClock(self.synchronize)

    def correct(self, recv: list[Any], count: int) -> bool:
        want = self.ranks * (self.ranks + 1) / 2
        return all(bool(np.all(r == want)) for r in recv)


def unique_id_wire(uid: bytes | Sequence[int]) -> list[int]:
    """NCCL's unique id as the rendezvous carries it (JSON): its 128 bytes, unsigned.

    CuPy 14 and later return `bytes`; CuPy 13 a tuple of C `char` values, which are signed on x86 and Arm.
    """
    return [int(x) & 0xFF for x in uid]


def new_communicator(nccl: Any, ranks: int, wire: Sequence[int], rank: int) -> Any:
    """ncclCommInitRank with the id in the shape the installed CuPy takes: `bytes` (CuPy 14 and later) or a
    tuple of signed C chars (CuPy 13). Cython checks the argument's type before any NCCL call, so the TypeError
    of the wrong shape has done nothing yet."""
    try:
        return nccl.NcclCommunicator(ranks, bytes(wire), rank)
    except TypeError:
        return nccl.NcclCommunicator(ranks, tuple(x - 256 if x > 127 else x for x in wire), rank)


class CupyNccl:
    """One NCCL communicator per GPU of this process, launched together in a group.

    Alone (`uid` None) the process's GPUs are the whole world (ncclCommInitAll); across nodes each process holds
    ranks `first_rank ..` of a `world` that shares the `uid` handed out at rendezvous (ncclCommInitRank per GPU),
    as `unique_id_wire` wrote it.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        world: int | None = None,
        first_rank: int = 0,
        uid: Sequence[int] | None = None,
    ) -> None:
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as exc:
            raise missing_gpu_extra("CuPy with NCCL", exc) from None
        self.cp, self.nccl = cupy, nccl
        self.ids = [d.index for d in devices]
        self.ranks = world or len(self.ids)
        self.first_rank = first_rank
        if uid is None:
            self.comms = nccl.NcclCommunicator.initAll(self.ids)
        else:
            nccl.groupStart()  # several GPUs per process: every ncclCommInitRank of this process in one group
            self.comms = []
            for r, i in enumerate(self.ids):
                with cupy.cuda.Device(i):
                    self.comms.append(new_communicator(nccl, self.ranks, uid, first_rank + r))
            nccl.groupEnd()
        self.streams = []
        for i in self.ids:
            with cupy.cuda.Device(i):
                self.streams.append(cupy.cuda.Stream(non_blocking=True))

    def buffers(self, count: int) -> tuple[list[Any], list[Any]]:
        send, recv = [], []
        for r, i in enumerate(self.ids):
            with self.cp.cuda.Device(i):
                send.append(self.cp.full(count, self.first_rank + r + 1, dtype=self.cp.float32))
                recv.append(self.cp.empty(count, dtype=self.cp.float32))
        for i in self.ids:  # cp.full ran on the legacy stream, which the communicators' non-blocking streams ignore
            self.cp.cuda.Device(i).synchronize()
        return send, recv

    def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None:
        self.nccl.groupStart()
        for r, i in enumerate(self.ids):
            with self.cp.cuda.Device(i):
                self.comms[r].allReduce(
                    send[r].data.ptr,
                    recv[r].data.ptr,
                    count,
                    self.nccl.NCCL_FLOAT32,
                    self.nccl.NCCL_SUM,
                    self.streams[r].ptr,
                )
        self.nccl.groupEnd()

    def synchronize(self) -> None:
        for s in self.streams:
            s.synchronize()

    def clock(self) -> Clock:
        return _StreamClock(self.cp, self.ids[0], self.streams[0], self.synchronize)

    def correct(self, recv: list[Any], count: int) -> bool:
        want = self.ranks * (self.ranks + 1) / 2
        ok = True
        for i, r in zip(self.ids, recv, strict=True):
            with self.cp.cuda.Device(i):
                ok = ok and bool(self.cp.all(r == want).get())
        return ok


class _HostClock:
    """The timing protocol's device for a collective: events are host times taken after every device is idle."""

    name = "host clock, all devices synchronised"
    index = -1
    l2_bytes = 0

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._sync = synchronize

    def empty(self, nbytes: int) -> Any:
        return None

    def fill(self, buf: Any, value: float) -> None:
        return None

    def event(self) -> list[float]:
        return [0.0]

    def record(self, event: Any) -> None:
        self._sync()
        event[0] = time.perf_counter()

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(end[0] - start[0])

    def synchronize(self) -> None:
        self._sync()


class _StreamClock:
    """CUDA events on rank 0's stream: the clock of back-to-back all-reduces (all ranks wait for each other)."""

    name = "rank 0's stream"
    index = -1
    l2_bytes = 0  # a collective's buffers are rotated by the ring itself: no flush between samples

    def __init__(self, cp: Any, device: int, stream: Any, synchronize: Callable[[], None]) -> None:
        self.cp, self.device, self.stream, self._sync = cp, device, stream, synchronize

    def empty(self, nbytes: int) -> Any:
        return None

    def fill(self, buf: Any, value: float) -> None:
        return None

    def event(self) -> Any:
        with self.cp.cuda.Device(self.device):
            return self.cp.cuda.Event()

    def record(self, event: Any) -> None:
        with self.cp.cuda.Device(self.device):
            event.record(self.stream)

    def elapsed_s(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end)) / 1e3

    def synchronize(self) -> None:
        self._sync()


def _back_to_back(all_reduce: Callable[[], None], iters: int) -> None:
    for _ in range(iters):
        all_reduce()


def all_reduce_sweep(
    coll: Collective, budget: Budget, sizes: Sequence[int] = DEFAULT_SIZES, iters: int = DEFAULT_ITERS
) -> NcclEvidence:
    """Per size, samples of the time of one all-reduce, each the span of `iters` back-to-back ones over `iters`."""
    factor = busbw_factor(coll.ranks)
    clock = coll.clock()
    points, correct = [], True
    for size in sizes:
        count = size // 4  # float32 elements
        send, recv = coll.buffers(count)
        spans = time_region(clock, partial(_back_to_back, partial(coll.all_reduce, send, recv, count), iters), budget)
        seconds = [t / iters for t in spans]
        coll.synchronize()  # every rank's stream, not only the clock's: the check reads every rank's result
        correct = correct and coll.correct(recv, count)
        algbw = [size / t / 1e9 for t in seconds]
        points.append(
            NcclPoint(
                size_bytes=size, time_us=[t * 1e6 for t in seconds], algbw=algbw, busbw=[a * factor for a in algbw]
            )
        )
        del send, recv
    return NcclEvidence(
        op="all_reduce",
        ranks=coll.ranks,
        dtype="float32",
        points=points,
        correct=correct,
        params={
            "busbw_factor": factor,
            "iters_per_sample": iters,
            "timer": f"{clock.name}: one clock pair around {iters} back-to-back all-reduces (nccl-tests)",
        },
    )
