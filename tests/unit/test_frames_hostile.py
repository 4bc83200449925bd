"""Hostile and broken pod logs against the frame reader (probe output version 2), and the writer's bounds.

What the real stack does to a log, and where that is written down:
- containerd splits a line longer than max_container_log_line_size (16 KiB by default: containerd v2
  internal/cri/config/config_unix.go at 01cca8cc, DefaultRuntimeConfig, `MaxContainerLogLineSize: 16 * 1024`) into
  partial (P) records, and the kubelet serves them joined with stdout and stderr in one stream (kubernetes
  pkg/kubelet/kuberuntime/logs/logs.go at 04791b49: parseCRILog trims a partial line's newline; ReadLogs writes
  both streams to the response): a line of another
  stream can land inside a split line. Frames are at most LINE_MAX (4 KiB) so no runtime splits one; a splice
  that happens anyway is refused.
- the kubelet rotates a container log past containerLogMaxSize (10Mi by default, kubernetes 1.30 and later:
  pkg/kubelet/apis/config/v1beta1/defaults.go) and serves only the current file (logs.go: "It will not retrieve
  logs in rotated log file"): the log begins part-way, at a line boundary.
- limitBytes: "may return slightly more or slightly less than the specified limit" (PodLogOptions, kubernetes
  python client 37.0.2, CoreV1Api.read_namespaced_pod_log); the kubelet cuts the line that passes it
  (logs.go, logWriter.write).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import tracemalloc
import zlib

import pytest

from gpucert.measure.probes import framing
from gpucert.measure.probes.framing import (
    DOCUMENT,
    LINE_MAX,
    LOG_BUDGET,
    Framer,
    FrameReader,
    FramingError,
    read_log,
    unframe,
)


def noise(n: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return json.dumps([rng.random() for _ in range(n)])


def written(*records: tuple[str, str], budget: int = LOG_BUDGET) -> tuple[str, Framer]:
    out: list[str] = []
    framed = Framer(out.append, budget=budget)
    for key, text in records:
        framed.emit(key, text, final=key == DOCUMENT)
    return "".join(out), framed


def raw_frame(rec: int, key: str, part: int, total: int, chunk: bytes) -> str:
    """A frame line with a true sha256 of its own payload: what a forger or a broken writer can produce."""
    digest = hashlib.sha256(chunk).hexdigest()
    data = base64.b64encode(chunk).decode()
    return f"gpucert-frame/2 rec={rec} key={key} part={part}/{total} sha256={digest} data={data}\n"


DOC = json.dumps({"node": "n1", "samples": noise(3000)})
LOG, _ = written(("node", "{}"), ("gpu/0/memory.bandwidth", noise(3000, 2)), (DOCUMENT, DOC))
LINES = LOG.splitlines(keepends=True)


def test_a_log_that_claims_a_billion_frames_is_refused_at_once() -> None:
    claim = raw_frame(0, DOCUMENT, 0, 10**9, b"x")
    reader = FrameReader()
    tracemalloc.start()
    for _ in range(1000):
        reader.feed(claim.encode())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20  # nothing sized by the claim
    with pytest.raises(FramingError, match=r"frame 1 of 1000000000 of record 0 \(document\) claims 1000000000 frames"):
        reader.close().document()


def test_a_frame_100_mib_long_is_refused_in_bounded_memory() -> None:
    reader = FrameReader(limit=1 << 30)
    block = b"A" * (64 << 10)
    tracemalloc.start()
    reader.feed(b"gpucert-frame/2 rec=0 key=document part=0/1 sha256=" + b"0" * 64 + b" data=")
    for _ in range(1600):  # 100 MiB, as the API streams it
        reader.feed(block)
    reader.feed(b"\n" + LOG.encode())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 20  # the long line is dropped as it arrives, never held
    with pytest.raises(FramingError, match=f"a frame line is longer than {LINE_MAX} bytes"):
        reader.close().document()


def test_whole_stderr_lines_between_frames_are_other_output() -> None:
    stderr = "NCCL WARN some warning the library printed\n"
    log = "".join(line + stderr for line in LINES)
    assert unframe(log) == DOC


def test_stderr_spliced_inside_a_frame_line_is_refused() -> None:
    # a runtime split the frame line into partial records and the kubelet joined a stderr line into it
    line = LINES[3]
    spliced = line[:1000] + "NCCL WARN inside\n" + line[1000:]
    with pytest.raises(FramingError, match=r"frame \d+ of \d+ of record 1 \(gpu/0/memory.bandwidth\) is not base64"):
        unframe("".join(LINES[:3]) + spliced + "".join(LINES[4:]))


def test_a_frame_spliced_inside_a_stderr_line_is_refused() -> None:
    log = "".join(LINES[:3]) + "NCCL WARN half a line " + "".join(LINES[3:])
    with pytest.raises(FramingError, match="bytes that are not a frame precede a frame on its line"):
        unframe(log)


def test_a_log_rotated_by_the_kubelet_is_refused() -> None:
    at = next(i for i, line in enumerate(LINES) if " rec=2 " in line)
    rotated = "".join(LINES[at:])  # the current file: the first lines went with the rotated one, whole lines
    with pytest.raises(FramingError, match=r"records 0 to 1 are missing: the log begins at record 2 .*rotated"):
        unframe(rotated)


def test_a_lost_frame_or_record_in_the_middle_is_refused() -> None:
    at = next(i for i, line in enumerate(LINES) if " rec=1 " in line)
    with pytest.raises(FramingError, match=r"record 1 \(gpu/0/memory.bandwidth\) lacks frame 1 of"):
        unframe("".join(LINES[:at] + LINES[at + 1 :]))
    without_rec_1 = "".join(line for line in LINES if " rec=1 " not in line)
    with pytest.raises(FramingError, match="record 1 is missing"):
        unframe(without_rec_1)


def test_a_frame_twice_with_different_payloads_is_refused_and_an_exact_repeat_is_not() -> None:
    assert unframe(LINES[0] + LOG) == DOC  # the same frame twice: the same payload
    other = raw_frame(0, "node", 0, 1, zlib.compress(b'{"node": "forged"}'))
    with pytest.raises(FramingError, match=r"frame 1 of 1 of record 0 \(node\) appears twice with different payloads"):
        unframe(other + LOG)


def test_a_log_cut_by_limit_bytes_is_refused() -> None:
    reader = FrameReader(limit=len(LOG) // 2)
    reader.feed(LOG.encode()[: reader.limit])
    with pytest.raises(FramingError, match=r"longer than the .* read \(limitBytes\)"):
        reader.close().document()


def test_a_record_that_decompresses_past_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert framing.MAX_RECORD_BYTES == 64 << 20  # the bound; the test holds it to 1 MiB to stay fast
    monkeypatch.setattr(framing, "MAX_RECORD_BYTES", 1 << 20)
    bomb = zlib.compress(b"\0" * ((1 << 20) + 1), 9)  # 1 KiB that inflates past the bound
    log = raw_frame(0, DOCUMENT, 0, 1, bomb)
    with pytest.raises(FramingError, match="record 0 \\(document\\) decompresses past 1 MiB"):
        unframe(log)


def test_another_version_is_named() -> None:
    v1 = "gpucert-evidence-begin bytes=2 sha256=" + "0" * 64 + "\n{}\ngpucert-evidence-end\n"
    with pytest.raises(FramingError, match=r"probe output version 1 .* the probe image is older than this gpucert"):
        unframe(v1)
    with pytest.raises(FramingError, match="a frame of version 3: this gpucert reads probe output version 2"):
        unframe(LOG.replace("gpucert-frame/2", "gpucert-frame/3"))


def test_chunks_cut_anywhere_read_the_same() -> None:
    rng = random.Random(3)
    data, at = LOG.encode(), 0
    reader = FrameReader()
    while at < len(data):
        step = rng.randint(1, 5000)
        reader.feed(data[at : at + step])
        at += step
    assert reader.close().document() == DOC


def test_every_frame_line_fits_one_atomic_pipe_write() -> None:
    long_key = "gpu/7/" + "x" * 120  # the longest key a frame takes
    log, _ = written((long_key, noise(5000)), (DOCUMENT, DOC))
    assert max(len(line.encode()) for line in log.splitlines(keepends=True)) <= LINE_MAX
    with pytest.raises(ValueError, match="not a frame key"):
        written(("gpu/0/" + "x" * 130, "{}"))


def test_a_fleet_scale_nodes_evidence_fits_one_log_with_room() -> None:
    # 8 GPUs x 12 metrics x 100 samples (the probe's max_reps), each written as a part and again in the document,
    # and 256 KiB of DCGM's raw JSON: about a fifth of the budget
    gpus = {f"gpu/{g}/m{m}": noise(100, seed=g * 100 + m) for g in range(8) for m in range(12)}
    dcgm = json.dumps({"raw": noise(12_000, seed=99)})
    document = json.dumps({"gpus": gpus, "dcgm": dcgm})
    log, framed = written(*gpus.items(), ("dcgm", dcgm), (DOCUMENT, document))
    assert not framed.overflowed
    assert framed.used < LOG_BUDGET // 4
    assert unframe(log) == document


def test_evidence_over_the_budget_says_so_and_is_never_cut() -> None:
    big = noise(60_000)  # about 0.7 MB framed
    log, framed = written(("node", "{}"), (DOCUMENT, big), budget=256 << 10)
    assert framed.overflowed
    with pytest.raises(FramingError, match=r'did not fit one pod log, so it was not written: .*"key": "document"'):
        unframe(log)
    found = read_log(log)
    assert [r.key for r in found.records.values()] == ["node", "overflow"]  # no half document
    assert '"key": "document"' in found.parts()["overflow"]


def test_parts_past_half_the_budget_leave_room_for_the_document() -> None:
    parts = [(f"gpu/{i}/memory.bandwidth", noise(6000, seed=i)) for i in range(6)]
    document = json.dumps({"node": "n1"})
    log, framed = written(*parts, (DOCUMENT, document), budget=256 << 10)
    assert framed.overflowed  # the later parts were not written, and the log says so once
    assert log.count("key=overflow") == 1
    assert unframe(log) == document
    found = read_log(log).parts()
    assert "gpu/0/memory.bandwidth" in found
    assert "gpu/5/memory.bandwidth" not in found


def test_a_garbled_frame_header_is_refused_and_a_long_stderr_line_is_not() -> None:
    garbled = "gpucert-frame/2 rec=zero key=document part=0/1\n"
    with pytest.raises(FramingError, match="a frame line does not parse"):
        unframe(garbled + LOG)
    long_stderr = "E" * (1 << 20) + "\n"  # a library's megabyte of output on one line: other output, dropped
    found = read_log(LINES[0] + long_stderr + "".join(LINES[1:]))
    assert found.document() == DOC
    assert found.tail == ["E" * 200 + "..."]


def test_other_output_costs_no_memory_beyond_the_tail() -> None:
    # 4 MiB of a library's output before the frames, streamed in 64 KiB chunks: held are the frames and 5 lines
    chatter = b"".join(b"I1205 nccl.cc:%d] NCCL INFO ring %d\n" % (i, i) for i in range(2000))
    reader = FrameReader(limit=1 << 30)
    tracemalloc.start()
    for _ in range((4 << 20) // len(chatter)):
        for at in range(0, len(chatter), 64 << 10):
            reader.feed(chatter[at : at + (64 << 10)])
    reader.feed(LOG.encode())
    found = reader.close()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert found.document() == DOC
    assert peak < 2 << 20
