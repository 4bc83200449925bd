"""dcgmi diag -j parsing, on the real samples in ../shared/samples and on the project's own fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.measure.probes.dcgm import parse_diag

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples" / "dcgm"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


def sample(name: str) -> dict:
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"reference sample {path} is absent (it lives in the shared/ folder beside the checkout)")
    return json.loads(path.read_text())


def test_dcgm4_software_fail_exit_226() -> None:
    d = parse_diag(sample("dcgm4-r1-fail-gb10.json"), level=1, exit_code=226)
    assert d.version == "4.2.3"
    sw = d.results["software"]
    assert sw.summary == "Fail"
    assert sw.gpus[0].status == "Fail"
    assert "Persistence mode for GPU 0 is disabled" in sw.gpus[0].warnings[0]
    assert sw.gpus[0].serial == "<<<NOT_SUPPORTED>>>"
    assert any("SRAM Threshold" in i for i in sw.info)


def test_dcgm3_r3_pass_maps_display_names() -> None:
    d = parse_diag(sample("dcgm3-r3-pass.json"), level=3, exit_code=0)
    assert {
        "software",
        "pcie",
        "memory",
        "diagnostic",
        "targeted_stress",
        "targeted_power",
        "memory_bandwidth",
        "eud",
    } <= set(d.results)
    assert d.results["software"].summary == "Pass"
    assert d.results["software"].gpus == {}
    assert d.results["pcie"].gpus[0].status == "Pass"
    assert d.results["eud"].gpus[0].status == "Skip"


def test_dcgm4_fragment_of_eight_gpus() -> None:
    path = SAMPLES / "dcgm4-r3-diagnostic-fragment.txt"
    if not path.exists():
        pytest.skip(f"reference sample {path} is absent")
    test = json.loads(path.read_text().strip().rstrip(","))
    doc = {
        "DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]},
        "metadata": {"version": "4.x"},
    }
    d = parse_diag(doc, level=3)
    assert sorted(d.results["diagnostic"].gpus) == list(range(8))
    assert all(r.status == "Pass" for r in d.results["diagnostic"].gpus.values())


def test_summary_fail_with_every_gpu_pass_is_kept() -> None:
    doc = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "test_summary": {"status": "Fail", "info": ["issue 253"]},
                            "results": [
                                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}
                            ],
                        }
                    ],
                }
            ]
        },
        "metadata": {"version": "4.1.0"},
    }
    d = parse_diag(doc, level=2, exit_code=226)
    assert d.results["memory"].summary == "Fail"
    assert d.results["memory"].gpus[0].status == "Pass"


def test_runtime_error_document() -> None:
    d = parse_diag(
        {"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "Unable to connect to host engine"}},
        level=2,
        exit_code=235,
    )
    assert d.runtime_error == "Unable to connect to host engine"
    assert d.results == {}


def test_not_a_diag_document() -> None:
    d = parse_diag({"something": 1}, level=1)
    assert d.runtime_error is not None
    assert "no 'DCGM Diagnostic'" in d.runtime_error
