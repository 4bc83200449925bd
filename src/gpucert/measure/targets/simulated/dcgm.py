"""DCGM's diagnostic as a simulated node's `dcgmi diag -j` would print it (DCGM 4.x's JSON layout), so the probes'
own parser reads it: every test of the level passes on every GPU but those a `dcgm` fault fails."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpucert.plan.checks import DCGM_EXTRA_TESTS_BY_LEVEL, DCGM_TESTS_BY_LEVEL
from gpucert.spec.simulated_fleet import DcgmFault, Fault

__all__ = ["dcgm_document"]

# what DCGM 4.x reports at each level: the tests a certification requires, and nvbandwidth (4.0+) beside them
DCGM_LEVEL_TESTS = {
    lvl: [*DCGM_TESTS_BY_LEVEL[lvl], *(t for t in DCGM_EXTRA_TESTS_BY_LEVEL.get(lvl, ()) if t == "nvbandwidth")]
    for lvl in DCGM_TESTS_BY_LEVEL
}
DCGM_CATEGORY = {
    "software": "Deployment",
    "pcie": "Integration",
    "memory": "Hardware",
    "diagnostic": "Hardware",
    "memtest": "Hardware",
    "nvbandwidth": "Integration",
}


def dcgm_document(
    faults: Mapping[int, Sequence[Fault]], level: int, serials: list[str], *, version: str, driver: str
) -> dict[str, Any]:
    """The document for the GPUs `faults` is keyed by (DCGM's entity ids, in order), each with its board's serial."""
    failing = {(f.test, idx) for idx, fs in faults.items() for f in fs if isinstance(f, DcgmFault)}
    tests = [t for lvl in range(1, level + 1) for t in DCGM_LEVEL_TESTS[lvl]]
    tests += sorted({t for t, _ in failing} - set(tests))
    categories: dict[str, list[dict[str, Any]]] = {}
    for test in tests:
        results = [_result(test, idx, (test, idx) in failing) for idx in range(len(faults))]
        summary = "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"
        categories.setdefault(DCGM_CATEGORY.get(test, "Stress"), []).append(
            {"name": test, "results": results, "test_summary": {"status": summary}}
        )
    return {
        "DCGM Diagnostic": {"test_categories": [{"category": c, "tests": t} for c, t in categories.items()]},
        "entity_groups": [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entities": [{"entity_id": i, "device_id": "2330", "serial_num": s} for i, s in enumerate(serials)],
            }
        ],
        "metadata": {"version": version, "Driver Version Detected": driver},
    }


def _result(test: str, idx: int, failed: bool) -> dict[str, Any]:
    r: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": idx, "status": "Pass"}
    if failed:
        r["status"] = "Fail"
        r["warnings"] = [
            {
                "error_category": 3,
                "error_id": 83,
                "error_severity": 2,
                "warning": f"Simulated {test} failure on GPU {idx}",
            }
        ]
    return r
