"""DCGM's error ids, categories and severities (DCGM_FR_*), kept from `dcgmi diag -j` with DCGM's names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.measure.probes.dcgm import parse_diag, run_diag

from .test_probes import FIXTURES, SERIALS, install_dcgmi

# ---- DCGM's error ids, categories and severities -----------------------------------------------------------------


def test_dcgm_error_ids_are_kept_with_dcgms_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-warn-printed-as-fail.json", 226)
    r = run_diag(2, serials=SERIALS).results["memory"].gpus[3]
    (err,) = r.errors
    assert (err.id, err.name, err.category_name, err.severity_name) == (
        3,
        "DCGM_FR_PCI_REPLAY_RATE",
        "HARDWARE_PCIE",
        "MONITOR",
    )
    assert r.describe() == (
        "GPU 3 had 12 PCIe replays (threshold 8): check the GPU's seating and riser "
        "[DCGM_FR_PCI_REPLAY_RATE (id 3), category HARDWARE_PCIE (13), severity MONITOR (1)]"
    )


def test_dcgm_error_ids_of_the_real_sample() -> None:
    sample = Path(__file__).resolve().parents[3] / "shared" / "samples" / "dcgm" / "dcgm4-r1-fail-gb10.json"
    if not sample.exists():
        pytest.skip(f"{sample} is not here (the shared samples sit beside the checkout)")
    d = parse_diag(json.loads(sample.read_text()), level=1, exit_code=226)
    (err,) = d.results["software"].gpus[0].errors
    assert (err.name, err.category_name, err.severity_name) == ("DCGM_FR_PERSISTENCE_MODE", "SOFTWARE_OTHER", "CONFIG")
    assert "nvidia-smi -i <gpuId> -pm 1" in err.describe()


def test_the_error_table_is_dcgm_4_5_2s() -> None:
    """Every id of dcgmError_t in DCGM 4.5.2's dcgmlib/dcgm_errors.h (tag v4.5.2), extracted into the fixture with
    the command it names, has its name in the probe's table; 4.5.2's last id is 129 (the sentinel is 130)."""
    from gpucert.measure.probes.dcgm import DCGM_ERRORS_VERSION, DCGM_FR

    rows = (FIXTURES / "dcgm_errors-4.5.2.txt").read_text().splitlines()
    header = {int(i): name for i, name in (r.split() for r in rows if r and not r.startswith("#"))}
    assert DCGM_ERRORS_VERSION == "4.5.2"
    assert max(header) == 129 == len(DCGM_FR) - 1
    assert dict(enumerate(DCGM_FR)) == header


@pytest.mark.parametrize(
    ("eid", "name"),
    [(120, "DCGM_FR_FALLEN_OFF_BUS"), (129, "DCGM_FR_NCCL_ERROR"), (10, "DCGM_FR_CLOCKS_EVENT_THERMAL"), (130, None)],
)
def test_new_error_ids_get_dcgms_names(eid: int, name: str | None) -> None:
    from gpucert.measure.probes.dcgm import dcgm_error

    err = dcgm_error({"error_id": eid, "error_category": 13, "error_severity": 2, "warning": "x"})
    assert err is not None
    assert err.name == (name or f"DCGM_FR_UNLISTED_{eid}")
