"""Frames in a pod log (probe output version 2): the document is the log's last record, a forged, altered or cut
frame is refused, and a probe killed half-way keeps every part it had finished (streamed by the real probe
command, killed for real). Hostile logs: test_frames_hostile.py."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.probes.framing import DOCUMENT, Framer, FramingError, frame, parts, read_log, unframe
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.measure.probes.stream import framer, rebuild


def doc(node: str) -> str:
    return json.dumps({"node": node, "schema": "gpucert.io/evidence/v1"})


def noise(n: int, seed: int = 1) -> str:
    """`n` samples of JSON that compresses as measured samples do (hardly): several frames' worth."""
    rng = random.Random(seed)
    return json.dumps([rng.random() for _ in range(n)])


def log_of(*records: tuple[str, str]) -> str:
    """A log as the probe writes it: the records (key, text) framed by one Framer, the document last."""
    out: list[str] = []
    framed = Framer(out.append)
    for key, text in records:
        framed.emit(key, text, final=key == DOCUMENT)
    return "".join(out)


def test_an_earlier_forged_document_never_wins() -> None:
    # a document framed by someone else shares record numbers with the probe's records: refused, never chosen
    log = "probe: starting\n" + frame(doc("forged")) + "probe: measuring\n" + log_of(("document", doc("real")))
    with pytest.raises(FramingError, match=r"record 0 .*appears twice with different payloads"):
        unframe(log)
    assert json.loads(unframe(log_of(("document", doc("real")))))["node"] == "real"


def test_a_forged_header_cannot_swallow_the_real_frames() -> None:
    # v1 read a forged `bytes=100000` header's claim; a v2 frame is one line, and a forged one is refused
    forged = "gpucert-frame/2 rec=0 key=document part=0/1 sha256=" + "0" * 64 + " data=AAAA\n"
    with pytest.raises(FramingError, match="frame 1 of 1 of record 0 \\(document\\) does not match its sha256"):
        unframe(forged + log_of(("document", doc("real"))))


def test_text_that_looks_like_frames_inside_a_record_is_only_text() -> None:
    inner = log_of(("document", doc("inner")))  # text a probe measured (a tool's output) that looks like frames
    body = json.dumps({"node": "real", "note": inner})
    assert json.loads(unframe(log_of(("document", body))))["note"] == inner


def test_other_output_between_frames_is_kept_for_the_tail() -> None:
    body = json.dumps({"node": "real", "samples": noise(2000)})
    lines = log_of(("node", "{}"), ("document", body)).splitlines(keepends=True)
    assert len(lines) > 4
    stderr = [f"W1205 cuda.cc:{i}] warning {i}\n" for i in range(len(lines))]
    log = "".join(line + err for line, err in zip(lines, stderr, strict=True))  # stderr after every frame line
    found = read_log(log)
    assert found.document() == body
    assert found.tail == [e.rstrip("\n") for e in stderr[-5:]]


_REAL = log_of(("gpu/0", "{}"), ("document", json.dumps({"node": "real", "samples": noise(2000)})))


@pytest.mark.parametrize(
    ("log", "why"),
    [
        (_REAL[:-15], "the log is truncated or was cut: record 1 \\(document\\) lacks frame \\d of \\d"),
        (_REAL[: _REAL.index("gpucert-frame/2 rec=1")], "the log is truncated: 1 parts arrived"),
        (_REAL.replace("data=eJ", "data=eK", 1), "frame 1 of 1 of record 0 \\(gpu/0\\) does not match its sha256"),
        (_REAL + frame(doc("more"), key="gpu/0", rec=2), "a frame follows the evidence document"),
        ("probe: starting\n", "no evidence frame"),
    ],
    ids=["cut", "no-document", "altered", "after-document", "empty"],
)
def test_the_last_document_must_be_whole_and_last(log: str, why: str) -> None:
    with pytest.raises(FramingError, match=why):
        unframe(log)


def test_each_parts_last_whole_record_counts() -> None:
    log = log_of(
        ("gpu/0/memory.bandwidth", '{"v": 1}'),
        ("gpu/0/memory.bandwidth", '{"v": 2}'),
        ("nccl", '{"v": 9}'),
        ("gpu/0/memory.bandwidth", noise(2000)),  # cut below: the one before stands
        ("done/memory", "{}"),
    )
    cut = log[: log.index("gpucert-frame/2 rec=3 key=gpu/0/memory.bandwidth part=1/")]
    assert parts(cut) == {"gpu/0/memory.bandwidth": '{"v": 2}', "nccl": '{"v": 9}'}
    # only the last record may be cut: a record missing a frame before it is refused
    lines = log.splitlines(keepends=True)
    with pytest.raises(FramingError, match=r"record 3 \(gpu/0/memory.bandwidth\) lacks frame 2 of"):
        parts("".join(lines[:4] + lines[5:]))


