"""The cluster has the nodes and GPUs the spec expects, every node answers."""

import pytest

from gpucert import Evaluation, expect


@pytest.mark.check("inventory.nodes")
def test_node_count(evaluation: Evaluation) -> None:
    expect(evaluation.node_count())


@pytest.mark.check("node.reachable")
def test_reachable(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.reachable(node))


@pytest.mark.check("inventory.gpus")
def test_gpu_count(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("inventory.gpus", node))


@pytest.mark.check("inventory.product")
def test_gpu_product(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("inventory.product", node))
