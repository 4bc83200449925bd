"""The all-reduce is timed as nccl-tests times it (BenchTime, src/common.cu, nccl-tests 2.19.6): `iters` calls
launched back to back between one clock pair, the time per call being the span over `iters`; then algbw = size /
time and busbw = algbw · 2(n-1)/n. The NumPy collective runs the same protocol on the host clock."""

from __future__ import annotations

import statistics
import time
import types
from typing import Any

import pytest

from gpucert.measure.probes import nccl
from gpucert.measure.probes.timing import Budget

FAST = Budget(warmup_s=0.0, measure_s=0.0, min_reps=3, max_reps=3)


class Logged(nccl.NumpyCollective):
    """A collective whose clock writes down what happens between its events."""

    def __init__(self, ranks: int, log: list[str], sync_s: float = 0.0) -> None:
        super().__init__(ranks)
        self.log, self.sync_s = log, sync_s

    def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None:
        self.log.append("all_reduce")
        super().all_reduce(send, recv, count)

    def synchronize(self) -> None:
        self.log.append("sync")
        time.sleep(self.sync_s)  # what a launch and a device synchronisation cost the host


def test_each_sample_is_one_clock_pair_around_back_to_back_calls() -> None:
    log: list[str] = []
    ev = nccl.all_reduce_sweep(Logged(2, log), FAST, sizes=[1 << 12], iters=5)
    (point,) = ev.points
    assert len(point.time_us) == 3
    assert ev.params["iters_per_sample"] == 5
    # after the warm-up: each sample's start event (a host sync), five calls with nothing between them, the end
    timed = log[log.index("all_reduce") + 5 + 1 :]  # the warm-up's 5 calls and its synchronisation
    assert timed[: 2 * 7] == (["sync"] + ["all_reduce"] * 5 + ["sync"]) * 2
    assert "one clock pair around 5 back-to-back all-reduces" in ev.params["timer"]


def test_per_call_overhead_is_spread_over_the_iterations() -> None:
    """A 20 ms host synchronisation per clock reading: timed per call (iters=1, as before) every sample carries
    it; over 20 back-to-back calls each call carries a twentieth. The small sizes are where this matters."""
    per_call = nccl.all_reduce_sweep(Logged(2, [], sync_s=0.02), FAST, sizes=[1 << 12], iters=1)
    back_to_back = nccl.all_reduce_sweep(Logged(2, [], sync_s=0.02), FAST, sizes=[1 << 12], iters=20)
    slow = statistics.median(per_call.points[0].time_us)
    fast = statistics.median(back_to_back.points[0].time_us)
    assert slow >= 20_000
    assert fast < slow / 5
    bw = back_to_back.points[0]
    for t_us, alg, bus in zip(bw.time_us, bw.algbw, bw.busbw, strict=True):
        assert alg == pytest.approx((1 << 12) / (t_us / 1e6) / 1e9)
        assert bus == pytest.approx(alg * nccl.busbw_factor(2))


class _Stream:
    fake: FakeCupyNccl  # set on the class each FakeCupyNccl makes of these
    count = 0

    def __init__(self, non_blocking: bool = False) -> None:
        cls = type(self)
        self.ptr = cls.count
        cls.count += 1

    def synchronize(self) -> None:
        self.fake.log.append(f"sync stream {self.ptr}")


class _Event:
    fake: FakeCupyNccl

    def record(self, stream: Any = None) -> None:
        self.fake.log.append(f"event on stream {stream.ptr}")

    def synchronize(self) -> None:
        self.fake.log.append("event sync")


class _Device:
    fake: FakeCupyNccl

    def __init__(self, i: int) -> None:
        self.i = i

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *a: object) -> None:
        return None

    def synchronize(self) -> None:
        self.fake.log.append(f"device {self.i} sync")


class _Comm:
    fake: FakeCupyNccl

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def allReduce(self, send: Any, recv: Any, count: int, dtype: int, op: int, stream: int) -> None:  # noqa: N802
        self.fake.log.append(f"allReduce rank {self.rank} on stream {stream}")


class FakeCupyNccl:
    """cupy for CupyNccl, logging the order of stream work: Event.record(stream), cupy.cuda.get_elapsed_time and
    Stream.synchronize are as cupy/cuda/stream.pyx (CuPy 14.2) has them; allReduce is enqueued on the stream passed
    (cupy/cuda/nccl.py -> cupy_backends/cuda/libs/nccl.pyx, NcclCommunicator.allReduce(..., stream))."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        bound = {"fake": self}
        stream, event = type("Stream", (_Stream,), {**bound, "count": 0}), type("Event", (_Event,), bound)
        device, comm = type("Device", (_Device,), bound), type("Comm", (_Comm,), bound)
        self.nccl = types.SimpleNamespace(
            NcclCommunicator=types.SimpleNamespace(initAll=lambda ids: [comm(r) for r in range(len(ids))]),
            groupStart=lambda: None,
            groupEnd=lambda: None,
            NCCL_FLOAT32=7,
            NCCL_SUM=0,
        )
        arr = types.SimpleNamespace(data=types.SimpleNamespace(ptr=1))
        self.cupy = types.SimpleNamespace(
            cuda=types.SimpleNamespace(
                Device=device, Stream=stream, Event=event, nccl=self.nccl, get_elapsed_time=lambda a, b: 2.0
            ),
            full=lambda *a, **k: arr,
            empty=lambda *a, **k: arr,
            float32="float32",
            all=lambda x: types.SimpleNamespace(get=lambda: True),
        )


def test_on_gpus_the_clock_is_an_event_pair_on_rank_0s_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    log: list[str] = []
    fake = FakeCupyNccl(log)
    monkeypatch.setitem(sys.modules, "cupy", fake.cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake.cupy.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake.nccl)
    devices = [types.SimpleNamespace(index=i) for i in range(2)]
    coll = nccl.CupyNccl(devices)  # type: ignore[arg-type]
    monkeypatch.setattr(coll, "correct", lambda recv, count: log.append("check") or True)
    ev = nccl.all_reduce_sweep(coll, FAST, sizes=[1 << 12], iters=4)
    s0 = coll.streams[0].ptr
    first = log.index(f"event on stream {s0}")
    sample = log[first : log.index("event sync", first) + 1]
    launches = [f"allReduce rank {r} on stream {coll.streams[r].ptr}" for r in range(2)] * 4
    assert sample == [f"event on stream {s0}", *launches, f"event on stream {s0}", "event sync"]
    filled = log[: log.index(launches[0])]  # cp.full ran on the legacy stream: every device idle before NCCL
    assert {"device 0 sync", "device 1 sync"} <= set(filled)
    before_check = log[: log.index("check")]
    assert before_check[-2:] == [f"sync stream {coll.streams[0].ptr}", f"sync stream {coll.streams[1].ptr}"]
    assert ev.points[0].time_us == [pytest.approx(2.0 / 4 * 1e3)] * 3  # 2 ms over 4 calls
