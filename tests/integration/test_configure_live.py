"""The configure suite through the real `kubernetes` client against a fake API server, and the same faults
injected into a simulated fleet giving the same findings."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.cli import main as cli
from gpucert.measure.targets.kubernetes.target import KubernetesTarget
from gpucert.spec.cluster import load_spec
from gpucert.stack.observe import observe_stack

from .conftest import FakeKubeApi, cluster_policy, point_kubeconfig
from .gpu_operator import VERSIONS, install, node
from .rbac import grants

ROOT = Path(__file__).resolve().parents[2]
GPU_NODES = ["gpu-1", "gpu-2", "gpu-3"]
EXPECTED = {
    ("stack.version", "gpu-1", None),  # no dcgm-exporter pod
    ("stack.version", "gpu-2", None),  # driver skew: 570.86.15 against the pin
    ("stack.ordering", "gpu-3", None),  # device plugin up before the toolkit was Ready
    ("inventory.gpus", "gpu-3", None),  # 8 GPUs labelled, 7 allocatable
}


def spec_doc(target: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "live-h100"},
        "target": target,
        "expect": {"nodes": 3, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
        "stack": {
            "components": [
                {"name": "driver", "version": VERSIONS["driver"]},
                {"name": "cuda", "version": "12.8"},
                {"name": "container-toolkit", "version": VERSIONS["container-toolkit"], "after": ["driver"]},
                {"name": "device-plugin", "version": VERSIONS["device-plugin"], "after": ["container-toolkit"]},
                {
                    "name": "gpu-feature-discovery",
                    "version": VERSIONS["gpu-feature-discovery"],
                    "after": ["container-toolkit"],
                },
                {"name": "dcgm-exporter", "version": VERSIONS["dcgm-exporter"], "after": ["device-plugin"]},
            ],
            "kubernetes": {"minVersion": "1.30"},
            "containerRuntime": {"name": "containerd", "minVersion": "1.7.0"},
        },
        "certify": {"baseline": str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"), "dcgm": {"level": 2}},
    }


def faulty_cluster(api: FakeKubeApi) -> None:
    api.nodes = [
        node("gpu-1"),
        node("gpu-2", driver="570.86.15"),
        node("gpu-3", allocatable=7),
        node("cpu-1", gpu=False),
    ]
    api.pods = install(
        GPU_NODES,
        versions={"gpu-2": {"driver": "570.86.15"}},
        early={"gpu-3": ("device-plugin", "container-toolkit")},
        missing={"gpu-1": {"dcgm-exporter"}},
    )
    api.cluster_policies = [cluster_policy("ready")]


def configure(pytester: pytest.Pytester, spec: dict[str, Any]) -> tuple[pytest.RunResult, dict[str, Any], Path]:
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = pytester.runpytest(
        str(ROOT / "suites" / "configure"),
        "--spec",
        str(pytester.path / "spec.yaml"),
        "--reports",
        str(pytester.path / "reports"),
        "--no-measure",
        "-p",
        "no:cacheprovider",
    )
    (run,) = (pytester.path / "reports").iterdir()
    return result, json.loads((run / "verdict.json").read_text()), run


def findings(verdict: dict[str, Any]) -> set[tuple[str, str | None, int | None]]:
    return {(f["check"], f["node"], f["gpu"]) for f in verdict["findings"]}


def test_live_configure_finds_exactly_the_faults(fake_api: FakeKubeApi, pytester: pytest.Pytester) -> None:
    faulty_cluster(fake_api)
    result, verdict, run = configure(pytester, spec_doc({"kind": "kubernetes", "context": "fake"}))
    assert findings(verdict) == EXPECTED, [f["message"] for f in verdict["findings"]]
    assert verdict["target"] == "kubernetes"
    msgs = {(f["check"], f["node"]): f["message"] for f in verdict["findings"]}
    assert "no dcgm-exporter pod" in msgs[("stack.version", "gpu-1")]
    assert "570.86.15" in msgs[("stack.version", "gpu-2")]
    assert "8 labelled, 7 allocatable" in msgs[("inventory.gpus", "gpu-3")]
    stack = json.loads((run / "stack.json").read_text())
    assert sorted(stack["nodes"]) == GPU_NODES  # the CPU node is not selected
    assert stack["cluster_policy"] == {"name": "cluster-policy", "state": "ready"}
    selectors = {a.get("labelSelector") for p, a in fake_api.requests if p == "/api/v1/nodes"}
    assert selectors == {"nvidia.com/gpu.present=true"}
    result.assert_outcomes(failed=4, passed=verdict["summary"]["passed"], skipped=verdict["summary"]["skipped"])


def test_the_same_faults_in_a_simulated_fleet_give_the_same_findings(pytester: pytest.Pytester) -> None:
    fleet = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "same-faults"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": 3, "namePrefix": "gpu-", "gpusPerNode": 8},
        "stack": {"container-toolkit": VERSIONS["container-toolkit"]},
        "faults": [
            {"kind": "missing-component", "node": "gpu-1", "component": "dcgm-exporter"},
            {"kind": "version", "node": "gpu-2", "component": "driver", "version": "570.86.15"},
            {"kind": "ordering", "node": "gpu-3", "component": "device-plugin", "before": "container-toolkit"},
            {"kind": "unhealthy-gpu", "node": "gpu-3", "gpu": 5},
        ],
    }
    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    _, verdict, _ = configure(pytester, spec_doc({"kind": "simulated", "fleet": "fleet.yaml"}))
    assert findings(verdict) == EXPECTED, [f["message"] for f in verdict["findings"]]


def test_lists_are_paginated(fake_api: FakeKubeApi, tmp_path: Path) -> None:
    names = [f"gpu-{i:04d}" for i in range(5000)]
    fake_api.nodes = [node(n) for n in names]
    fake_api.pods = install(names[:3])
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec_doc({"kind": "kubernetes", "context": "fake"})))
    target = KubernetesTarget.from_spec(load_spec(tmp_path / "spec.yaml"))
    stack = observe_stack(*target.observe(), target.spec.stack.sources())
    assert len(stack.nodes) == 5000
    node_calls = [a for p, a in fake_api.requests if p == "/api/v1/nodes"]
    assert len(node_calls) == 10
    assert all(a["limit"] == "500" for a in node_calls)
    assert [a.get("continue") for a in node_calls] == [None] + [str(500 * k) for k in range(1, 10)]


def test_server_errors_are_retried(fake_api: FakeKubeApi, pytester: pytest.Pytester) -> None:
    faulty_cluster(fake_api)
    fake_api.fail("nodes", 500, times=2)
    _, verdict, _ = configure(pytester, spec_doc({"kind": "kubernetes", "context": "fake"}))
    assert findings(verdict) == EXPECTED
    assert sum(p == "/api/v1/nodes" for p, _ in fake_api.requests) == 3


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], target: dict[str, Any]) -> tuple[int, str]:
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec_doc(target)))
    code = cli.main(["configure", str(tmp_path / "spec.yaml"), "--reports", str(tmp_path / "reports")])
    return code, capsys.readouterr().err


def test_forbidden_node_list_exits_2_with_the_rbac_hint(
    fake_api: FakeKubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    faulty_cluster(fake_api)
    fake_api.fail(
        "nodes",
        403,
        message='nodes is forbidden: User "system:serviceaccount:gpucert:gpucert" cannot '
        'list resource "nodes" in API group "" at the cluster scope',
    )
    code, err = run_cli(tmp_path, capsys, {"kind": "kubernetes", "context": "fake"})
    assert code == 2
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "cannot list nodes" in line
    assert "forbidden for user gpucert-ci of context fake" in line
    assert 'User "system:serviceaccount:gpucert:gpucert"' in line
    assert "deploy/rbac.yaml" in line


def test_unreachable_api_exits_3_naming_the_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    endpoint = f"http://127.0.0.1:{port}"
    point_kubeconfig(tmp_path, monkeypatch, endpoint, context="down")
    code, err = run_cli(tmp_path, capsys, {"kind": "kubernetes", "context": "down"})
    assert code == 3
    (line,) = err.strip().splitlines()
    assert endpoint in line
    assert "did not answer after 5 tries" in line


def test_node_without_gfd_labels_is_a_finding_not_a_crash(fake_api: FakeKubeApi, pytester: pytest.Pytester) -> None:
    faulty_cluster(fake_api)
    bare = fake_api.nodes[0]
    bare["metadata"]["labels"] = {
        k: v
        for k, v in bare["metadata"]["labels"].items()
        if not k.startswith("nvidia.com/") or k == "nvidia.com/gpu.present"
    }
    _, verdict, _ = configure(pytester, spec_doc({"kind": "kubernetes", "context": "fake"}))
    got = findings(verdict)
    assert ("inventory.gpus", "gpu-1", None) in got
    assert ("inventory.product", "gpu-1", None) in got


def test_rbac_grants_exactly_what_configure_reads(fake_api: FakeKubeApi, pytester: pytest.Pytester) -> None:
    faulty_cluster(fake_api)
    configure(pytester, spec_doc({"kind": "kubernetes", "context": "fake"}))
    used = set()
    for path, _ in fake_api.requests:
        if path == "/api/v1/nodes":
            used.add(("", "nodes", "list", None))
        elif path.startswith("/api/v1/namespaces/"):
            used.add(("", path.split("/")[-1], "list", path.split("/")[4]))
        elif path.startswith("/apis/"):
            group, _, resource = path.split("/")[2:5]
            used.add((group, resource, "list", None))
    assert used == grants({"gpucert-configure"})
