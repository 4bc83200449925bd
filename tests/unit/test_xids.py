"""The XID table pinned to NVIDIA's own catalog.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog", Table 1 "Xids" (Ampere and newer),
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, read 2026-12-04. Each case quotes the row's
mnemonic and immediate-action bucket, and the words of its description or trigger conditions that decide the kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucert.evaluate.xids import APPLICATION_XIDS, HARDWARE_XIDS, XID_SOURCE

ROOT = Path(__file__).resolve().parents[2]

# (code, mnemonic, bucket): the catalog's rows for faults of the GPU, its memory, links or firmware
HARDWARE_ROWS = [
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"),  # "GPU stopped processing"
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),  # "Double Bit ECC Error"
    (62, "PMU_HALT_ERROR", "RESET_GPU"),  # "Internal micro-controller halt"
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),  # "GPU memory remapping event"
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"),  # "GPU memory remapping failure"
    (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),  # "NVLINK Error"
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),  # "GPU has fallen off the bus"
    (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE"),  # "High single-bit ECC error rate"
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),  # "Contained memory error"
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),  # "Uncontained memory error"
    (119, "GSP_RPC_TIMEOUT", "RESET_GPU"),  # "GSP RPC Timeout"
    (120, "GSP_ERROR", "RESET_GPU"),  # "GSP Error"
    (121, "C2C_ERROR", "IGNORE"),  # "C2C Error": corrected errors on the C2C NVLink to a Grace CPU
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"),  # "ECC Unrecovered Error"
    (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR"),  # "NVLINK: NETIR Error"
]

# the catalog's user-application faults: "general user application faults" (13), "illegal address access ...
# typically application-level bugs" (31), "user application hits a software induced fault ... The GPU remains in a
# healthy state" (43), "the user application aborts" (45), "NVDEC0 Exception" with RESTART_APP (68)
APPLICATION_ROWS = [
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP"),
]


@pytest.mark.parametrize(("code", "mnemonic", "bucket"), HARDWARE_ROWS)
def test_hardware_rows_name_the_catalogs_mnemonic_and_bucket(code: int, mnemonic: str, bucket: str) -> None:
    assert code not in APPLICATION_XIDS
    assert f"[{mnemonic}; {bucket}" in HARDWARE_XIDS[code]


@pytest.mark.parametrize(("code", "mnemonic", "bucket"), APPLICATION_ROWS)
def test_application_rows_name_the_catalogs_mnemonic_and_bucket(code: int, mnemonic: str, bucket: str) -> None:
    assert code not in HARDWARE_XIDS
    assert f"[{mnemonic}; {bucket}]" in APPLICATION_XIDS[code]


def test_rows_say_what_the_catalog_says() -> None:
    # 68 is the NVDEC0 exception (60 is the catalog's "Video processor exception"); 121 reports corrected errors
    assert "NVDEC0" in APPLICATION_XIDS[68]
    assert "corrected" in HARDWARE_XIDS[121]
    assert "uncontained memory error" in HARDWARE_XIDS[95]
    assert XID_SOURCE.endswith("/deploy/xid-errors/analyzing-xid-catalog.html")


def test_a_baseline_excusing_an_escaped_uncorrectable_ecc_error_is_refused(tmp_path: Path) -> None:
    from gpucert.errors import ConfigError
    from gpucert.spec.baseline import load_baseline

    doc = yaml.safe_load((ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml").read_text())
    doc["health"]["applicationXids"] = [13, 140]
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as exc:
        load_baseline(path)
    assert "health.applicationXids[1]" in str(exc.value)
    assert "XID 140 is a fault of the GPU" in str(exc.value)


def test_every_xid_dcgm_fails_a_gpu_for_is_a_hardware_xid() -> None:
    # NVIDIA/DCGM testing/TestHealthMonitor.cpp (commit 28bfbd4c97413d4aec249cdd9543a67d24f95b78),
    # m_devastatingXids: the XIDs DCGM's health watch answers with DCGM_HEALTH_RESULT_FAIL on every subsystem
    dcgm_devastating = {48, 74, 79, 94, 95, 119, 120, 140}
    assert dcgm_devastating <= set(HARDWARE_XIDS)
    assert not dcgm_devastating & set(APPLICATION_XIDS)
