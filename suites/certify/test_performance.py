"""Each GPU's measured performance against the SKU baseline, then against its peers (straggler detection).

A GPU below the baseline fails the metric's check; one inside the baseline but behind its peers on the node or
in the fleet fails `straggler.<metric>`: one test, one root cause, one finding.
"""

import pytest

from gpucert import GEMM_DTYPES, Evaluation, GpuSlot, expect


@pytest.mark.check("memory.bandwidth")
def test_memory_bandwidth(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.metric("memory.bandwidth", gpu.node, gpu.index))


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
@pytest.mark.check("compute.gemm.{dtype}")
def test_gemm(evaluation: Evaluation, gpu: GpuSlot, dtype: str) -> None:
    expect(evaluation.metric(f"compute.gemm.{dtype}", gpu.node, gpu.index))


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.check("pcie.{direction}")
def test_pcie_bandwidth(evaluation: Evaluation, gpu: GpuSlot, direction: str) -> None:
    expect(evaluation.metric(f"pcie.{direction}", gpu.node, gpu.index))


@pytest.mark.check("p2p.bandwidth")
def test_p2p_bandwidth(evaluation: Evaluation, gpu: GpuSlot) -> None:
    expect(evaluation.metric("p2p.bandwidth", gpu.node, gpu.index))


@pytest.mark.check("nccl.all_reduce")
def test_nccl_all_reduce(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.metric("nccl.all_reduce", node, None))


@pytest.mark.check("nccl.all_reduce.multinode")
def test_nccl_all_reduce_multinode(evaluation: Evaluation) -> None:
    expect(evaluation.multinode())


@pytest.mark.check("straggler.nccl.all_reduce.multinode")
def test_node_keeps_pace_on_the_fabric(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.fabric_straggler(node))
