"""Frames in a pod log: the last document wins, a forged or cut frame never does, and a probe killed half-way
keeps every part it had finished (streamed by the real probe command, killed for real)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.probes.framing import FramingError, frame, parts, unframe
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.measure.probes.stream import framer, rebuild


def doc(node: str) -> str:
    return json.dumps({"node": node, "schema": "gpucert.io/evidence/v1"})


def test_an_earlier_forged_document_never_wins() -> None:
    log = "probe: starting\n" + frame(doc("forged")) + "probe: measuring\n" + frame(doc("real"))
    assert json.loads(unframe(log))["node"] == "real"


def test_a_forged_header_cannot_swallow_the_real_frame() -> None:
    forged_header = "gpucert-evidence-begin bytes=100000 sha256=" + "0" * 64 + "\n"
    log = forged_header + frame(doc("real"))
    assert json.loads(unframe(log))["node"] == "real"


def test_a_header_inside_a_body_is_not_a_frame() -> None:
    inner = frame(doc("inner"))  # text a probe measured (a tool's output) that looks like a frame
    body = json.dumps({"node": "real", "note": inner})
    assert json.loads(unframe(frame(body)))["node"] == "real"


@pytest.mark.parametrize(
    ("log", "why"),
    [
        (frame(doc("forged")) + frame(doc("real"))[:-15], "no end marker"),
        (frame(doc("forged")) + frame(doc("real"))[:60], "truncated"),
        (frame(doc("forged")) + frame(doc("real")).replace("real", "fake"), "does not match its sha256"),
        (frame(doc("real")) + frame(doc("more"), key="gpu/0"), "a frame follows the evidence document"),
        ("probe: starting\n", "no evidence frame"),
    ],
)
def test_the_last_document_must_be_whole_and_last(log: str, why: str) -> None:
    with pytest.raises(FramingError, match=why):
        unframe(log)


def test_each_parts_last_complete_frame_counts() -> None:
    log = (
        frame('{"v": 1}', key="gpu/0/memory.bandwidth")
        + frame('{"v": 2}', key="gpu/0/memory.bandwidth")
        + frame('{"v": 3}', key="gpu/0/memory.bandwidth")[:-30]  # cut: the one before stands
        + frame('{"v": 9}', key="nccl")
    )
    assert parts(log) == {"gpu/0/memory.bandwidth": '{"v": 2}', "nccl": '{"v": 9}'}


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
    cut = "".join(log[: next(i for i, f in enumerate(log) if "key=gpu/1/memory.bandwidth" in f) + 1])
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
        if out[-1].startswith("gpucert-evidence-end") and "key=gpu/0/memory.bandwidth" in out[-3]:
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
