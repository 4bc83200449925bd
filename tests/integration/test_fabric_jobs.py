"""The fabric on a live cluster (the real `kubernetes` client, the fake API server and kubelet): a pool with a
fabric section has each node's probe pod read its fabric, and every pair of its nodes measured once as an Indexed
Job of two pods, in round-robin rounds, each pair bringing its RDMA per rail (a fake `ib_write_bw` in perftest
6.29's format) and both nodes' counters, which the harness folds into each node's evidence."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.measure.probes import fabric_collective
from gpucert.measure.probes.fabric_pair import PairPlan
from gpucert.measure.targets import open_target
from gpucert.plan import run as runner
from gpucert.spec.cluster import load_spec

from ..unit.test_fabric_sysfs import NIC0, NIC1, make_hca
from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet
from .gpu_operator import node

ROOT = Path(__file__).resolve().parents[2]
PERFTEST = """#!/bin/sh
case "$1" in --help) echo "      --use_cuda=<cuda device id>"; exit 0;; --version) echo "Version: 6.29"; exit 10;; esac
for a; do last=$a; done
case "$last" in -*) sleep 0.2; exit 0;; esac
echo " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
echo " 1048576    20000          385.00             384.25\t\t     0.046477"
"""


def spec_file(tmp_path: Path) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "gpucert.io/v1alpha2",
        "kind": "ClusterSpec",
        "metadata": {"name": "fabric-jobs"},
        "target": {
            "kind": "kubernetes",
            "context": "fake",
            "namespace": "gpucert",
            "maxParallel": 4,
            "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
            "pendingTimeoutSeconds": 3,
        },
        "pools": [
            {
                "name": "train",
                "nodeSelector": {},
                "expect": {"nodes": 4, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
                "baseline": str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"),
                "fabric": {
                    "rails": {"count": 2, "hcas": ["mlx5_0", "mlx5_1"]},
                    "linkLayer": "InfiniBand",
                    "ratedGbps": 400,
                },
            }
        ],
        "certify": {"probes": ["memory"]},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_every_pair_of_the_fabric_runs_as_a_job_and_brings_its_rdma_and_counters(
    served_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(1, 5):
        served_cluster.put("nodes", node(f"gpu-{i:02d}"))
    sysfs = tmp_path / "sys"  # every fake node reads this one tree (the kubelet runs them all in this process)
    make_hca(sysfs, "mlx5_0", NIC0)
    make_hca(sysfs, "mlx5_1", NIC1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (("ib_write_bw", PERFTEST), ("ibv_devinfo", "#!/bin/sh\ntrue\n")):
        (bin_dir / tool).write_text(body)
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPUCERT_SYSFS", str(sysfs))
    monkeypatch.setattr(fabric_collective, "PairPlan", lambda: PairPlan(reps=2, duration_s=1, timeout_s=20))
    spec = load_spec(spec_file(tmp_path))
    kubelet = FakeKubelet(served_cluster).start()
    try:
        with runner.new_run(tmp_path / "reports", spec, "measure") as folder:
            pass
        target = open_target(spec)
        inventory = runner.plan(target, spec, folder)
        runner.measure(target, inventory, spec, folder)
    finally:
        kubelet.close()
    nodes = [f"gpu-{i:02d}" for i in range(1, 5)]
    for n in nodes:
        ev = folder.read_evidence(n)
        assert ev is not None
        assert ev.fabric is not None, ev.errors
        assert [p.key for p in ev.fabric.ports] == ["mlx5_0/1", "mlx5_1/1"]
        assert ev.fabric.counters is not None  # the pairs' windows, folded in
        assert ev.fabric.counters.deltas("mlx5_0/1")["symbol_error"] == 0
    read = folder.read_fabric_pairs()  # the round documents as read (a field at its default is left out on disk)
    assert read is not None
    pairs = [p.model_dump(mode="json") for p in read.pairs]
    assert sorted(tuple(sorted(p["nodes"])) for p in pairs) == [
        (a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]
    ]  # every pair once, in three rounds of two
    for p in pairs:
        assert p["errors"] == []
        assert [(r["rail"], r["samples"]) for r in p["rdma"]] == [(0, [384.25, 384.25]), (1, [384.25, 384.25])]
        assert set(p["counters"]) == set(p["nodes"])
