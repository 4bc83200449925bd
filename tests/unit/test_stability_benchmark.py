"""benchmarks/stability.py judges with the stability rule's own statistic, not a copy that could drift from it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpucert.evaluate.peers import PeerComparisons
from gpucert.measure.targets.base import MeasurePlan
from gpucert.plan.checks import CheckStatus

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "stability.py"


def test_the_study_decides_as_the_checks_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 16 x 8 fleet with one GPU slow in 30% of its samples, the study's shortcut (the rule's statistic without
    the straggler summaries) fails the same GPUs as PeerIndex.stability, the code the suites' checks call."""
    spec_ = importlib.util.spec_from_file_location("stability_study", SCRIPT)
    assert spec_ is not None
    assert spec_.loader is not None
    study = importlib.util.module_from_spec(spec_)
    monkeypatch.setitem(sys.modules, "stability_study", study)
    spec_.loader.exec_module(study)
    fault = {"kind": "intermittent", "node": study.TARGET[0], "gpu": study.TARGET[1], "metric": study.METRIC}
    target, spec, baselines = study._target(tmp_path, 16, 3, [{**fault, "fraction": 0.3, "factor": 0.8}])
    plan = MeasurePlan("2026-12-01T00-00-00Z-study", study.PROBES, 2, samples={p.value: 20 for p in study.PROBES})
    evidence = [target.measure_node(name, plan) for name in target.names]
    pool = spec.pool_names[0]
    peers = PeerComparisons(lambda _pool: evidence, spec, {pool: next(iter(baselines.values()))})
    keys = [(name, g) for name in target.names for g in range(8)]
    for metric in (study.METRIC, "pcie.h2d"):
        index = peers.index(metric, pool)
        checks = {k for k in keys if (f := index.stability(k)) is not None and f.status is CheckStatus.FAIL}
        assert study._unstable(evidence, metric, 20, peers.rules(metric, pool), keys) == checks
        assert checks == ({study.TARGET} if metric == study.METRIC else set())
