"""The fleet performance index (evaluate/index.py): figure over handover figure, else over the SKU figure; per node
and pool the GPUs within 2 % and the capacity lost in GPU-equivalents, with a GPU lacking figures counted lost."""

from __future__ import annotations

import math

import pytest

from gpucert.evaluate.index import Against, GpuIndex, index_of, summarize, summarize_by_node


def test_the_handover_figure_is_the_reference_and_the_sku_figure_stands_in_without_one() -> None:
    assert index_of(2940.0, 3000.0, 3350.0) == (pytest.approx(0.98), Against.HANDOVER)
    assert index_of(2940.0, None, 3000.0) == (pytest.approx(0.98), Against.SKU)
    assert index_of(2940.0, 0.0, 3000.0) == (pytest.approx(0.98), Against.SKU)  # no usable handover figure


@pytest.mark.parametrize("figure", [None, 0.0, -1.0, math.nan, math.inf])
def test_no_believable_figure_has_no_index(figure: float | None) -> None:
    assert index_of(figure, 3000.0, 3350.0) is None


def test_no_reference_has_no_index() -> None:
    assert index_of(3000.0, None, None) is None
    assert index_of(3000.0, math.nan, None) is None


def _i(node: str, gpu: int, metric: str, value: float) -> GpuIndex:
    return GpuIndex(node, gpu, metric, value, Against.HANDOVER)


def test_a_gpu_is_as_short_as_its_worst_metric_and_gains_offset_nothing() -> None:
    s = summarize(
        [
            _i("n1", 0, "memory.bandwidth", 0.90),
            _i("n1", 0, "compute.gemm.bf16", 1.00),
            _i("n1", 1, "memory.bandwidth", 1.05),  # faster than at handover: no credit
            _i("n1", 2, "memory.bandwidth", 0.985),  # inside 2 %
            _i("n1", 3, "memory.bandwidth", 0.975),  # outside
        ]
    )
    assert (s.gpus, s.within) == (4, 2)
    assert s.capacity_lost == pytest.approx(0.10 + 0.015 + 0.025)
    assert s.worst == pytest.approx(0.90)
    assert s.within_share == pytest.approx(0.5)


def test_an_expected_gpu_without_any_figure_is_lost_and_not_within() -> None:
    s = summarize([_i("n1", 0, "memory.bandwidth", 1.0)], expected=[("n1", 0), ("n1", 1)])
    assert (s.gpus, s.within, s.capacity_lost) == (2, 1, pytest.approx(1.0))


def test_nothing_to_count_is_nothing_delivered() -> None:
    s = summarize([])
    assert (s.gpus, s.within, s.capacity_lost, s.worst, s.within_share) == (0, 0, 0.0, None, 0.0)


def test_per_node_summaries_keep_the_nodes_apart() -> None:
    by = summarize_by_node(
        [_i("n1", 0, "memory.bandwidth", 0.9), _i("n2", 0, "memory.bandwidth", 1.0)], expected=[("n3", 0)]
    )
    assert list(by) == ["n1", "n2", "n3"]
    assert by["n1"].capacity_lost == pytest.approx(0.1)
    assert by["n2"].within == 1
    assert by["n3"].capacity_lost == 1.0
