"""A node whose probe pod fails its preflight (issue 21, item 16) gives exactly one finding, `probe.preflight`,
naming the cause and the fix; its measured checks skip with it as their cause, never one error per metric."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import fleet_doc


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ("kernel", "Failed to find CUDA headers (fix: put the CUDA headers CuPy compiles with in the image"),
        ("nvml", "NVMLError_LibraryNotFound: NVML Shared Library Not Found (fix: libnvidia-ml.so.1 is not in"),
        ("dcgmi", "No such file or directory: 'dcgmi' (fix: install DCGM 4 in the probe image"),
    ],
)
def test_a_failed_preflight_is_the_nodes_one_finding(certify: Any, step: str, words: str) -> None:
    run = certify(fleet_doc([{"kind": "preflight", "node": "gpu-node-2", "step": step}]))
    v = run.verdict
    assert run.findings == {("probe.preflight", "gpu-node-2", None)}, v["findings"]
    (finding,) = v["findings"]
    assert finding["status"] == "fail"
    assert words in finding["message"]
    assert v["result"] == "fail"
    assert v["summary"]["errors"] == 0  # no per-metric error on the node, nor on its peers
    node = v["nodes"]["gpu-node-2"]
    assert node["failed"] == 1
    assert node["skipped"] >= 8 * 18  # every per-GPU check of the node followed from the preflight
    report = run.result.stdout.str()
    assert "probe.preflight" in report


def test_an_unreachable_node_is_node_reachable_not_its_preflight(certify: Any) -> None:
    run = certify(fleet_doc([{"kind": "unreachable", "node": "gpu-node-4"}]))
    assert ("probe.preflight", "gpu-node-4", None) not in run.findings  # skipped: node.reachable is the finding
    assert ("node.reachable", "gpu-node-4", None) in run.findings
    assert {f[1] for f in run.findings} == {"gpu-node-4"}
