"""The soak's all-reduce across nodes (issue 26: "NCCL within the node and across nodes"): where the spec asks for
certify.multinode, every round runs it across the running nodes, judged per round against the baseline and by the
drift criterion; a fabric that slows at a time is found at that round by exactly its criterion, and the nodes'
rounds go on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.fleet.soak import SoakFolder, resume_soak, start_soak
from gpucert.fleet.soak.controller import Progress
from gpucert.measure.targets.simulated.soak import SimulatedSoak

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
MULTINODE = "nccl.all_reduce.multinode"


def _spec(tmp: Path, faults: list[dict[str, Any]], *, multinode: bool = True, duration: str = "48h") -> Path:
    fleet = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "soak"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": 6, "namePrefix": "gpu-node-", "gpusPerNode": 8},
        "noise": {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005},
        "seed": 5,
        "soak": {"timeScale": 0, "faults": faults},
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"]["fleet"] = "fleet.yaml"
    spec["expect"]["nodes"] = 6
    spec["certify"]["baseline"] = str(BASELINE)
    if multinode:
        spec["certify"]["multinode"] = {}
    spec["soak"] = {"duration": duration, "round": "1h"}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return tmp / "spec.yaml"


class _Killed(BaseException):
    """The controller stopped where it stood."""


def _run(reports: Path) -> Path:
    (run,) = [p for p in reports.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return run


def _fabric_rounds(run: Path) -> list[dict[str, Any]]:
    out = []
    for d in sorted((run / "soak" / "rounds").iterdir()):
        s = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        if "fabric" in s:
            out.append(s["fabric"])
    return out


def test_a_link_that_slows_a_little_is_found_at_its_round_by_the_drift_criterion_alone(tmp_path: Path) -> None:
    # 6% slower from 30 h: past the 3% drift limit, inside the baseline's tolerance (350 GB/s less 15%)
    spec = _spec(tmp_path, [{"kind": "link-slow", "node": "gpu-node-4", "factor": 0.94, "after": "30h"}])
    result = start_soak(spec, tmp_path / "reports")
    assert result.result == "fail"
    assert {v["result"] for v in result.nodes.values()} == {"pass"}  # every node's own rounds stayed clean
    assert result.fabric is not None
    assert result.fabric["leftRound"] == 30
    assert {f["check"] for f in result.fabric["findings"]} == {f"soak.drift.{MULTINODE}"}
    assert all(f["node"] is None for f in result.fabric["findings"])
    rounds = _fabric_rounds(_run(tmp_path / "reports"))
    assert len(rounds) == 31  # it ran every round up to the one it failed, across all six nodes
    assert all(r["findings"] == [] for r in rounds[:30])
    assert all(len(r["round"]["nodes"]) == 6 for r in rounds)
    assert all(r["round"]["median"] > 297.5 for r in rounds)  # never below the baseline
    verdict = json.loads((_run(tmp_path / "reports") / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["result"] == "fail"
    assert verdict["fleet"]["failed"] == 1
    assert f"soak.drift.{MULTINODE}" in {f["check"] for f in verdict["findings"]}


def test_a_link_below_the_baseline_fails_its_round_by_the_baseline_criterion(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [{"kind": "link-slow", "node": "gpu-node-2", "factor": 0.8, "after": "10h"}])
    result = start_soak(spec, tmp_path / "reports")
    assert result.fabric is not None
    assert result.fabric["leftRound"] == 10
    checks = {f["check"] for f in result.fabric["findings"]}
    assert f"soak.baseline.{MULTINODE}" in checks  # below 297.5 GB/s
    assert checks <= {f"soak.baseline.{MULTINODE}", f"soak.drift.{MULTINODE}"}
    # a resumed controller replays the committed rounds to the same result
    run = _run(tmp_path / "reports")
    (run / "soak" / "result.json").unlink()
    again = resume_soak(run)
    assert again.fabric == result.fabric
    assert again.result == "fail"


def test_a_clean_fabric_passes_and_without_multinode_no_all_reduce_runs(tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    clean.mkdir()
    result = start_soak(_spec(clean, []), clean / "reports")
    assert result.result == "pass"
    assert result.fabric == {"result": "pass", "rounds": 48, "leftRound": None, "findings": []}
    plain = tmp_path / "plain"
    plain.mkdir()
    result = start_soak(_spec(plain, [], multinode=False), plain / "reports")
    assert result.result == "pass"
    assert result.fabric is None
    assert _fabric_rounds(_run(plain / "reports")) == []


def test_a_target_that_cannot_run_the_all_reduce_fails_the_fabric_closed(tmp_path: Path) -> None:
    """A target with no all-reduce across nodes in a round (no `fabric_round`): asked for one, the round is an
    error."""
    from gpucert.fleet.soak.fabric import FabricSoak
    from gpucert.plan.run import load_inputs
    from gpucert.spec.soak import SoakSpec

    spec, baselines = load_inputs(_spec(tmp_path, []))
    fabric = FabricSoak(spec, spec.soak or SoakSpec(), baselines)
    doc, _ = fabric.round(object(), 0, ["gpu-node-1", "gpu-node-2"], 1.0)
    assert doc is not None
    (finding,) = doc["findings"]
    assert finding["check"] == "soak.round"
    assert finding["status"] == "error"
    assert "cannot run the all-reduce across nodes" in finding["message"]
    assert not fabric.running
    assert fabric.result() == {"result": "fail", "rounds": 1, "leftRound": 0, "findings": [finding]}


def test_a_controller_killed_after_the_collective_takes_it_from_the_round_folder_and_runs_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collective is written to its round's folder as it finishes (`_fabric.json`); a controller killed
    before the round's commit (summary.json) resumes with it instead of running it again."""
    ran: list[int] = []
    measured = SimulatedSoak.fabric_round

    def counted(self: SimulatedSoak, nodes: Any, index: int, start_h: float, end_h: float) -> Any:
        ran.append(index)
        return measured(self, nodes, index, start_h, end_h)

    monkeypatch.setattr(SimulatedSoak, "fabric_round", counted)
    commit = SoakFolder.write_summary

    def killed_at_3(self: SoakFolder, index: int, summary: dict[str, Any]) -> None:
        if index == 3:
            raise _Killed
        commit(self, index, summary)

    spec = _spec(tmp_path, [{"kind": "link-slow", "node": "gpu-node-4", "factor": 0.94, "after": "3h"}], duration="6h")
    with monkeypatch.context() as m:
        m.setattr(SoakFolder, "write_summary", killed_at_3)
        with pytest.raises(_Killed):
            start_soak(spec, tmp_path / "reports")
    run = _run(tmp_path / "reports")
    assert (run / "soak" / "rounds" / "0003" / "_fabric.json").is_file()
    assert not (run / "soak" / "rounds" / "0003" / "summary.json").exists()
    result = resume_soak(run)
    assert ran == [0, 1, 2, 3]  # round 3's collective ran once; the fabric left the soak there
    assert result.fabric is not None
    assert result.fabric["leftRound"] == 3  # found from the collective taken from the folder
    assert [r["round"]["round"] for r in _fabric_rounds(run)] == [0, 1, 2, 3]


