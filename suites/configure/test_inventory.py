"""The cluster has the nodes and GPUs the spec expects, every node answers."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("inventory.nodes")
def test_node_count(decision: Finding) -> None:
    """Each pool has as many GPU nodes as it expects, and evidence of no node the inventory does not list."""
    expect(decision)


@pytest.mark.check("node.reachable")
def test_reachable(node: str, decision: Finding) -> None:
    """The node is listed, Ready, and (when measured) its probe ran and its evidence can be used."""
    expect(decision)


@pytest.mark.check("inventory.gpus")
def test_gpu_count(node: str, decision: Finding) -> None:
    """The pool's expect.gpusPerNode GPUs labelled, allocatable and seen by the probe; no GPU reported twice."""
    expect(decision)


@pytest.mark.check("inventory.product")
def test_gpu_product(node: str, decision: Finding) -> None:
    """The node's GPUs are the product its pool expects (nvidia.com/gpu.product)."""
    expect(decision)


@pytest.mark.check("pool.membership")
def test_pool_membership(node: str, decision: Finding) -> None:
    """The node is in exactly one of the spec's pools: its labels match one pool's nodeSelector, no more."""
    expect(decision)
