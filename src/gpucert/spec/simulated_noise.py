"""The simulated fleet's noise (`noise:`): what varies in a healthy fleet, between samples, boards, nodes and runs.
Pure: models only; the simulator in targets/simulated/world.py draws from them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpucert.spec.documents import Document

__all__ = ["RUN_TO_RUN_SOURCE", "Fraction", "Noise", "RunToRun", "Tails"]

Fraction = Annotated[float, Field(ge=0, le=0.5)]


class Tails(Document):
    """Samples heavier-tailed than a Gaussian: Student-t noise, and rare one-sided slow samples (a preempted
    repetition, a clock that had not ramped up) that healthy GPUs show too."""

    # Student-t degrees of freedom for the per-sample noise (scaled so its standard deviation stays `cv`)
    df: Annotated[float, Field(gt=2, le=1000)] | None = None
    outliers: Fraction = 0.0  # the fraction of samples that come out slow, whatever the GPU
    depth: Annotated[float, Field(gt=0, lt=1)] = 0.05  # how slow such a sample is: uniform in (0, depth)


RUN_TO_RUN_SOURCE = (
    "assumption: 0.5% between runs of one board (the middle of the 0.3-1% the detection study sweeps); "
    "measure it on your hardware by recertifying an idle node a few times"
)


class RunToRun(Document):
    """Run-to-run repeatability: each run of a board draws its own offset per metric (sd `cv`, relative), on top
    of the board's fixed offset (`gpuSpread`), from a generator seeded by the run id, so two runs differ and the
    same run measured again does not."""

    cv: Fraction = 0.005
    source: Annotated[str, Field(min_length=1)] = RUN_TO_RUN_SOURCE  # where `cv` comes from, or 'assumption: ...'


class Noise(Document):
    """What varies in a healthy fleet. Every key but `cv` defaults to none, so a fleet that sets none of them
    measures exactly as before they existed."""

    cv: Fraction = 0.01  # relative standard deviation of every measured sample
    # a fixed offset per GPU and metric (sd, relative): boards of one SKU differ (manufacturing, power management)
    gpu_spread: Fraction = Field(0.0, alias="gpuSpread")
    # a fixed offset per node and metric (sd, relative), shared by the node's GPUs (chassis cooling, power, host)
    node_spread: Fraction = Field(0.0, alias="nodeSpread")
    tails: Tails | None = None
    # a board's figure moves from one run to the next (clocks, temperature, the host's load): absent, every run of
    # a board measures alike, as fleets did before this key
    run_to_run: RunToRun | None = Field(None, alias="runToRun")
    # how alike one board's (one node's, one run's) offsets are across its metrics: 0, each metric's offset drawn
    # independently (as before this key); 1, one draw for all. An assumption either way until measured: a board's
    # clocks move every GEMM together, memory and PCIe less so
    metric_correlation: Annotated[float, Field(ge=0, le=1)] = Field(0.0, alias="metricCorrelation")
