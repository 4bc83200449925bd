"""One node against its own handover baseline (`baselines/nodes/<node>.yaml`): the same GPUs, performing as they
did at handover within the spread recorded then. The SKU baseline, the fleet and the configure checks are the
configure and certify suites, run over the same one-node inventory."""

import pytest

from gpucert import GEMM_DTYPES, Evaluation, GpuSlot, expect

GPU_METRICS = [
    "memory.bandwidth",
    *(f"compute.gemm.{d}" for d in GEMM_DTYPES),
    "pcie.h2d",
    "pcie.d2h",
    "p2p.bandwidth",
]


@pytest.mark.check("handover.identity")
def test_gpu_is_the_one_of_handover(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.identity(gpu))


@pytest.mark.parametrize("metric", GPU_METRICS)
@pytest.mark.check("handover.{metric}")
def test_gpu_as_fast_as_at_handover(evaluation: Evaluation, gpu: GpuSlot, metric: str) -> None:
    expect(evaluation.against_handover(metric, gpu.node, gpu.index))


@pytest.mark.check("handover.nccl.all_reduce")
def test_node_all_reduce_as_at_handover(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.against_handover("nccl.all_reduce", node, None))
