"""Every node runs the pinned stack, in the declared order, with agreeing kubelet, runtime, kernel and OS."""

import pytest

from gpucert import Evaluation, expect


@pytest.mark.check("stack.version")
def test_version(evaluation: Evaluation, node: str, component: str) -> None:
    expect(evaluation.configure("stack.version", node, component))


@pytest.mark.check("stack.skew")
def test_skew(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("stack.skew", node))


@pytest.mark.check("stack.compat")
def test_driver_cuda_compat(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("stack.compat", node))


@pytest.mark.check("stack.ordering")
def test_ordering(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("stack.ordering", node))


@pytest.mark.check("stack.kubernetes")
def test_kubelet_version(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("stack.kubernetes", node))


@pytest.mark.check("stack.runtime")
def test_container_runtime(evaluation: Evaluation, node: str) -> None:
    expect(evaluation.configure("stack.runtime", node))