def test_seconds_long_rounds_add_up_to_the_duration(tmp_path: Path) -> None:
    """Six 1 s rounds are 6 * (1/3600) h, a hair under 6/3600 h in floating point: still the whole soak (more rounds
    than referenceRounds, so drift is judged)."""
    spec = _spec(tmp_path, [], multinode=False, duration="6s")
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["soak"]["round"] = "1s"
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = start_soak(spec, tmp_path / "reports")
    assert {v["result"] for v in result.nodes.values()} == {"pass"}
    assert result.result == "pass"


def test_progress_and_the_report_show_the_all_reduce_across_nodes(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [{"kind": "link-slow", "node": "gpu-node-2", "factor": 0.8, "after": "3h"}], duration="6h")
    seen: list[dict[str, Any]] = []

    def read_progress(p: Progress) -> None:
        seen.append(json.loads((_run(tmp_path / "reports") / "soak" / "progress.json").read_text(encoding="utf-8")))

    result = start_soak(spec, tmp_path / "reports", on_progress=read_progress)
    assert [p["fabric"] for p in seen[2:5]] == [
        {"status": "running", "rounds": 3, "leftRound": None},
        {"status": "left", "rounds": 4, "leftRound": 3},  # below the baseline from 3 h: it left at round 3
        {"status": "left", "rounds": 4, "leftRound": 3},
    ]
    html = (result.run / "soak" / "report.html").read_text(encoding="utf-8")
    assert "<h2>All-reduce across nodes</h2>" in html
    (plot,) = [svg for svg in html.split("<svg")[1:] if f"<title>{MULTINODE}, all-reduce across nodes</title>" in svg]
    assert plot.count("<polyline") == 1
    assert 'stroke="#c0392b"' in plot  # red: the fabric failed
    assert plot.split('points="')[1].split('"')[0].count(",") == 4  # one point a round it ran
