"""The controller's read of probe pod logs against the fake API (probe output version 2): one GET per pod with
limitBytes, stderr lines between frames allowed, a log the kubelet rotated refused with a finding naming the pod,
the node and the record, and a log over the read limit refused rather than judged on its first part."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from gpucert.measure.probes import framing

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .test_probe_jobs import measure


def log_reads(cluster: FakeCluster) -> list[tuple[str, dict[str, list[str]]]]:
    out = []
    for method, path in cluster.requests:
        url = urlsplit(path)
        if method == "GET" and url.path.endswith("/log"):
            out.append((url.path.split("/")[-2], parse_qs(url.query)))
    return out


def test_logs_are_read_once_with_limit_bytes_and_rotation_is_refused(cluster: FakeCluster, tmp_path: Path) -> None:
    kubelet = FakeKubelet(cluster, behaviour={"gpu-03": "rotated", "gpu-07": "stderr"}).start()
    try:
        _, ev, _ = measure(tmp_path)
    finally:
        kubelet.close()
    reads = log_reads(cluster)
    assert len(reads) == 16  # one read per pod
    assert {q["limitBytes"][0] for _, q in reads} == {str(framing.READ_LIMIT)}
    rotated = ev.reachable("gpu-03")
    assert rotated.status.value == "fail"
    named = re.search(r"the evidence in the log of pod (\S+) on gpu-03 is unusable", rotated.message)
    assert named is not None
    assert named[1] in {pod for pod, _ in reads}
    assert "the log begins at record 2" in rotated.message
    assert "rotated the container log" in rotated.message
    assert ev.reachable("gpu-07").status.value == "pass"  # whole stderr lines between frames are other output
    assert sum(ev.reachable(f"gpu-{i:02d}").status.value == "pass" for i in range(1, 17)) == 15


def test_a_log_longer_than_the_read_is_refused(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(framing, "READ_LIMIT", 2048)  # what the controller asks for and stops at
    kubelet = FakeKubelet(cluster).start()
    try:
        _, ev, _ = measure(tmp_path)
    finally:
        kubelet.close()
    assert {q["limitBytes"][0] for _, q in log_reads(cluster)} == {"2048"}
    message = ev.reachable("gpu-01").message
    assert "longer than the" in message
    assert "(limitBytes)" in message
