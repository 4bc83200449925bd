"""The static gate (`gpucert configure SPEC --static`): the recipe itself, with no cluster."""

import pytest

from gpucert import Evaluation, expect
from gpucert.stack.recipe import recipe_compat, recipe_graph, recipe_shared_images


@pytest.mark.check("stack.ordering")
def test_after_graph_is_a_dag_of_declared_components(evaluation: Evaluation) -> None:
    expect(recipe_graph(evaluation.spec))


@pytest.mark.check("stack.compat")
def test_driver_pin_supports_the_declared_cuda(evaluation: Evaluation) -> None:
    expect(recipe_compat(evaluation.spec))


@pytest.mark.check("stack.version")
def test_pins_that_share_an_image_agree(evaluation: Evaluation) -> None:
    expect(recipe_shared_images(evaluation.spec))
