"""DCGM in a soak on a Kubernetes cluster (soak.dcgm.everyHours): the real `kubernetes` client against the fake API
server, the fake kubelet's pods reporting what the simulator measures for the plan each pod was given."""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest
import yaml

from gpucert.fleet.soak import start_soak
from gpucert.measure.targets.kubernetes import soak as ksoak
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.spec.cluster import load_spec

from .fakecluster import FakeCluster
from .fakekubelet import FakeKubelet

ROOT = Path(__file__).resolve().parents[2]
NS = "gpucert"


@pytest.fixture(autouse=True)
def no_round_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round on a cluster lasts its length (here 1 h): here it ends when its Jobs do."""
    monkeypatch.setattr(ksoak, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: None))


def _doc(tmp_path: Path, name: str) -> dict:
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["expect"]["nodes"] = 2
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    spec["target"]["fleet"] = str(tmp_path / "fleet.yaml")
    (tmp_path / name).write_text(yaml.safe_dump(spec), encoding="utf-8")
    return spec


def test_dcgm_runs_in_the_kubernetes_rounds_it_is_due_and_its_failing_test_is_the_nodes_finding(
    served_cluster: FakeCluster, tmp_path: Path
) -> None:
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-4x8.yaml").read_text(encoding="utf-8"))
    fleet["nodes"]["count"] = 2
    fleet["faults"] = [{"kind": "dcgm", "node": "gpu-node-2", "gpu": 1, "test": "memory"}]
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
    _doc(tmp_path, "sim.yaml")
    sim = SimulatedTarget.from_spec(load_spec(tmp_path / "sim.yaml"))
    nodes, _ = sim.observe()
    for n in nodes:
        served_cluster.put("nodes", json.loads(json.dumps(n)))
    spec = _doc(tmp_path, "spec.yaml")
    spec["target"] = {
        "kind": "kubernetes",
        "context": "fake",
        "namespace": NS,
        "maxParallel": 2,
        "image": "registry.local/gpucert-probe@sha256:" + "b" * 64,
        "pendingTimeoutSeconds": 30,
    }
    # 2 rounds of 1 h, DCGM every 2 h: only the round that reaches 2 h (round 1) runs it
    spec["soak"] = {
        "duration": "2h",
        "round": "1h",
        "probes": ["health", "memory"],
        "dcgm": {"level": 2, "everyHours": 2},
    }
    spec["soak"]["criteria"] = {"temperatureSpreadC": 30}  # the simulator's readings are not at a soak's load
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    kubelet = FakeKubelet(served_cluster, simulator=sim).start()
    try:
        result = start_soak(tmp_path / "spec.yaml", tmp_path / "reports")
    finally:
        kubelet.close()
    rounds = result.run / "soak" / "rounds"

    def dcgm(k: int, node: str) -> object:
        return json.loads((rounds / f"{k:04d}" / f"{node}.json").read_text(encoding="utf-8"))["dcgm"]

    assert [dcgm(k, "gpu-node-1") is not None for k in range(2)] == [False, True]
    assert dcgm(0, "gpu-node-2") is None
    v = result.nodes["gpu-node-2"]
    assert (v["result"], v["leftRound"]) == ("fail", 1)
    assert {(f["check"], f["gpu"]) for f in v["findings"]} == {("soak.dcgm.memory", 1)}
    assert result.nodes["gpu-node-1"]["findings"] == []  # its DCGM passed (incomplete: 2 rounds judge no drift)
    plans = [
        json.loads(next(iter(e[4]["data"].values())))
        for e in served_cluster.events
        if e[1] == "configmaps" and e[3] == "ADDED"
    ]
    assert ["dcgm" in p["probes"] for p in plans] == [False, True]  # the round's plan asks for DCGM when due
