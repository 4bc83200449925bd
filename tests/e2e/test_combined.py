"""A GPU a few percent slow on every metric at once, through the real suites (issue 27): one `straggler.combined`
finding naming its metrics and each one's z, where each metric alone stays inside the 5% gate; its per-metric
stragglers that also fail follow from it (skipped, naming it), never extra root causes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ..in_process import gpucert_here, next_second
from .conftest import fleet_doc, spec_doc

METRICS = ("memory.bandwidth", *(f"compute.gemm.{d}" for d in ("fp16", "bf16", "tf32", "fp32", "fp64")))
METRICS += ("pcie.h2d", "pcie.d2h", "p2p.bandwidth")
DRIFT = METRICS[:-1]  # a GPU's own measurements: p2p is a pair's
SPEC = "examples/clean.yaml"
REAL = {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005}


def test_a_gpu_slow_on_every_metric_is_one_combined_finding(certify: Any) -> None:
    faults = [{"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": m, "factor": 0.955} for m in METRICS]
    run = certify(fleet_doc(faults, noise=REAL), spec=spec_doc(multinode=None))
    assert run.findings == {("straggler.combined", "gpu-node-2", 3)}, [f["message"] for f in run.verdict["findings"]]
    (f,) = run.verdict["findings"]
    assert f["status"] == "fail"
    assert f["unit"] == "z"
    assert f["observed"] < f["limit"] < 0
    assert "behind on several metrics at once" in f["message"]
    for metric in METRICS:
        assert f"{metric} -" in f["message"]
    skips = run.verdict["coverage"]["skips"]
    assert skips, "this seed puts some metric past the 5% gate: its straggler must follow from the combined finding"
    assert all(s["cause"] == "straggler.combined@gpu-node-2/gpu3" for s in skips), skips
    assert run.verdict["summary"]["skipped"] == sum(s["checks"] for s in skips)


def test_a_board_fallen_a_little_on_every_metric_is_one_drift_finding(project: Path) -> None:
    """2.5% on every drift metric against one earlier run: each metric alone is held to its noise x the bar and
    most pass, the board's metrics together stand out; boards spread by 2% hide it from its peers. One finding,
    drift.combined, naming each metric's fall; the per-metric drift findings that also fail skip naming it."""
    fleet = project / "examples" / "fleets" / "h100-4x8.yaml"
    doc = yaml.safe_load(fleet.read_text())
    doc["noise"] = {"cv": 0.01, "gpuSpread": 0.02, "runToRun": {"cv": 0.003}}
    doc["faults"] = []
    doc["nodes"]["count"] = 2  # 16 boards: enough to pool the run-to-run noise over, and a fast test
    fleet.write_text(yaml.safe_dump(doc))
    spec = yaml.safe_load((project / SPEC).read_text())
    spec["expect"]["nodes"] = 2
    spec["certify"].pop("multinode", None)
    spec["certify"]["probes"] = ["memory", "compute", "pcie"]  # the drift metrics' probes only: a fast test
    (project / SPEC).write_text(yaml.safe_dump(spec))
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    next_second()  # run ids are to the second: each run its own noise
    doc["faults"] = [{"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": m, "factor": 0.975} for m in DRIFT]
    fleet.write_text(yaml.safe_dump(doc))
    r = gpucert_here("certify", SPEC, "-q", "--sign-key", "keys/gpucert.key", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    run = sorted((project / "reports").glob("*clean-h100-pod-a"))[-1]
    verdict = json.loads((run / "verdict.json").read_text())
    found = {(f["check"], f["node"], f["gpu"]) for f in verdict["findings"]}
    # against its own history, one finding; against its peers (boards spread by 2%, run-to-run noise drawn per run
    # id) a metric of this board may also stand out on its own, a finding of another rule, never another board's
    drift = {k for k in found if k[0].startswith("drift.")}
    assert drift == {("drift.combined", "gpu-node-2", 3)}, [f["message"] for f in verdict["findings"]]
    assert {(k[1], k[2]) for k in found} == {("gpu-node-2", 3)}, found
    assert all(k[0].startswith("straggler.") for k in found - drift), found
    (f,) = [f for f in verdict["findings"] if f["check"] == "drift.combined"]
    assert "fell on 8 metrics at once: mean fall 2." in f["message"]
    assert all(f"{metric} +" in f["message"] for metric in DRIFT)  # each metric's fall and its z
    skips = verdict["coverage"]["skips"]
    assert skips, "some metric alone passes its bar on this seed: its drift finding must follow from the board's"
    assert all(s["cause"] == "drift.combined@gpu-node-2/gpu3" for s in skips), skips
