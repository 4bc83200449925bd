"""`gpucert init` against the fake API server: the spec it drafts from what the cluster runs passes `gpucert
configure` on the same cluster, with the same read-only requests (deploy/rbac.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucert.cli import main as cli
from gpucert.spec.cluster import load_spec

from .conftest import FakeKubeApi, cluster_policy
from .gpu_operator import VERSIONS, install, node
from .rbac import grants

H100 = [f"gpu-{i}" for i in range(1, 5)]
H200 = ["h200-1", "h200-2"]


def two_pools(api: FakeKubeApi, *, h200_driver: str = "550.127.05", product: str = "NVIDIA-H200") -> None:
    """4 H100 nodes (8 GPUs) and 2 nodes of `product` (4 GPUs) on another driver branch, and a CPU node."""
    api.nodes = [
        *(node(n) for n in H100),
        *(node(n, gpus=4, driver=h200_driver, product=product) for n in H200),
        node("cpu-1", gpu=False),
    ]
    api.pods = install([*H100, *H200], versions={n: {"driver": h200_driver} for n in H200})
    api.cluster_policies = [cluster_policy("ready")]


def init(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["init", "--context", "fake", "--out", str(tmp_path / "spec.yaml"), *args])
    out, err = capsys.readouterr()
    return code, out, err


def configure(tmp_path: Path) -> tuple[int, dict]:
    code = cli.main(["configure", str(tmp_path / "spec.yaml"), "--reports", str(tmp_path / "reports"), "-q"])
    (run,) = (tmp_path / "reports").iterdir()
    return code, json.loads((run / "verdict.json").read_text())


def used(api: FakeKubeApi) -> set[tuple[str, str, str, str | None]]:
    out = set()
    for path, _ in api.requests:
        if path == "/api/v1/nodes":
            out.add(("", "nodes", "list", None))
        elif path.startswith("/api/v1/namespaces/"):
            out.add(("", path.split("/")[-1], "list", path.split("/")[4]))
        elif path.startswith("/apis/"):
            group, _, resource = path.split("/")[2:5]
            out.add((group, resource, "list", None))
    return out


def test_init_drafts_a_spec_that_passes_configure_on_the_same_cluster(
    fake_api: FakeKubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_pools(fake_api)
    code, _, err = init(tmp_path, capsys)
    assert code == 0, err
    init_requests = used(fake_api)
    assert init_requests == grants({"gpucert-configure"})  # read only: what configure reads, nothing more
    text = (tmp_path / "spec.yaml").read_text()
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.api_version == "gpucert.io/v1alpha2"
    assert [(p.name, p.node_selector, p.expect.nodes, p.expect.gpus_per_node) for p in spec.pools] == [
        ("h100-80gb-hbm3", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 4, 8),
        ("h200", {"nvidia.com/gpu.product": "NVIDIA-H200"}, 2, 4),
    ]
    assert Path(spec.resolve(spec.pools[1].baseline)).name == "H200-SXM-141GB.yaml"
    pins = {c.name: (c.version, c.after) for c in spec.stack.components}
    assert pins == {
        "driver": (VERSIONS["driver"], []),
        "container-toolkit": (VERSIONS["container-toolkit"], ["driver"]),
        "device-plugin": (VERSIONS["device-plugin"], ["container-toolkit"]),
        "gpu-feature-discovery": (VERSIONS["gpu-feature-discovery"], ["container-toolkit"]),
        "dcgm-exporter": (VERSIONS["dcgm-exporter"], ["container-toolkit"]),
    }
    assert spec.stack_for("h200").component("driver").version == "550.127.05"  # type: ignore[union-attr]
    assert "cuda" not in pins  # not observable: a TODO, never a pin
    assert "# TODO: declare the CUDA your workloads use" in text
    assert "nvcr.io/nvidia/driver:550.127.05-ubuntu22.04" in text  # where the pool's pin came from
    assert spec.stack.kubernetes is not None
    assert spec.stack.kubernetes.min_version == "1.31.4"
    assert "target.image" in err  # a TODO before certify
    fake_api.requests.clear()
    code, verdict = configure(tmp_path)
    assert code == 0, [f["message"] for f in verdict["findings"]]
    assert verdict["result"] == "pass"
    assert {p: s["found"] for p, s in verdict["pools"].items()} == {"h100-80gb-hbm3": 4, "h200": 2}
    assert used(fake_api) == init_requests


def test_a_product_without_a_baseline_is_a_todo_that_stops_the_spec(
    fake_api: FakeKubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_pools(fake_api, h200_driver="570.133.20", product="NVIDIA-B200")
    code, _, err = init(tmp_path, capsys)
    assert code == 0, err
    assert "pool b200: no committed baseline for NVIDIA-B200" in err
    doc = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    assert doc["pools"][1]["baseline"] == "TODO: no committed baseline for NVIDIA-B200"
    assert cli.main(["configure", str(tmp_path / "spec.yaml"), "--reports", str(tmp_path / "reports")]) == 2
    assert "pools[1].baseline: no baseline yet for NVIDIA-B200" in capsys.readouterr().err


def test_drift_inside_a_pool_is_pinned_by_majority_and_said(
    fake_api: FakeKubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.nodes = [node(n) for n in H100]
    fake_api.pods = install(H100, versions={"gpu-3": {"device-plugin": "0.17.0"}}, missing={"gpu-4": {"dcgm-exporter"}})
    code, _, err = init(tmp_path, capsys)
    assert code == 0
    assert "device-plugin: gpu-3 of pool h100-80gb-hbm3 run 0.17.0, not the pool's pin" in err
    assert "dcgm-exporter does not run on gpu-4" in err
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.stack.component("device-plugin").version == VERSIONS["device-plugin"]  # type: ignore[union-attr]
    code, verdict = configure(tmp_path)
    assert code == 1
    assert {(f["check"], f["node"]) for f in verdict["findings"]} == {
        ("stack.version", "gpu-3"),
        ("stack.version", "gpu-4"),
    }


def test_existing_out_is_not_overwritten(
    fake_api: FakeKubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "spec.yaml").write_text("mine\n")
    code, _, err = init(tmp_path, capsys)
    assert code == 2
    assert "--force" in err
    assert (tmp_path / "spec.yaml").read_text() == "mine\n"


@pytest.mark.parametrize(
    ("out", "says"),
    [("folder", "is a folder: name the file to write"), ("file.yaml/spec.yaml", "is under a file")],
)
def test_an_out_that_cannot_be_written_is_one_line(
    fake_api: FakeKubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, says: str
) -> None:
    two_pools(fake_api)
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.yaml").write_text("mine\n")
    code = cli.main(["init", "--context", "fake", "--out", str(tmp_path / out), "--force"])
    err = capsys.readouterr().err
    assert code == 2
    assert "argument --out: " in err
    assert says in err
    assert "Traceback" not in err
    assert (tmp_path / "file.yaml").read_text() == "mine\n"
