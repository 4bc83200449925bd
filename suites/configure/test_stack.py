"""Every node runs the pinned stack, in the declared order, with agreeing kubelet, runtime, kernel and OS."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("stack.version")
def test_version(node: str, component: str, decision: Finding) -> None:
    """The component runs, Ready, at the version the spec pins."""
    expect(decision)


@pytest.mark.check("stack.skew")
def test_skew(node: str, decision: Finding) -> None:
    """Kubelet, container runtime, kernel and OS image are those of the fleet's majority."""
    expect(decision)


@pytest.mark.check("stack.compat")
def test_driver_cuda_compat(node: str, decision: Finding) -> None:
    """The node's driver supports the CUDA release the spec declares."""
    expect(decision)


@pytest.mark.check("stack.ordering")
def test_ordering(node: str, decision: Finding) -> None:
    """Each component started after every component it is declared `after` was Ready."""
    expect(decision)


@pytest.mark.check("stack.kubernetes")
def test_kubelet_version(node: str, decision: Finding) -> None:
    """The kubelet is at least stack.kubernetes.minVersion."""
    expect(decision)


@pytest.mark.check("stack.runtime")
def test_container_runtime(node: str, decision: Finding) -> None:
    """The container runtime is the one the spec names, at least its minVersion."""
    expect(decision)
