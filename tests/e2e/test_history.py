"""A node's history through the `gpucert` command: every signed certification and recertification adds to it, and
`gpucert history` prints it, each entry checked against its signed run."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpucert.fleet.history import history_path, load_history

from ..in_process import gpucert_here, next_second

SPEC = "examples/clean.yaml"
NAME = "clean-h100-pod-a"


def test_certifications_and_recertifications_add_to_each_nodes_history(project: Path) -> None:
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    for _ in range(2):
        r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
        assert r.returncode == 0, r.stdout + r.stderr
        next_second()
    r = gpucert_here("certify", SPEC, "-q", cwd=project)  # unsigned: nothing to stand behind an entry
    assert r.returncode == 0, r.stdout + r.stderr
    r = gpucert_here(
        "recertify", "gpu-node-2", "--spec", SPEC, "-q", "--sign-key", "keys/gpucert.key", "--without-handover",
        cwd=project,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    reports = project / "reports"
    assert len(load_history(history_path(reports, NAME, "gpu-node-1"))) == 2
    entries = load_history(history_path(reports, NAME, "gpu-node-2"))
    assert len(entries) == 3
    assert entries[-1].run.endswith("recertify-gpu-node-2")
    r = gpucert_here(
        "history", "gpu-node-2", "--spec-name", NAME, "--metric", "memory.bandwidth", "--key", "keys/gpucert.pub",
        cwd=project,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("verified") == 3
    r = gpucert_here("history", "gpu-node-9", "--spec-name", NAME, cwd=project)
    assert r.returncode == 2
    assert "no history of gpu-node-9 under spec clean-h100-pod-a" in r.stderr


def test_a_gpu_fallen_against_its_own_history_is_found_where_its_peers_hide_it(project: Path) -> None:
    """A 4% loss is inside the SKU baseline and the peers' 5% gate; against the board's own signed runs it is
    drift.memory.bandwidth, with the history quoted; no other GPU is flagged."""
    fleet = project / "examples" / "fleets" / "h100-4x8.yaml"
    doc = yaml.safe_load(fleet.read_text())
    doc["noise"] = {**doc.get("noise", {}), "runToRun": {"cv": 0.003}}
    doc["faults"] = []
    fleet.write_text(yaml.safe_dump(doc))
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    for _ in range(2):
        r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
        assert r.returncode == 0, r.stdout + r.stderr
        next_second()  # run ids are to the second: each run its own noise
    slow = {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.96}
    doc["faults"] = [slow]
    fleet.write_text(yaml.safe_dump(doc))
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    run = sorted((project / "reports").glob(f"*{NAME}"))[-1]
    verdict = json.loads((run / "verdict.json").read_text())
    failed = {(f["check"], f["node"], f["gpu"]) for f in verdict["findings"] if f["status"] != "pass"}
    assert failed == {("drift.memory.bandwidth", "gpu-node-2", 3)}, r.stdout + r.stderr
    (finding,) = verdict["findings"]
    assert "below its own history (2 earlier run(s)" in finding["message"]
    assert "pooled over pool" in finding["message"]
    assert r.returncode == 1


def test_an_edited_history_is_refused_and_the_finding_says_so(project: Path) -> None:
    """Someone raises a node's past figures to hide a loss: the entries no longer match their signed runs, so
    they are not compared with; every GPU of the node says why (an error, not a pass), the other nodes pass."""
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    path = history_path(project / "reports", NAME, "gpu-node-1")
    doc = json.loads(path.read_text())
    for g in doc["gpus"]:
        g["metrics"]["memory.bandwidth"]["median"] *= 1.05
    path.write_text(json.dumps(doc) + "\n")
    next_second()
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    run = sorted((project / "reports").glob(f"*{NAME}"))[-1]
    verdict = json.loads((run / "verdict.json").read_text())
    bad = {(f["check"], f["node"], f["status"]) for f in verdict["findings"]}
    assert bad == {(c, "gpu-node-1", "error") for c in {f["check"] for f in verdict["findings"]}}
    assert {f["check"] for f in verdict["findings"]} >= {"drift.memory.bandwidth", "drift.pcie.h2d"}
    assert len(verdict["findings"]) == 8 * 8  # every drift metric of each of its GPUs: the whole entry is refused
    message = verdict["findings"][0]["message"]
    assert "refused: its figures are not those run" in message
    assert "(edited)" in message


def test_a_pools_index_over_time_holds_each_board_to_its_handover(project: Path) -> None:
    """Handover recorded from the first signed run: that run's index is 1 on every GPU; a board 10% slow on
    memory bandwidth later shows as the pool's worst index and about 0.1 GPU-equivalents lost."""
    fleet = project / "examples" / "fleets" / "h100-4x8.yaml"
    doc = yaml.safe_load(fleet.read_text())
    doc["faults"] = []
    fleet.write_text(yaml.safe_dump(doc))
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (first,) = sorted((project / "reports").glob(f"*{NAME}"))
    r = gpucert_here("baseline", "record", str(first), cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    next_second()  # run ids are to the second
    doc["faults"] = [{"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.9}]
    fleet.write_text(yaml.safe_dump(doc))
    gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    r = gpucert_here("history", "--pool", "default", "--spec-name", NAME, cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split("│")[1:-1] for line in r.stdout.splitlines() if NAME in line and "│" in line]
    rows = [[c.strip() for c in row] for row in rows if row and row[0].strip()]
    assert len(rows) == 2, r.stdout
    assert rows[0][2:] == ["4", "32", "100.0%", "0.000", "1.0000"]
    worst, lost = float(rows[1][6]), float(rows[1][5])
    assert abs(worst - 0.9) < 0.02, r.stdout
    assert 0.08 < lost < 0.2, r.stdout
    r = gpucert_here("history", "--pool", "gpu", "--spec-name", NAME, cwd=project)
    assert r.returncode == 2
    assert "no history of pool gpu" in r.stderr
    r = gpucert_here("history", "gpu-node-1", "--pool", "default", "--spec-name", NAME, cwd=project)
    assert r.returncode == 2
    assert "name a NODE or --pool POOL" in r.stderr
    # the exporter: a recertification held to the handover gives the index against the board's handover figure
    next_second()  # newer than the certification by its time, not only by its name
    r = gpucert_here("recertify", "gpu-node-2", "--spec", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr  # handover.memory.bandwidth
    (recert,) = (project / "reports").glob("*recertify-gpu-node-2")
    r = gpucert_here("metrics", "--spec", SPEC, "--textfile", "out.prom", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    series = {
        (s.labels["node"], s.labels["gpu"], s.labels["metric"]): s.value
        for f in text_string_to_metric_families((project / "out.prom").read_text())
        if f.name == "gpucert_performance_index"
        for s in f.samples
    }
    samples = json.loads((recert / "evidence" / "gpu-node-2.json").read_text())["gpus"][3]["measurements"]
    handover = yaml.safe_load((project / "baselines" / "nodes" / NAME / "gpu-node-2.yaml").read_text())
    then = next(g for g in handover["gpus"] if g["index"] == 3)["metrics"]["memory.bandwidth"]["median"]
    now = statistics.median(samples["memory.bandwidth"]["samples"])
    assert series[("gpu-node-2", "3", "memory.bandwidth")] == pytest.approx(now / then)
    assert now / then < 0.93  # against the SKU figure it would be about 0.9 x (handover / SKU)
    # its report.html shows the node's trend: the two signed certifications it was given, and this run
    html = (recert / "report.html").read_text()
    table = html[html.index("<table id='gpucert-trend'>") :]
    table = table[: table.index("</table>")]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in table.split("<tr>")[2:]]
    assert [row[0] for row in rows] == [first.name, rows[1][0], f"{recert.name} (this run)"]
    assert rows[0][2:] == ["8", "100.0%", "0.000", "1.0000"]
    assert float(rows[2][5]) == pytest.approx(now / then, abs=1e-4)
