"""Issue 26: a soak's punch-list rows are ranked as certify ranks their like, never all "other"."""

from __future__ import annotations

import pytest

from gpucert.acceptance.punchlist import severity_of


@pytest.mark.parametrize(
    ("soak", "like"),
    [
        ("soak.xid", "health.xid"),
        ("soak.ecc", "health.ecc"),
        ("soak.remapped_rows", "health.remapped_rows"),
        ("soak.temperature", "health.temperature"),
        ("soak.throttle", "health.throttle"),
        ("soak.dcgm.diagnostic", "dcgm.diagnostic"),
        ("soak.round", "inventory.gpus"),
        ("soak.baseline.memory.bandwidth", "performance.memory_bandwidth"),
    ],
)
def test_a_soak_finding_has_the_severity_of_its_certify_like(soak: str, like: str) -> None:
    assert severity_of(soak) == severity_of(like) != "other"


def test_a_soak_xid_is_worked_before_configuration_and_drift_is_performance() -> None:
    order = ("hardware", "missing", "performance", "straggler", "configuration", "other")
    assert order.index(severity_of("soak.xid")) < order.index(severity_of("stack.driver"))
    assert severity_of("soak.drift.memory.bandwidth") == "performance"
    assert severity_of("soak.restarts") == "missing"
    assert severity_of("soak.something_new") == "other"


@pytest.mark.parametrize("check", ["drift.memory.bandwidth", "drift.compute.gemm.bf16", "drift.combined"])
def test_a_gpu_fallen_against_its_own_history_is_a_performance_fault(check: str) -> None:
    assert severity_of(check) == severity_of("memory.bandwidth") == "performance"