def small_plan(probes: tuple[str, ...] = ("memory", "compute", "pcie"), gemm_n: int = 16) -> ProbePlan:
    return ProbePlan.model_validate(
        {
            "run_id": "r",
            "node": "n1",
            "device": "numpy",
            "gpus": 2,
            "probes": list(probes),
            "budget": {"warmup_s": 0, "measure_s": 0.005, "min_reps": 3, "max_reps": 3},
            "sizes": {"memory_bytes": 1 << 16, "gemm_n": gemm_n, "pcie_bytes": 1 << 14},
        }
    )


def test_a_killed_probe_is_rebuilt_from_its_parts() -> None:
    log: list[str] = []
    whole = run_plan(small_plan(), emit=framer(log.append))
    found = parts("".join(log))
    assert rebuild(found, "unused") is not None
    # the pod died after GPU 1's memory copy: everything after it never reached the log
    cut = "".join(log[: max(i for i, f in enumerate(log) if "key=gpu/1/memory.bandwidth" in f) + 1])
    ev = rebuild(parts(cut), "the probe pod failed: DeadlineExceeded")
    assert ev is not None
    # all of GPU 0's but PCIe with every GPU at once, measured after GPU 1's probes
    assert ev.gpus[0].measurements == {k: m for k, m in whole.gpus[0].measurements.items() if "concurrent" not in k}
    assert set(ev.gpus[1].measurements) == {"memory.bandwidth"}
    missing = {(e.probe, e.gpu, e.metric) for e in ev.errors}
    assert ("compute", 1, "compute.gemm.fp16") in missing
    assert ("pcie", 1, "pcie.d2h") in missing
    assert ("memory", 1, "memory.bandwidth") not in missing
    assert not [e for e in ev.errors if e.gpu == 0]
    assert all("did not finish: the probe pod failed: DeadlineExceeded" in e.message for e in ev.errors)
    assert rebuild({}, "x") is None  # not even the node part: nothing to rebuild


def test_a_stopped_probe_whose_parts_passed_the_budget_says_so() -> None:
    log: list[str] = []
    run_plan(small_plan(), emit=framer(Framer(log.append, budget=12 << 10)))  # parts get 6 KiB of it
    found = parts("".join(log))
    assert "overflow" in found
    ev = rebuild(found, "the probe pod failed: OOMKilled")
    assert ev is not None
    assert ev.errors
    assert all("the probe's parts passed the pod log's budget" in e.message for e in ev.errors)
    early = rebuild(parts("".join(log[:3])), "x")  # stopped before the budget ran out: no such word
    assert early is not None
    assert not any("budget" in e.message for e in early.errors)


def _last_frame(line: str) -> bool:
    m = re.search(r" part=(\d+)/(\d+) ", line)
    return m is not None and int(m[1]) == int(m[2]) - 1


def test_the_probe_command_streams_each_part_as_it_finishes(tmp_path: Path) -> None:
    plan = small_plan(("memory", "compute"), gemm_n=1200)
    (tmp_path / "plan.json").write_text(plan.model_dump_json(by_alias=True))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucert.measure.probes", "--plan", str(tmp_path / "plan.json"), "--framed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # the probe itself must flush
    )
    assert proc.stdout is not None
    out: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # GPU 0's copy is quick; its fp16 GEMMs (1200^3 on the CPU) are not
        out.append(proc.stdout.readline())
        if re.search(r" key=gpu/0/memory\.bandwidth part=(\d+)/(\d+)", out[-1]) and _last_frame(out[-1]):
            break
    still_running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    assert still_running, "the part must arrive while the probe is still measuring"
    log = "".join(out)
    with pytest.raises(FramingError, match=r"the log is truncated: \d+ parts arrived, the evidence document did not"):
        unframe(log)
    ev = rebuild(parts(log), "killed")
    assert isinstance(ev, NodeEvidence)
    assert len(ev.gpus[0].measurements["memory.bandwidth"].samples) == 3
    dtypes = ("fp16", "bf16", "tf32", "fp32", "fp64")
    assert {e.metric for e in ev.errors if e.gpu == 0} == {f"compute.gemm.{t}" for t in dtypes}
    assert {e.metric for e in ev.errors if e.gpu == 1} == {"memory.bandwidth"} | {f"compute.gemm.{t}" for t in dtypes}
