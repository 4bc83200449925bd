"""One node against its own handover baseline (`baselines/nodes/<node>.yaml`): the same GPUs, performing as they
did at handover within the spread recorded then. The SKU baseline, the fleet and the configure checks are the
configure and certify suites, run over the same one-node inventory."""

import pytest

from gpucert import Finding, GpuChecks, NodeGpus, expect
from gpucert.plan.required import HANDOVER_GPU_METRICS


@pytest.mark.check("handover.identity")
def test_gpu_is_the_one_of_handover(gpus: NodeGpus, decision: GpuChecks) -> None:
    """The GPU in the slot is the board recorded at handover (by serial, else UUID): it was not swapped."""
    expect(decision)


@pytest.mark.parametrize("metric", HANDOVER_GPU_METRICS)
@pytest.mark.check("handover.{metric}")
def test_gpu_as_fast_as_at_handover(gpus: NodeGpus, metric: str, decision: GpuChecks) -> None:
    """Each figure no further below its handover median than the limit and the noise of the difference allow."""
    expect(decision)


@pytest.mark.check("handover.nccl.all_reduce")
def test_node_all_reduce_as_at_handover(node: str, decision: Finding) -> None:
    """The node's all-reduce within its handover tolerance."""
    expect(decision)
