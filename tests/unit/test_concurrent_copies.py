"""PCIe with every GPU copying at once beside one at a time, and P2P both ways at once beside one way: recorded as
evidence next to the judged figures (no baseline states what a GPU gets while its switch's uplink is shared)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gpucert.measure.probes import p2p, pcie
from gpucert.measure.probes.device import NumpyDevice
from gpucert.measure.probes.runner import run_plan
from gpucert.measure.probes.timing import Budget, time_together

from .fake_nvml import eight_gpus, fake_nvml
from .test_probe_node import plan

FAST = Budget(warmup_s=0.0, measure_s=0.0, min_reps=3, max_reps=3)


class Logged(NumpyDevice):
    def __init__(self, index: int, log: list[str], seconds: float = 0.001) -> None:
        super().__init__(index)
        self.log, self.seconds = log, seconds

    def record(self, event: Any) -> None:
        self.log.append(f"record {self.index}")

    def elapsed_s(self, start: Any, end: Any) -> float:
        return self.seconds


def test_every_device_is_launched_before_any_is_waited_for() -> None:
    log: list[str] = []
    devs = [Logged(i, log, seconds=0.001 * (i + 1)) for i in range(3)]
    samples = time_together(devs, [lambda i=i: log.append(f"copy {i}") for i in range(3)], FAST)  # type: ignore[misc]
    assert samples == [[0.001] * 3, [0.002] * 3, [0.003] * 3]  # each device's own event pair
    one_rep = [f"{w} {i}" for i in range(3) for w in ("record", "copy", "record")]
    timed = log[log.index("record 0") :]
    assert timed == one_rep * 3


def test_pcie_all_at_once_places_each_host_buffer_on_its_gpus_node() -> None:
    placed: dict[int, int] = {}

    def place(i: int, fn: Any) -> Any:
        buf = fn()
        placed[i] = int(buf.ctypes.data)
        return buf

    devs = {i: NumpyDevice(i) for i in range(3)}
    got = pcie.all_at_once(devs, "d2h", FAST, nbytes=1 << 14, place=place)
    assert sorted(got) == sorted(placed) == [0, 1, 2]
    for m in got.values():
        assert m.params["gpus_at_once"] == 3
        assert m.params["direction"] == "d2h"
        assert len(m.samples) == 3
    with pytest.raises(ValueError, match="h2d or d2h"):
        pcie.all_at_once(devs, "sideways", FAST, nbytes=16)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning to a NUMA node needs two CPUs to tell apart")
def test_the_runner_records_pcie_all_at_once_beside_one_at_a_time() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    gpus = eight_gpus()[:2]
    gpus[0].cpus, gpus[1].cpus = {cpus[-1]}, {cpus[0]}
    where: dict[int, set[int]] = {}

    class Watching(NumpyDevice):
        def host_pinned(self, nbytes: int) -> Any:
            where.setdefault(self.index, os.sched_getaffinity(0))
            return super().host_pinned(nbytes)

    ev = run_plan(plan(2, ["pcie"]), nvml=fake_nvml(*gpus), open_device=Watching)
    for g in ev.gpus:
        assert {"pcie.h2d", "pcie.d2h", "pcie.h2d.concurrent", "pcie.d2h.concurrent"} <= set(g.measurements)
        assert g.measurements["pcie.h2d.concurrent"].params["gpus_at_once"] == 2
    assert where == {0: {cpus[-1]}, 1: {cpus[0]}}
    assert ev.errors == []


def test_a_failed_concurrent_copy_is_recorded_and_leaves_the_judged_figures_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    together: list[bool] = []

    def marked(*args: Any) -> Any:
        together.append(True)
        return time_together(*args)

    monkeypatch.setattr(pcie, "time_together", marked)

    class Flaky(NumpyDevice):
        def h2d(self, dst: Any, src: Any) -> None:
            if self.index == 1 and together:  # GPU 1 fails only while every GPU copies
                raise RuntimeError("cudaErrorLaunchFailure")
            super().h2d(dst, src)

    ev = run_plan(plan(2, ["pcie"]), nvml=fake_nvml(*eight_gpus()[:2]), open_device=Flaky)
    assert ev.error_for("pcie", 1, "pcie.h2d") is None  # the judged figures stand
    assert "pcie.h2d" in ev.gpus[1].measurements
    err = ev.error_for("pcie", 1, "pcie.h2d.concurrent")
    assert err is not None
    assert "cudaErrorLaunchFailure" in err.message
    assert "pcie.d2h.concurrent" in ev.gpus[1].measurements  # the other direction still measured


def test_p2p_both_ways_at_once_per_unordered_pair_from_separate_buffers() -> None:
    devs = [NumpyDevice(i) for i in range(3)]
    ev = p2p.peer_matrix(devs, FAST, nbytes=1 << 12)
    assert sorted((q.src, q.dst) for q in ev.pairs) == [(i, j) for i in range(3) for j in range(3) if i != j]
    assert [(q.src, q.dst) for q in ev.bidirectional] == [(0, 1), (0, 2), (1, 2)]
    assert all(len(q.samples) == 3 and q.error is None for q in ev.bidirectional)


def test_bidirectional_bandwidth_counts_both_directions() -> None:
    class Fixed(NumpyDevice):
        def elapsed_s(self, start: Any, end: Any) -> float:
            return 0.001 if self.index == 0 else 0.002

        def peer_copy(self, dst_device: Any, dst: Any, src: Any) -> None:
            assert dst is not src
            super().peer_copy(dst_device, dst, src)

    ev = p2p.peer_matrix([Fixed(0), Fixed(1)], FAST, nbytes=1 << 12)
    (both,) = ev.bidirectional
    assert both.samples[0] == pytest.approx(((1 << 12) / 0.001 + (1 << 12) / 0.002) / 1e9)
    assert ev.params["bidirectional"] == "both ways at once, GB/s summed"


def test_a_hung_bidirectional_pair_is_that_pairs_error() -> None:
    from gpucert.measure.probes.watchdog import ProbeTimeout

    def run(fn: Any, what: str) -> Any:
        if "<->" in what and what.endswith("0<->1"):
            raise ProbeTimeout(f"{what} did not finish")
        return fn()

    ev = p2p.peer_matrix([NumpyDevice(i) for i in range(3)], FAST, nbytes=1 << 12, run=run)
    by_pair = {(q.src, q.dst): q for q in ev.bidirectional}
    assert by_pair[(0, 1)].error == "p2p 0<->1 did not finish"
    assert by_pair[(0, 2)].error == "GPU 0: hung in the copy 0<->1"  # either end may be wedged
    assert by_pair[(1, 2)].error == "GPU 1: hung in the copy 0<->1"


def test_source_buffers_are_not_overwritten_by_the_reverse_copy() -> None:
    seen: list[tuple[int, int]] = []

    class Checking(NumpyDevice):
        def peer_copy(self, dst_device: Any, dst: Any, src: Any) -> None:
            seen.append((id(dst), id(src)))
            super().peer_copy(dst_device, dst, src)

    devs = [Checking(0), Checking(1)]
    p2p.peer_matrix(devs, FAST, nbytes=1 << 12)
    both = seen[-2:]  # the last repetition of 0<->1: neither copy writes what the other reads
    assert both[0][0] != both[1][1]
    assert both[1][0] != both[0][1]
