"""Each GPU's measured performance against the SKU baseline, then against its peers (straggler detection).

A GPU below the baseline fails the metric's check; one inside the baseline but behind its peers on the node or
in the fleet fails `straggler.<metric>`, and one whose samples are unstable where its peers' are not fails
`stability.<metric>`: one test, one root cause, one finding. A node behind the other nodes as a whole is one
node-level `straggler.<metric>` finding, and its GPUs' checks of that metric skip with it as their cause.
"""

import pytest

from gpucert import GEMM_DTYPES, GPU_METRICS, Finding, GpuChecks, NodeGpus, expect


@pytest.mark.check("memory.bandwidth")
def test_memory_bandwidth(gpus: NodeGpus, decision: GpuChecks) -> None:
    """HBM copy bandwidth at least the baseline's limit, and in line with the GPU's peers."""
    expect(decision)


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
@pytest.mark.check("compute.gemm.{dtype}")
def test_gemm(gpus: NodeGpus, dtype: str, decision: GpuChecks) -> None:
    """GEMM throughput of each dtype at least the baseline's limit, and in line with the GPU's peers."""
    expect(decision)


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.check("pcie.{direction}")
def test_pcie_bandwidth(gpus: NodeGpus, direction: str, decision: GpuChecks) -> None:
    """Pinned host-to-device and device-to-host copies at least the baseline's limit, in line with the peers."""
    expect(decision)


@pytest.mark.check("p2p.bandwidth")
def test_p2p_bandwidth(gpus: NodeGpus, decision: GpuChecks) -> None:
    """Peer copies to and from the GPU's peers (NVLink) at least the baseline's limit, in line with the peers."""
    expect(decision)


@pytest.mark.check("nccl.all_reduce")
def test_nccl_all_reduce(node: str, decision: Finding) -> None:
    """The node's all-reduce bus bandwidth at the largest message at least the baseline's limit, and in line
    with the other nodes'."""
    expect(decision)


@pytest.mark.check("nccl.all_reduce.multinode")
def test_nccl_all_reduce_multinode(decision: Finding) -> None:
    """The all-reduce across nodes at least the baseline's multi-node figure, with correct results."""
    expect(decision)


@pytest.mark.check("nccl.all_reduce.multinode")
def test_pool_nccl_all_reduce_multinode(pool: str, decision: Finding) -> None:
    """With several pools, each pool's all-reduce across its nodes at least its own figure (the pool's
    fabric.ncclBusbw, else its baseline's), with correct results; with target.gang.topologyKey, each domain's
    (`domain r1`, `train domain r1`), and the nodes in no domain (`no domain`) an error naming them."""
    expect(decision)


@pytest.mark.check("straggler.nccl.all_reduce.multinode")
def test_node_keeps_pace_on_the_fabric(node: str, decision: Finding) -> None:
    """Not every pair of neighbours the node is in is behind the pairs' median: the node does not slow the ring."""
    expect(decision)


@pytest.mark.parametrize("metric", GPU_METRICS)
@pytest.mark.check("straggler.{metric}")
def test_node_keeps_pace(node: str, metric: str, decision: Finding) -> None:
    """The median of the node's GPUs not behind the other nodes' median by more than stragglers.maxDeviation and
    outside their spread (robust z stragglers.minZ): one slow node is one finding, naming its GPUs' figures."""
    expect(decision)


@pytest.mark.check("straggler.combined")
def test_gpu_keeps_pace_on_every_metric_at_once(gpus: NodeGpus, decision: GpuChecks) -> None:
    """The GPU's robust z against its node's peers, over every per-GPU metric at once (Stouffer's z with the
    metrics' measured correlation), not behind by more than the bar for every GPU judged: a board a few percent slow
    on every metric is one finding, and its per-metric stragglers follow from it."""
    expect(decision)
