"""Handover baselines and the recertification helpers that need no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.errors import ConfigError
from gpucert.measure.targets.kubernetes.nodes import gpu_pods
from gpucert.spec.handover import MIN_TOLERANCE, handover_tolerance, load_node_baseline


def test_tolerance_is_three_spreads_but_never_under_three_percent() -> None:
    assert handover_tolerance(0.0) == MIN_TOLERANCE == 0.03
    assert handover_tolerance(0.005) == pytest.approx(0.03)
    assert handover_tolerance(0.02) == pytest.approx(0.06)


def test_a_bad_node_baseline_names_the_file_the_key_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "gpu-node-1.yaml"
    path.write_text(
        "apiVersion: gpucert.io/v1alpha1\n"
        "kind: NodeBaseline\n"
        "node: gpu-node-1\n"
        "sku: H100-SXM5-80GB\n"
        "recorded: {run: r, date: d, result: pass}\n"
        "gpus:\n"
        "  - index: 0\n"
        "    metrics:\n"
        "      memory.bandwidth: {median: -1, spread: 0.01, n: 20, unit: GB/s}\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_node_baseline(path)
    text = str(exc.value)
    assert str(path) in text
    assert "gpus[0].metrics.memory.bandwidth.median" in text
    assert ":9" in text


def _pod(name: str, phase: str, limits: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def test_only_unfinished_pods_holding_gpus_keep_a_node_busy() -> None:
    pods = [
        _pod("train", "Running", {"nvidia.com/gpu": "8"}),
        _pod("pending-train", "Pending", {"nvidia.com/gpu": "1"}),
        _pod("done", "Succeeded", {"nvidia.com/gpu": "8"}),
        _pod("cpu-only", "Running", {"cpu": "2"}),
        _pod("our-probe", "Running", {"nvidia.com/gpu": "8"}, {"app.kubernetes.io/managed-by": "gpucert"}),
    ]
    assert gpu_pods(pods) == ["ml/train", "ml/pending-train"]


@pytest.mark.parametrize("text", ["2026-12-03T06:42:20.123456Z", "2026-12-03T06:42:20Z", "2026-12-03T06:42:20.5+00:00"])
def test_lease_times_from_other_clients_are_read(text: str) -> None:
    from datetime import UTC, datetime

    from gpucert.measure.targets.kubernetes.nodes import _parse

    assert _parse(text).replace(microsecond=0) == datetime(2026, 12, 3, 6, 42, 20, tzinfo=UTC)


@pytest.mark.parametrize(
    ("count", "rounds"),
    [
        (3, [[[1, 2]], [[2, 3]], [[3, 1]]]),
        (4, [[[1, 2], [3, 4]], [[2, 3], [4, 1]]]),
        (5, [[[1, 2], [3, 4]], [[2, 3], [4, 5]], [[5, 1]]]),
    ],
)
def test_neighbour_pairs_cover_the_ring_with_no_node_twice_in_a_round(
    count: int, rounds: list[list[list[int]]]
) -> None:
    from gpucert.plan.run import neighbour_pairs

    nodes = [str(i) for i in range(1, count + 1)]
    got = neighbour_pairs(nodes)
    assert got == [[[str(a), str(b)] for a, b in r] for r in rounds]
