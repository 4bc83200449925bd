"""`gpucert metrics` exports the soak's progress (issue 26, "Prometheus gauges for soak progress"): the gauges the
controller writes to `soak/metrics.prom` after every round, of the newest soak run of the spec, and no other's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpucert.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "soak.yaml"
NAME = "soak-h100-pod-a"


def _series(path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _fake_soak(reports: Path, run: str, spec: str, rounds_done: int) -> None:
    (reports / run / "soak").mkdir(parents=True)
    (reports / run / "soak" / "metrics.prom").write_text(
        "# HELP gpucert_soak_rounds_done soak rounds judged\n# TYPE gpucert_soak_rounds_done gauge\n"
        f'gpucert_soak_rounds_done{{run="{run}",spec="{spec}"}} {rounds_done}\n',
        encoding="utf-8",
    )


def test_metrics_exports_the_newest_soak_of_the_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    assert main(["soak", str(SPEC), "--reports", str(reports), "-q"]) == 1  # two nodes leave (examples/soak.yaml)
    (run,) = [p for p in reports.iterdir() if p.name.endswith("-soak")]
    progress = json.loads((run / "soak" / "progress.json").read_text(encoding="utf-8"))
    # an older soak of the same spec, and a newer soak of another spec: neither is this spec's newest
    _fake_soak(reports, f"2000-01-01T00-00-00Z-{NAME}-soak", NAME, 1)
    _fake_soak(reports, "2999-01-01T00-00-00Z-other-soak", "other", 7)
    out = tmp_path / "fleet.prom"
    assert main(["metrics", "--spec", str(SPEC), "--reports", str(reports), "--textfile", str(out)]) == 0
    series = _series(out)
    labels = {"run": run.name, "spec": NAME}
    assert series["gpucert_soak_rounds_done"] == [(labels, float(progress["round"]))]
    assert series["gpucert_soak_rounds_total"] == [(labels, float(progress["rounds"]))]
    assert series["gpucert_soak_eta_seconds"] == [(labels, 0.0)]  # the soak has ended
    clean = {s["node"]: v for s, v in series["gpucert_soak_node_clean_hours"]}
    assert clean == {n: v["cleanHours"] for n, v in progress["nodes"].items()}
    assert clean == {"gpu-node-1": 24.0, "gpu-node-2": 10.0, "gpu-node-3": 24.0, "gpu-node-4": 20.0}
    running = {s["node"]: v for s, v in series["gpucert_soak_node_running"]}
    assert running == {"gpu-node-1": 1.0, "gpu-node-2": 0.0, "gpu-node-3": 1.0, "gpu-node-4": 0.0}
    assert series["gpucert_soak_metrics_unreadable"] == [({}, 0.0)]

    # a soak of the spec that started later, one round in: it is the newest, and speaks alone
    _fake_soak(reports, f"2999-01-01T00-00-00Z-{NAME}-soak", NAME, 3)
    assert main(["metrics", "--spec", str(SPEC), "--reports", str(reports), "--textfile", str(out)]) == 0
    series = _series(out)
    assert series["gpucert_soak_rounds_done"] == [({"run": f"2999-01-01T00-00-00Z-{NAME}-soak", "spec": NAME}, 3.0)]
    assert "gpucert_soak_node_clean_hours" not in series

    # a newest file that cannot be parsed: said so, and the fleet's other series still go out
    (reports / f"2999-01-01T00-00-00Z-{NAME}-soak" / "soak" / "metrics.prom").write_text("not {{ prometheus", "utf-8")
    assert main(["metrics", "--spec", str(SPEC), "--reports", str(reports), "--textfile", str(out)]) == 0
    series = _series(out)
    assert series["gpucert_soak_metrics_unreadable"] == [({}, 1.0)]
    assert "gpucert_soak_rounds_done" not in series
    assert "gpucert_run_folders_unreadable" in series
    capsys.readouterr()
