"""The static gate (`gpucert configure SPEC --static`): the recipe itself, with no cluster."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("stack.ordering")
def test_after_graph_is_a_dag_of_declared_components(decision: Finding) -> None:
    """The `after` graph has no cycle, so the stack has an order to come up in."""
    expect(decision)


@pytest.mark.check("stack.compat")
def test_driver_pin_supports_the_declared_cuda(decision: Finding) -> None:
    """The driver pin is at least the minimum driver of the CUDA release the spec declares."""
    expect(decision)


@pytest.mark.check("stack.version")
def test_pins_that_share_an_image_agree(decision: Finding) -> None:
    """Components built into one image (device plugin and GFD) are pinned to one version."""
    expect(decision)
