"""A node's history (fleet/history.py) and `drift.<metric>` (evaluate/rules/drift.py): each board against its own
earlier figures, from signed runs only, never across specs, SKU baselines or boards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpucert.errors import ConfigError
from gpucert.evaluate.rules.drift import (
    OWN_RUNS,
    Earlier,
    board_history,
    drift_bar,
    judge_drift,
    own_repeatability,
    pooled_repeatability,
)
from gpucert.evaluate.rules.performance import Sampled
from gpucert.fleet.history import history_path, load_history, record_run, snapshot, use_history, verify_entry
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget
from gpucert.plan.checks import CheckStatus
from gpucert.plan.inventory import Inventory, Node
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.spec.baseline import load_baseline
from gpucert.spec.cluster import Probe, load_spec
from gpucert.spec.simulated_fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
SPEC = "clean-h100-pod-a"
METRIC = "memory.bandwidth"


def earlier(*medians: float, driver: str = "570.124.06") -> list[Earlier]:
    return [Earlier(f"run-{i}", f"2026-12-0{i + 1}T00:00:00Z", m, driver, "96.00") for i, m in enumerate(medians)]


def now(value: float) -> Sampled:
    return Sampled(value=value, n=20, unit="GB/s")


# ---- the rule ------------------------------------------------------------------------------------------------------


def test_a_fall_beyond_the_limit_and_the_noise_fails_and_quotes_the_history() -> None:
    f = judge_drift(METRIC, "n1", 3, now(2900.0), earlier(3000, 3003, 2998, 3001), repeatability=0.004, bar=4.0)
    assert f.check == "drift.memory.bandwidth"
    assert f.status is CheckStatus.FAIL
    assert "3.35% below its own history" in f.message
    assert "4 earlier run(s), mean 3000" in f.message
    assert "(run-3)" in f.message


def test_a_fall_within_the_limit_passes_however_significant() -> None:
    f = judge_drift(METRIC, "n1", 3, now(2955.0), earlier(3000, 3000, 3000, 3000), repeatability=0.001, bar=4.0)
    assert f.status is CheckStatus.PASS  # 1.5% down, 10 sd out, but under the 2% limit


def test_a_fall_beyond_the_limit_within_the_noise_passes() -> None:
    f = judge_drift(METRIC, "n1", 3, now(2910.0), earlier(3000, 3000), repeatability=0.01, bar=4.0)
    assert f.status is CheckStatus.PASS  # 3% down, but 4 x 1% x sqrt(1.5) = 4.9% is the bar


def test_unknown_repeatability_holds_the_gpu_to_the_limit_and_says_so() -> None:
    runs = [Earlier("r0", "t", 3000.0, spread=0.01, n=20)]
    f = judge_drift(METRIC, "n1", 3, now(2925.0), runs, repeatability=None, bar=4.0)
    assert f.status is CheckStatus.FAIL  # 2.5% down; with a 1% run-to-run noise known, the bar would be 5.7%
    assert "0.28% (unknown: fewer than 4 earlier runs of its own" in f.message
    assert judge_drift(METRIC, "n1", 3, now(2955.0), runs, repeatability=None, bar=4.0).status is CheckStatus.PASS


def test_a_driver_change_is_named_and_the_comparison_holds() -> None:
    f = judge_drift(
        METRIC, "n1", 3, now(2800.0), earlier(3000, 3000, 3000), repeatability=0.003, bar=4.0, driver="580.65.06"
    )
    assert f.status is CheckStatus.FAIL
    assert "driver 570.124.06 then, 580.65.06 now: the comparison still holds" in f.message


def test_repeatability_own_needs_enough_runs_and_pools_otherwise() -> None:
    assert own_repeatability(earlier(*[3000.0] * (OWN_RUNS - 1))) is None
    assert own_repeatability(earlier(3000, 3030, 2970, 3000)) == pytest.approx(0.008165, rel=1e-3)
    rng = np.random.default_rng(1)
    ratios = list(1 + 0.005 * np.sqrt(1 + 1 / 3) * rng.standard_normal(4000))
    assert pooled_repeatability(ratios, [3] * 4000) == pytest.approx(0.005, rel=0.05)
    assert pooled_repeatability(ratios[:7], [3] * 7) is None


def test_the_bar_grows_with_the_number_of_tests() -> None:
    assert drift_bar(1, 0.999) == pytest.approx(3.09, abs=0.01)
    assert drift_bar(2048 * 6, 0.999) > 5.0


# ---- the store ----------------------------------------------------------------------------------------------------


def _target(tmp_path: Path, faults: list[dict[str, object]] | None = None) -> SimulatedTarget:
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "t"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": 1, "gpusPerNode": 8},
        "seed": 7,
        "noise": {"cv": 0.01, "gpuSpread": 0.01, "runToRun": {"cv": 0.005}},
        "faults": faults or [],
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    return SimulatedTarget(spec, load_fleet(tmp_path / "fleet.yaml", spec), {"H100-SXM5-80GB": load_baseline(BASELINE)})


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, list[attest.Ed25519PublicKey]]:
    priv, pub, _ = attest.generate_key(tmp_path / "keys")
    return priv, [attest.load_public_key(pub)]


def signed_run(reports: Path, t: SimulatedTarget, run: str, key: Path, *, spec: str = SPEC, sign: bool = True) -> Path:
    folder = RunFolder(reports / run)
    folder.evidence_dir.mkdir(parents=True)
    folder.inputs.mkdir()
    shutil.copy(BASELINE, folder.baseline_copy)
    (folder.path / "run.json").write_text(json.dumps({"run": run, "spec": spec}))
    folder.write_evidence(t.measure_node("gpu-node-1", MeasurePlan(run, (Probe.MEMORY,), 2)))
    if sign:
        attest.sign_folder(folder.path, key, "test", {})
    record_run(folder, reports)
    return folder.path


def test_every_signed_run_adds_an_entry_that_its_run_stands_behind(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    key, pubs = keys
    reports, t = tmp_path / "reports", _target(tmp_path)
    for day in (1, 2, 3):
        signed_run(reports, t, f"2026-12-0{day}T00-00-00Z-{SPEC}", key)
    signed_run(reports, t, f"2026-12-04T00-00-00Z-{SPEC}", key, sign=False)  # unsigned: adds nothing
    entries = load_history(history_path(reports, SPEC, "gpu-node-1"))
    assert [e.run[:10] for e in entries] == ["2026-12-01", "2026-12-02", "2026-12-03"]
    assert all(verify_entry(e, reports, pubs) is None for e in entries)
    g3 = [e.gpus[3].metrics[METRIC].median for e in entries]
    assert len(set(g3)) == 3  # run-to-run noise: three runs, three figures
    assert entries[0].gpus[3].metrics[METRIC].n == 20
    assert entries[0].driver == "570.124.06"


def test_an_edited_entry_is_refused_and_the_reason_said(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    key, pubs = keys
    reports, t = tmp_path / "reports", _target(tmp_path)
    signed_run(reports, t, f"2026-12-01T00-00-00Z-{SPEC}", key)
    path = history_path(reports, SPEC, "gpu-node-1")
    doc = json.loads(path.read_text())
    doc["gpus"][3]["metrics"][METRIC]["median"] *= 1.05  # a better past, to hide a loss
    path.write_text(json.dumps(doc) + "\n")
    (entry,) = load_history(path)
    assert verify_entry(entry, reports, pubs) == f"its figures are not those run {entry.run} measured (edited)"
    other = attest.load_public_key(attest.generate_key(tmp_path / "other")[1])
    assert "signed by none of the keys" in (verify_entry(entry, reports, [other]) or "")
    h = board_history([entry], spec=SPEC, baseline=entry.baseline, gpu=3, serial=entry.gpus[3].serial,
                      metric=METRIC, refused={entry.run: "edited"})  # fmt: skip
    assert h.earlier == []
    assert h.refused == (f"run {entry.run} refused: edited",)


def test_another_spec_baseline_or_board_is_never_compared(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    key, _ = keys
    reports = tmp_path / "reports"
    signed_run(reports, _target(tmp_path), f"2026-12-01T00-00-00Z-{SPEC}", key)
    swapped = _target(tmp_path, [{"kind": "swapped-gpu", "node": "gpu-node-1", "gpu": 3}])
    signed_run(reports, swapped, f"2026-12-02T00-00-00Z-{SPEC}", key)
    entries = load_history(history_path(reports, SPEC, "gpu-node-1"))
    old, new = entries[0].gpus[3].serial, entries[1].gpus[3].serial
    assert old != new
    h = board_history(entries, spec=SPEC, baseline=entries[0].baseline, gpu=3, serial=new, metric=METRIC)
    assert [e.run for e in h.earlier] == [entries[1].run]
    assert h.replaced is not None
    assert f"held board(s) {old} before; board {new} was put in since" in h.replaced
    assert board_history(entries, spec="other", baseline=entries[0].baseline, gpu=2,
                         serial=entries[0].gpus[2].serial, metric=METRIC).earlier == []  # fmt: skip
    assert board_history(entries, spec=SPEC, baseline="sha256:other", gpu=2,
                         serial=entries[0].gpus[2].serial, metric=METRIC).earlier == []  # fmt: skip


def test_a_line_that_is_no_entry_is_one_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gpu-node-1.jsonl"
    path.write_text('{"spec": "x"}\n')
    with pytest.raises(ConfigError, match=r"gpu-node-1.jsonl:1.*not a history entry"):
        load_history(path)


def test_a_damaged_line_is_set_aside_by_a_run_and_said_not_found_after_measuring(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    """A hostile-input sweep: a line that is no entry stopped certify with exit 2 after the whole fleet was
    measured, leaving a run folder without a verdict, and an edited entry beside good ones was left out in silence.
    The run now reads what it can, sets the rest aside by line and run, says so, and judges (drift names them)."""
    key, pubs = keys
    reports, t = tmp_path / "reports", _target(tmp_path)
    signed_run(reports, t, f"2026-12-01T00-00-00Z-{SPEC}", key)
    signed_run(reports, t, f"2026-12-02T00-00-00Z-{SPEC}", key)
    path = history_path(reports, SPEC, "gpu-node-1")
    first, second = path.read_text().splitlines()
    doc = json.loads(first)
    doc["gpus"][3]["metrics"][METRIC]["median"] *= 1.05
    path.write_text(json.dumps(doc) + "\n" + second + "\n{not json\n")
    snap = snapshot(reports, SPEC, ["gpu-node-1"], pubs)["nodes"]["gpu-node-1"]  # type: ignore[index]
    assert [e["run"] for e in snap["entries"]] == [f"2026-12-02T00-00-00Z-{SPEC}"]
    assert snap["refused"][f"2026-12-01T00-00-00Z-{SPEC}"].endswith("(edited)")
    assert "gpu-node-1.jsonl:3: not a history entry" in snap["refused"]["line 3"]
    said: list[str] = []
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.write_inventory(Inventory("simulated", (Node("gpu-node-1", 8, "NVIDIA-H100-80GB-HBM3", 8, True),)))
    use_history(folder, reports, SPEC, pubs, said.append)
    assert any("gpu-node-1: line 3 refused" in s for s in said)
    assert any("(edited)" in s for s in said)
    assert folder.history_copy.is_file()  # judged with what stands: drift names what was set aside


def test_repeatability_is_never_below_what_the_samples_alone_explain() -> None:
    # five identical runs (as a simulator without run-to-run noise measures them): the spread of the medians is 0,
    # but a median of 20 samples at 1% sd is only good to 0.28%
    runs = [Earlier(f"r{i}", "t", 3000.0, spread=0.01, n=20) for i in range(5)]
    assert own_repeatability(runs) == 0.0
    f = judge_drift(METRIC, "n1", 3, now(2937.0), runs, repeatability=0.0, bar=10.0)
    assert f.status is CheckStatus.PASS  # 2.1% down: past the limit, within 10 x 0.28% x sqrt(1.2) = 3.1%
    assert "repeatability 0.28%" in f.message


def test_the_plan_leaves_out_a_replaced_board_and_says_so(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    from gpucert.evaluate.rules.drift import drift_plan
    from gpucert.plan.history_records import NodeHistory, Snapshot

    key, _ = keys
    reports = tmp_path / "reports"
    signed_run(reports, _target(tmp_path), f"2026-12-01T00-00-00Z-{SPEC}", key)
    (entry,) = load_history(history_path(reports, SPEC, "gpu-node-1"))
    snap = Snapshot(spec=SPEC, nodes={"gpu-node-1": NodeHistory(entries=[entry], refused={})})
    serials = [(g.index, g.serial) for g in entry.gpus]
    serials[3] = (3, "0000000000042")
    keys_, left = drift_plan(snap, {"gpu-node-1": serials, "gpu-node-2": [(0, "1")]}, {"gpu-node-1": entry.baseline},
                             {"gpu-node-1": [METRIC], "gpu-node-2": [METRIC]})  # fmt: skip
    assert {(k.node, k.gpu) for k in keys_} == {("gpu-node-1", i) for i in (0, 1, 2, 4, 5, 6, 7)}
    assert left[1][0] == "drift.*"  # gpu-node-2 has no history
    assert left[0][0] == "drift.* on gpu-node-1/gpu3"
    assert "board 0000000000042 was put in since" in left[0][1]


def test_a_firmware_change_is_named_too() -> None:
    f = judge_drift(METRIC, "n1", 3, now(2995.0), earlier(3000, 3000), repeatability=0.003, bar=4.0,
                    driver="570.124.06", firmware="97.00")  # fmt: skip
    assert f.status is CheckStatus.PASS
    assert "firmware 96.00 then, 97.00 now: the comparison still holds" in f.message
    assert "driver" not in f.message.split("; ")[-1]  # the same driver is not named


def test_an_entry_of_another_node_or_spec_is_set_aside_never_verified(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    """A hostile-input sweep: with gpu-node-2.jsonl and gpu-node-3.jsonl swapped by name, `gpucert history` showed
    the other node's entries as "verified" (verify_entry checks the entry's own run, which stands) and certify took
    every board for a swap; spec-b's lines appended to spec-a's file were dropped in silence. A node's file holds
    only its own entries of its spec: any other is set aside by line and said, as a damaged line is."""
    key, pubs = keys
    reports, t = tmp_path / "reports", _target(tmp_path)
    signed_run(reports, t, f"2026-12-01T00-00-00Z-{SPEC}", key)
    signed_run(reports, t, f"2026-12-02T00-00-00Z-{SPEC}", key)
    mine = history_path(reports, SPEC, "gpu-node-1")
    renamed = history_path(reports, SPEC, "gpu-node-2")
    mine.rename(renamed)  # gpu-node-1's entries under gpu-node-2's name
    snap = snapshot(reports, SPEC, ["gpu-node-2"], pubs)["nodes"]["gpu-node-2"]  # type: ignore[index]
    assert snap["entries"] == []
    assert "its node is gpu-node-1" in snap["refused"]["line 1"]
    assert f"belongs in {mine}" in snap["refused"]["line 2"]
    with pytest.raises(ConfigError, match=r"gpu-node-2.jsonl:1: not an entry of this file \(its node is gpu-node-1"):
        load_history(renamed)
    other = history_path(reports, "spec-b", "gpu-node-1")
    other.parent.mkdir()
    other.write_text(renamed.read_text())  # spec-a's lines in spec-b's file
    snap = snapshot(reports, "spec-b", ["gpu-node-1"], pubs)["nodes"]["gpu-node-1"]  # type: ignore[index]
    assert snap["entries"] == []
    assert f"spec {SPEC}; this is the history of gpu-node-1 under spec spec-b" in snap["refused"]["line 1"]
