"""The soak's controller over a simulated fleet (issue 26): every fault found at its round by exactly its
criterion, rounds appended atomically and resumed after a kill without losing or repeating one, one controller per
run, the restart policy and progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpucert.errors import ConfigError
from gpucert.fleet.soak import SoakBusyError, SoakFolder, resume_soak, start_soak
from gpucert.fleet.soak.controller import Progress
from gpucert.plan.runfolder import RunFolder

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"


def _spec(tmp: Path, nodes: int, soak: dict[str, Any], faults: list[dict[str, Any]], scale: float = 0) -> Path:
    fleet = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "soak"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": nodes, "namePrefix": "gpu-node-", "gpusPerNode": 8},
        "noise": {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005},
        "seed": 11,
        "soak": {"timeScale": scale, "faults": faults},
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"]["fleet"] = "fleet.yaml"
    spec["expect"]["nodes"] = nodes
    spec["certify"]["baseline"] = str(BASELINE)
    spec["soak"] = soak
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return tmp / "spec.yaml"


def _gpu(node: str, gpu: int, kind: str, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "node": node, "gpu": gpu, **kw}


FAULTS = [
    _gpu("gpu-node-3", 2, "degrade", metric="memory.bandwidth", factor=0.95, after="30h"),
    _gpu("gpu-node-5", 1, "xid", code=79, at="50h"),
    _gpu("gpu-node-7", 4, "thermal-creep", perHourC=3.0, after="20h"),
    _gpu("gpu-node-9", 0, "ecc-storm", perHour=2000, after="40h"),
    {"kind": "pod-restart", "node": "gpu-node-11", "at": "12h"},
]


def test_a_72h_soak_of_64_nodes_finds_each_fault_at_its_round_by_exactly_its_criterion(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 64, {"duration": "72h", "round": "3h"}, FAULTS)
    began = time.monotonic()
    result = start_soak(spec, tmp_path / "reports")
    took = time.monotonic() - began
    left = {
        node: (v["leftRound"], sorted({f["check"] for f in v["findings"]}), v["cleanHours"])
        for node, v in result.nodes.items()
        if v["result"] != "pass"
    }
    assert left == {
        "gpu-node-3": (10, ["soak.drift.memory.bandwidth"], 30.0),  # degrades from 30 h: round 10 is 30-33 h
        "gpu-node-5": (16, ["soak.xid"], 48.0),  # the XID at 50 h: round 16 is 48-51 h
        "gpu-node-7": (7, ["soak.temperature"], 21.0),  # +3 °C/h from 20 h: 3 °C at 21 h, 12 °C at 24 h
        "gpu-node-9": (13, ["soak.ecc"], 39.0),  # 2000/h from 40 h: 4000 by 42 h, over the 1000 per 24 h
        "gpu-node-11": (4, ["soak.restarts"], 12.0),  # restarts at 12 h: round 4 is 12-15 h
    }
    assert result.result == "fail"
    assert {v["cleanHours"] for v in result.nodes.values() if v["result"] == "pass"} == {72.0}
    drift = result.nodes["gpu-node-3"]["findings"][0]
    assert drift["gpu"] == 2
    assert "Mann-Kendall S=" in drift["message"]
    assert took < 60, f"a 72 h soak of 64 nodes took {took:.1f} s"


def _summaries(run: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run / "soak" / "rounds").glob("*/summary.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out.append({k: doc[k] for k in ("round", "nodes", "left", "rejoined")})
    return out


def _run_dir(reports: Path) -> Path:
    (run,) = [p for p in reports.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return run


def test_a_killed_controller_resumes_without_losing_or_repeating_a_round(tmp_path: Path) -> None:
    faults = [{"kind": "pod-restart", "node": "gpu-node-2", "at": "5h"}]
    # a round of 1 h takes 0.25 s of wall time, so the kill lands between (or inside) rounds
    spec = _spec(tmp_path, 4, {"duration": "12h", "round": "1h"}, faults, scale=14400)
    reports = tmp_path / "killed"
    code = (
        "from pathlib import Path; from gpucert.fleet.soak import start_soak; "
        f"start_soak(Path({str(spec)!r}), Path({str(reports)!r}))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 60
        while not list(reports.glob("*/soak/rounds/0004/summary.json")):
            assert proc.poll() is None, "the controller ended before it was killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    run = _run_dir(reports)
    done = len(_summaries(run))
    assert 5 <= done < 12
    resumed = resume_soak(run)  # the dead controller's lock is taken over
    whole = start_soak(_spec(tmp_path, 4, {"duration": "12h", "round": "1h"}, faults), tmp_path / "whole")
    assert _summaries(run) == _summaries(whole.run)  # every round once, the same as a run never killed
    assert [s["round"] for s in _summaries(run)] == list(range(12))
    assert resumed.nodes == whole.nodes
    assert resumed.nodes["gpu-node-2"]["leftRound"] == 5


def test_a_second_controller_on_the_same_run_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 2, {"duration": "2h", "round": "1h"}, [])
    result = start_soak(spec, tmp_path / "reports")
    folder = SoakFolder(RunFolder(result.run))
    assert not folder.lock_path.exists()  # released at the end
    with folder.lock(), pytest.raises(SoakBusyError, match="another controller"):
        resume_soak(result.run)


class _Stop(Exception):
    pass


def test_a_node_that_failed_leaves_and_rejoins_with_its_clock_from_zero(tmp_path: Path) -> None:
    faults = [{"kind": "pod-restart", "node": "gpu-node-2", "at": "2h"}]
    spec = _spec(tmp_path, 3, {"duration": "12h", "round": "1h"}, faults)
    seen: list[Progress] = []

    def stop_after_five(p: Progress) -> None:
        seen.append(p)
        if p.round == 5:
            raise _Stop

    with pytest.raises(_Stop):
        start_soak(spec, tmp_path / "reports", on_progress=stop_after_five)
    run = _run_dir(tmp_path / "reports")
    progress = json.loads((run / "soak" / "progress.json").read_text(encoding="utf-8"))
    assert progress["round"] == 5
    assert progress["nodes"]["gpu-node-2"] == {  # issue 26: the 3 rounds it ran (0-2), and no ETA once it left
        "status": "left",
        "pool": "default",
        "rounds": 3,
        "cleanHours": 2.0,
        "leftRound": 2,
        "rejoined": 0,
        "eta": None,
    }
    assert progress["nodes"]["gpu-node-1"]["cleanHours"] == 5.0
    assert progress["nodes"]["gpu-node-1"]["eta"] is not None
    gauges = {
        (sample.name, sample.labels.get("node")): sample.value
        for family in text_string_to_metric_families((run / "soak" / "metrics.prom").read_text(encoding="utf-8"))
        for sample in family.samples
    }
    assert gauges[("gpucert_soak_rounds_done", None)] == 5
    assert gauges[("gpucert_soak_rounds_total", None)] == 12
    assert gauges[("gpucert_soak_node_clean_hours", "gpu-node-1")] == 5.0
    assert gauges[("gpucert_soak_node_clean_hours", "gpu-node-2")] == 2.0
    assert gauges[("gpucert_soak_node_running", "gpu-node-2")] == 0
    assert gauges[("gpucert_soak_node_running", "gpu-node-3")] == 1
    with pytest.raises(ConfigError, match="has not left"):
        resume_soak(run, rejoin=["gpu-node-1"])
    result = resume_soak(run, rejoin=["gpu-node-2"])
    assert result.nodes["gpu-node-2"]["result"] == "incomplete"  # 7 clean hours of the 12 required
    assert result.nodes["gpu-node-2"]["cleanHours"] == 7.0
    assert result.nodes["gpu-node-1"]["result"] == "pass"
    assert result.result == "incomplete"
    assert _summaries(run)[5]["rejoined"] == ["gpu-node-2"]


def test_a_soak_of_recorded_evidence_is_refused_before_a_run_folder_is_made(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"] = {"kind": "replay", "evidence": "x"}
    spec["certify"]["baseline"] = str(BASELINE)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    with pytest.raises(ConfigError, match="simulated target"):
        start_soak(tmp_path / "spec.yaml", tmp_path / "reports")
    assert not (tmp_path / "reports").exists()


def test_the_soak_command_on_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpucert.cli.main import main

    assert main(["soak", str(ROOT / "examples" / "soak.yaml"), "--reports", str(tmp_path), "-q"]) == 1
    out = capsys.readouterr().out
    assert "gpu-node-2" in out
    assert "soak FAIL" in out
    run = _run_dir(tmp_path)
    result = json.loads((run / "soak" / "result.json").read_text(encoding="utf-8"))
    assert {n: v["result"] for n, v in result["nodes"].items()} == {
        "gpu-node-1": "pass",
        "gpu-node-2": "fail",
        "gpu-node-3": "pass",
        "gpu-node-4": "fail",
    }
    report = (run / "soak" / "report.html").read_text(encoding="utf-8")
    assert "Clean hours per node" in report
    assert "10 / 24 h" in report  # gpu-node-2's clean hours
    bandwidth = report[report.index("<title>memory.bandwidth, pool default</title>") :]
    bandwidth = bandwidth[: bandwidth.index("</svg>")]
    assert bandwidth.count('stroke-opacity="0.15"') == 31  # the 31 other GPUs, each a faint line
    assert bandwidth.count('stroke="#c0392b"') == 1  # the degraded board: gpu-node-4/gpu6's XID is not about bandwidth
    assert "<title>gpu-node-2/gpu3</title>" in bandwidth
    assert main(["soak", "--resume", str(run), "-q"]) == 1  # an ended soak resumes to the same result
    capsys.readouterr()
    assert main(["punchlist", str(run), "--format", "csv"]) == 1  # a node that left is a punch-list row
    rows = capsys.readouterr().out
    assert "gpu-node-2,3," in rows
    assert "soak.drift.memory.bandwidth" in rows
    assert "soak.xid" in rows
    # issue 26: a soak's row takes its kind's severity (the XID, hardware, before the drift, performance) and the
    # board as the rounds read it
    assert main(["punchlist", str(run), "--format", "json"]) == 1
    punch = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["severity"], r["node"], r["gpu"]) for r in punch[:2]] == [
        ("hardware", "gpu-node-4", 6),
        ("performance", "gpu-node-2", 3),
    ]
    raw = json.loads((run / "soak" / "rounds" / "0000" / "gpu-node-4.json").read_text(encoding="utf-8"))
    board = next(g for g in raw["gpus"] if g["index"] == 6)
    assert (punch[0]["serial"], punch[0]["uuid"], punch[0]["pci_bus_id"]) == (
        board["serial"],
        board["uuid"],
        board["pci_bus_id"],
    )
    assert punch[0]["serial"]  # the simulated soak's rounds read no PCI bus id
    assert punch[0]["uuid"]
    assert main(["soak", str(ROOT / "examples" / "soak.yaml"), "--resume", str(run)]) == 2
    assert main(["soak", str(ROOT / "examples" / "soak.yaml"), "--duration", "5h", "--round", "2h"]) == 2
    err = capsys.readouterr().err
    assert "give RUN alone" in err
    assert "not a whole number of 2h rounds" in err
    assert "Traceback" not in err


def test_the_benchmark_runs_and_reports_the_controllers_share(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp_path)}
    args = ["--nodes", "2", "--duration", "4h", "--round", "1h", "--time-scale", "0"]
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "2 nodes, 4 rounds of 1h, time scale 0: pass" in r.stdout
    assert "controller between rounds" in r.stdout
    assert "KiB a round" in r.stdout


def test_dcgm_runs_in_the_rounds_it_is_due_and_a_failing_test_is_found_at_the_next(tmp_path: Path) -> None:
    faults = [_gpu("gpu-node-2", 1, "dcgm-fail", test="memory", at="5h")]
    soak = {"duration": "12h", "round": "1h", "dcgm": {"level": 2, "everyHours": 4}}
    result = start_soak(_spec(tmp_path, 3, soak, faults), tmp_path / "reports")
    v = result.nodes["gpu-node-2"]
    assert (v["leftRound"], sorted({f["check"] for f in v["findings"]})) == (7, ["soak.dcgm.memory"])
    assert {f["gpu"] for f in v["findings"]} == {1}
    assert [result.nodes[n]["result"] for n in ("gpu-node-1", "gpu-node-3")] == ["pass", "pass"]
    rounds = result.run / "soak" / "rounds"
    ran = [k for k in range(12) if json.loads((rounds / f"{k:04d}" / "gpu-node-1.json").read_text())["dcgm"]]
    assert ran == [3, 7, 11]  # the rounds that reach 4 h, 8 h and 12 h


def test_a_due_dcgm_that_did_not_run_is_an_error() -> None:
    from gpucert.evaluate.rules.soak import Peers, judge_round
    from gpucert.evaluate.soak_history import NodeHistory
    from gpucert.evaluate.soak_round import RoundEvidence, summarize
    from gpucert.spec.baseline import load_baseline
    from gpucert.spec.soak import SoakCriteria

    r = summarize(RoundEvidence(node="n1", round=3, start_h=3.0, end_h=4.0, gpus=[]), dcgm_level=2)
    history = NodeHistory("n1", clock_round=0, clock_h=0.0)
    history.add(r)
    baseline = load_baseline(BASELINE)
    findings = judge_round(history, r, Peers("default", None), baseline, SoakCriteria(), 0)
    assert [(f.check, f.status.value) for f in findings] == [("soak.dcgm", "error")]


def test_a_soaked_board_has_the_serial_the_certification_gave_it() -> None:
    from gpucert.measure.targets.base import MeasurePlan
    from gpucert.measure.targets.simulated import SimulatedTarget
    from gpucert.measure.targets.simulated.soak import SimulatedSoak
    from gpucert.spec.cluster import Probe, load_spec

    target = SimulatedTarget.from_spec(load_spec(ROOT / "examples" / "soak.yaml"))
    certified = target.measure_node("gpu-node-2", MeasurePlan("r", (Probe.HEALTH,), 1))
    soaked = SimulatedSoak(target, ["health"]).node_round("gpu-node-2", 0, 0.0, 1.0)
    assert [(g.serial, g.uuid) for g in soaked.gpus] == [(g.serial, g.uuid) for g in certified.gpus]
