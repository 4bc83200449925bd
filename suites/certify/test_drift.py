"""Each GPU against its own history: the figure now against the board's earlier signed runs (same spec, SKU
baseline and serial), judged with its run-to-run repeatability. Runs wherever a node has history, in certification
and in recertification alike."""

import pytest

from gpucert import GPU_METRICS, GpuChecks, NodeGpus, expect

DRIFT_METRICS = [m for m in GPU_METRICS if m.split(".")[0] in ("memory", "compute", "pcie")]


@pytest.mark.parametrize("metric", DRIFT_METRICS)
@pytest.mark.check("drift.{metric}")
def test_gpu_as_fast_as_its_own_history(gpus: NodeGpus, metric: str, decision: GpuChecks) -> None:
    """The figure has not fallen against the board's own history by more than the baseline's drift.limit and
    the run-to-run noise (certify.drift.confidence)."""
    expect(decision)


@pytest.mark.check("drift.combined")
def test_gpu_as_fast_as_its_own_history_on_every_metric_at_once(gpus: NodeGpus, decision: GpuChecks) -> None:
    """The board has not fallen on its metrics together by more than the baseline's drift.limit on average and
    the run-to-run noise of every metric combined (Stouffer's z with the metrics' measured correlation): a board a
    little slower on everything is one finding, and its per-metric drift findings follow from it."""
    expect(decision)
