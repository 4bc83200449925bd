"""`dcgmi diag -r LEVEL -j` output: DCGM 3.x and 4.x JSON into the evidence's DcgmEvidence.

Facts from DCGM's sources: 3.x roots at "DCGM GPU Diagnostic" with display names and `gpu_ids`; 4.x roots at
"DCGM Diagnostic" with `entity_id` per result and a `test_summary` per test, which can say Fail while every GPU
result says Pass (DCGM issue 253), so both are kept. Status strings are Pass, Skip and Fail (a warning prints Fail).
A 4.x warning carries `error_id`, `error_category` and `error_severity` (dcgm_errors.h): they are kept with
DCGM's names, because the id is what a vendor looks up, and the severity says whether to isolate the GPU.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

from gpucert.measure.evidence import DcgmError, DcgmEvidence, DcgmGpuResult, DcgmTestResult
from gpucert.measure.probes.dcgm_boards import tie_to_boards

__all__ = [
    "DCGMI_EXIT_CODES",
    "DCGM_ERRORS_VERSION",
    "DCGM_FR",
    "dcgm_error",
    "dcgm_serials",
    "parse_diag",
    "plugin_set",
    "run_diag",
    "worst_status",
]

# dcgmError_t as DCGM 4.5.2 declares it (NVIDIA/DCGM v4.5.2, dcgmlib/dcgm_errors.h): DCGM_FR_<name> by id,
# 0 to 129 (ids are only ever appended; 10, 12 and 43 carry their 4.x names, CLOCKS_EVENT_*). An id past the table
# (a newer DCGM) is kept as DCGM_FR_UNLISTED_<id>; DCGM_ERRORS_VERSION says which DCGM the table is from.
DCGM_ERRORS_VERSION = "4.5.2"
DCGM_FR = (  # noqa: SIM905 - a table transcribed from dcgm_errors.h, one name per id
    "OK UNKNOWN UNRECOGNIZED PCI_REPLAY_RATE VOLATILE_DBE_DETECTED VOLATILE_SBE_DETECTED PENDING_PAGE_RETIREMENTS "
    "RETIRED_PAGES_LIMIT RETIRED_PAGES_DBE_LIMIT CORRUPT_INFOROM CLOCKS_EVENT_THERMAL POWER_UNREADABLE "
    "CLOCKS_EVENT_POWER NVLINK_ERROR_THRESHOLD NVLINK_DOWN NVSWITCH_FATAL_ERROR NVSWITCH_NON_FATAL_ERROR "
    "NVSWITCH_DOWN NO_ACCESS_TO_FILE NVML_API DEVICE_COUNT_MISMATCH BAD_PARAMETER CANNOT_OPEN_LIB DENYLISTED_DRIVER "
    "NVML_LIB_BAD GRAPHICS_PROCESSES HOSTENGINE_CONN FIELD_QUERY BAD_CUDA_ENV PERSISTENCE_MODE LOW_BANDWIDTH "
    "HIGH_LATENCY CANNOT_GET_FIELD_TAG FIELD_VIOLATION FIELD_THRESHOLD FIELD_VIOLATION_DBL FIELD_THRESHOLD_DBL "
    "UNSUPPORTED_FIELD_TYPE FIELD_THRESHOLD_TS FIELD_THRESHOLD_TS_DBL THERMAL_VIOLATIONS THERMAL_VIOLATIONS_TS "
    "TEMP_VIOLATION CLOCKS_EVENT_VIOLATION INTERNAL PCIE_GENERATION PCIE_WIDTH ABORTED TEST_DISABLED CANNOT_GET_STAT "
    "STRESS_LEVEL CUDA_API FAULTY_MEMORY CANNOT_SET_WATCHES CUDA_UNBOUND ECC_DISABLED MEMORY_ALLOC CUDA_DBE "
    "MEMORY_MISMATCH CUDA_DEVICE ECC_UNSUPPORTED ECC_PENDING MEMORY_BANDWIDTH TARGET_POWER API_FAIL API_FAIL_GPU "
    "CUDA_CONTEXT DCGM_API CONCURRENT_GPUS TOO_MANY_ERRORS NVLINK_CRC_ERROR_THRESHOLD NVLINK_ERROR_CRITICAL "
    "ENFORCED_POWER_LIMIT MEMORY_ALLOC_HOST GPU_OP_MODE NO_MEMORY_CLOCKS NO_GRAPHICS_CLOCKS HAD_TO_RESTORE_STATE "
    "L1TAG_UNSUPPORTED L1TAG_MISCOMPARE ROW_REMAP_FAILURE UNCONTAINED_ERROR EMPTY_GPU_LIST "
    "DBE_PENDING_PAGE_RETIREMENTS UNCORRECTABLE_ROW_REMAP PENDING_ROW_REMAP BROKEN_P2P_MEMORY_DEVICE "
    "BROKEN_P2P_WRITER_DEVICE NVSWITCH_NVLINK_DOWN EUD_BINARY_PERMISSIONS EUD_NON_ROOT_USER EUD_SPAWN_FAILURE "
    "EUD_TIMEOUT EUD_ZOMBIE EUD_NON_ZERO_EXIT_CODE EUD_TEST_FAILED FILE_CREATE_PERMISSIONS PAUSE_RESUME_FAILED "
    "PCIE_H_REPLAY_VIOLATION GPU_EXPECTED_NVLINKS_UP NVSWITCH_EXPECTED_NVLINKS_UP XID_ERROR SBE_VIOLATION "
    "DBE_VIOLATION PCIE_REPLAY_VIOLATION SBE_THRESHOLD_VIOLATION DBE_THRESHOLD_VIOLATION "
    "PCIE_REPLAY_THRESHOLD_VIOLATION CUDA_FM_NOT_INITIALIZED SXID_ERROR GFLOPS_THRESHOLD_VIOLATION NAN_VALUE "
    "FABRIC_MANAGER_TRAINING_ERROR BROKEN_P2P_PCIE_MEMORY_DEVICE BROKEN_P2P_PCIE_WRITER_DEVICE "
    "BROKEN_P2P_NVLINK_MEMORY_DEVICE BROKEN_P2P_NVLINK_WRITER_DEVICE TEST_SKIPPED SRAM_THRESHOLD "
    "NVLINK_EFFECTIVE_BER_THRESHOLD FALLEN_OFF_BUS NVLINK_SYMBOL_BER_THRESHOLD IMEX_UNHEALTHY FABRIC_PROBE_STATE "
    "BINARY_PERMISSIONS GPU_RECOVERY_RESET GPU_RECOVERY_REBOOT GPU_RECOVERY_DRAIN_P2P GPU_RECOVERY_DRAIN_RESET "
    "NCCL_ERROR "
).split()
# dcgmErrorCategory_t and dcgmErrorSeverity_t
_CATEGORIES = (  # noqa: SIM905 - a table transcribed from dcgm_errors.h, one name per id
    "NONE PERF_THRESHOLD PERF_VIOLATION SOFTWARE_CONFIG SOFTWARE_LIBRARY SOFTWARE_XID SOFTWARE_CUDA SOFTWARE_EUD "
    "SOFTWARE_OTHER HARDWARE_THERMAL HARDWARE_MEMORY HARDWARE_NVLINK HARDWARE_NVSWITCH HARDWARE_PCIE HARDWARE_POWER "
    "HARDWARE_OTHER INTERNAL_OTHER "
).split()
_SEVERITIES = (  # noqa: SIM905 - a table transcribed from dcgm_errors.h, one name per id
    "NONE MONITOR ISOLATE UNKNOWN TRIAGE CONFIG RESET "
).split()

DCGMI_EXIT_CODES = {
    0: "ok",
    205: "a test recorded an isolate-severity error",
    217: "a diagnostic is already running",
    226: "a test recorded an error",
    235: "the connection to the host engine is not valid",
    242: "no tests ran",
    254: "command-line error",
}

# DCGM 3.x display names -> 4.x test names; 3.x "Deployment" checks together are 4.x's `software`
_LEGACY_NAMES = {
    "pcie": "pcie",
    "gpu memory": "memory",
    "memory": "memory",
    "diagnostic": "diagnostic",
    "eud test": "eud",
    "targeted stress": "targeted_stress",
    "targeted power": "targeted_power",
    "memory bandwidth": "memory_bandwidth",
    "sm stress": "sm_stress",
    "memtest": "memtest",
    "pulse test": "pulse_test",
    "nvbandwidth": "nvbandwidth",
}
_RANK = {"Fail": 2, "Pass": 1, "Skip": 0}


def _status(value: Any) -> str:
    s = str(value).strip().capitalize()
    return "Fail" if s in ("Fail", "Warn", "Warning", "Error") else s if s in _RANK else "Fail"


def worst_status(statuses: list[str]) -> str | None:
    return max(statuses, key=lambda s: _RANK.get(s, 2)) if statuses else None


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    out = []
    for item in value:
        out.append(item.get("warning", str(item)) if isinstance(item, dict) else str(item))
    return out


def _named(names: list[str], value: Any) -> str | None:
    return names[value] if isinstance(value, int) and 0 <= value < len(names) else None


def dcgm_error(warning: dict[str, Any]) -> DcgmError | None:
    """The DCGM_FR_* error a 4.x warning carries, with DCGM's names; None for a warning without an id."""
    eid = warning.get("error_id")
    if not isinstance(eid, int):
        return None
    cat, sev = warning.get("error_category"), warning.get("error_severity")
    return DcgmError(
        id=eid,
        name="DCGM_FR_" + (_named(DCGM_FR, eid) or f"UNLISTED_{eid}"),
        category=cat if isinstance(cat, int) else None,
        category_name=_named(_CATEGORIES, cat),
        severity=sev if isinstance(sev, int) else None,
        severity_name=_named(_SEVERITIES, sev),
        message=str(warning.get("warning", "")),
    )


def _errors(value: Any) -> list[DcgmError]:
    items = value if isinstance(value, list) else []
    return [e for e in (dcgm_error(w) for w in items if isinstance(w, dict)) if e is not None]


def _name(raw: str, category: str) -> str:
    if raw.islower() and " " not in raw:
        return raw
    if category == "Deployment":
        return "software"
    return _LEGACY_NAMES.get(raw.lower(), re.sub(r"\W+", "_", raw.lower()).strip("_"))


def dcgm_serials(doc: dict[str, Any]) -> dict[int, str]:
    """The serial dcgmi reports for each of its GPU ids: 4.x in `entity_groups` (`serial_num`, left out where
    blank: HelperJsonAddEntities, dcgmi/Diag.cpp, DCGM 4.5.2), 3.3 in the root's "GPU Device Serials" keyed by the
    id as a string (HelperJsonBuildOutput, dcgmi/Diag.cpp, DCGM 3.3.9); DCGM 3.0 to 3.2 report none."""
    serials: dict[int, str] = {}
    for group in doc.get("entity_groups") or []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            for ent in group.get("entities") or []:
                if isinstance(ent, dict) and "serial_num" in ent:
                    serials[int(ent["entity_id"])] = str(ent["serial_num"])
    legacy = doc.get("GPU Device Serials")
    for key, serial in legacy.items() if isinstance(legacy, dict) else []:
        if str(key).isdigit():
            serials.setdefault(int(key), str(serial))
    return serials


def parse_diag(doc: dict[str, Any], *, level: int, exit_code: int | None = None) -> DcgmEvidence:
    """Parse one `dcgmi diag -j` document (3.x or 4.x), keeping the raw document beside the results."""
    root = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))
    if not isinstance(root, dict):
        return DcgmEvidence(
            level=level,
            exit_code=exit_code,
            raw=doc,
            runtime_error="not a dcgmi diag document (no 'DCGM Diagnostic' key)",
        )
    version = (doc.get("metadata") or {}).get("version") or root.get("version") or doc.get("version")  # 4.x, 3.3
    serials = dcgm_serials(doc)
    merged: dict[str, dict[str, Any]] = {}
    for category in root.get("test_categories") or []:
        for test in category.get("tests") or []:
            name = _name(test.get("name", "?"), category.get("category", ""))
            entry = merged.setdefault(name, {"summary": [], "gpus": {}, "info": []})
            if "test_summary" in test:
                entry["summary"].append(_status(test["test_summary"].get("status")))
                entry["info"] += _texts(test["test_summary"].get("info"))
            for res in test.get("results") or []:
                status = _status(res.get("status"))
                warnings = _texts(res.get("warnings", res.get("warning")))
                errors = _errors(res.get("warnings"))
                if "entity_id" in res and res.get("entity_group", "GPU") == "GPU":
                    ids = [int(res["entity_id"])]
                elif "gpu_ids" in res:
                    ids = [int(x) for x in str(res["gpu_ids"]).split(",") if x.strip()]
                else:  # a 3.x deployment check: it holds for the node
                    entry["summary"].append(status)
                    entry["info"] += warnings
                    continue
                for gpu in ids:
                    prev = entry["gpus"].get(gpu)
                    st = worst_status([status, prev["status"]]) if prev else status
                    entry["gpus"][gpu] = {
                        "status": st,
                        "warnings": (prev["warnings"] if prev else []) + warnings,
                        "errors": (prev["errors"] if prev else []) + errors,
                    }
    results = {
        name: DcgmTestResult(
            summary=worst_status(e["summary"]),
            gpus={
                g: DcgmGpuResult(
                    status=r["status"], warnings=r["warnings"], errors=r["errors"], serial=serials.get(g), dcgm_id=g
                )
                for g, r in sorted(e["gpus"].items())
            },
            info=e["info"],
        )
        for name, e in merged.items()
    }
    return DcgmEvidence(
        level=level,
        version=version,
        exit_code=exit_code,
        results=results,
        runtime_error=root.get("runtime_error"),
        raw=doc,
    )


# Where DCGM 4 installs its diagnostic plugins, one folder per CUDA major (TestFramework::GetPluginUsingDriverDir,
# nvvs/src/TestFramework.cpp, and GetDefaultSearchPaths, nvvs/plugin_src/common/PluginCommon.cpp, DCGM 4.5.2)
PLUGIN_ROOT = "/usr/libexec/datacenter-gpu-manager-4/plugins"
MAX_CUDA_MAJOR = 13  # MAX_CUDA_MAJOR_VERSION, common/DcgmBuildInfo.hpp, DCGM 4.5.2
_OLD_ARCHES = ("Maxwell", "Pascal", "Volta")  # below SM 7.5: CUDA 13.0 drivers still run them with cuda12


def plugin_set(cuda_driver_version: str | None, architecture: str | None = None) -> str | None:
    """The DCGM plugin folder (`cuda12`, `cuda13`) DCGM 4.5 loads for this driver, as it chooses it.

    TestFramework::GetPluginCudaDirExtension (DCGM 4.5.2): the driver's CUDA major picks the folder; a major past
    13 falls back to cuda13; Maxwell, Pascal and Volta under a CUDA 13.0 driver use cuda12.
    """
    if not cuda_driver_version:
        return None
    major, _, minor = cuda_driver_version.partition(".")
    if not major.isdigit():
        return None
    n = min(int(major), MAX_CUDA_MAJOR)
    if n == 13 and minor.split(".")[0] == "0" and architecture in _OLD_ARCHES:
        n = 12
    return f"cuda{n}"


def working_dir(env: dict[str, str]) -> str:
    """A directory the diagnostic may write in: `$DCGM_HOME_DIR` (the probe pod's emptyDir), else a fresh one.

    DCGM's software test fails with DCGM_FR_FILE_CREATE_PERMISSIONS unless its working directory is writable
    (`euidaccess(".", W_OK)`, nvvs/src/Software.cpp, DCGM 4.5.2), and writes its logs under DCGM_HOME_DIR
    (GetLogFilePath, common/DcgmUtilities.cpp; /var/log/nvidia-dcgm when unset, root's).
    """
    import os
    import tempfile

    home = env.get("DCGM_HOME_DIR")
    if home:
        with contextlib.suppress(OSError):
            os.makedirs(home, exist_ok=True)
        if os.access(home, os.W_OK | os.X_OK):
            return home
    return tempfile.mkdtemp(prefix="gpucert-dcgm-")


def _missing_plugins(plugins: str | None, root: str) -> str | None:
    import os

    if plugins is None or not os.path.isdir(root) or os.path.isdir(os.path.join(root, plugins)):
        return None
    return (
        f"DCGM's {plugins} plugins are not installed ({root}/{plugins} is missing) but this node's driver needs "
        f"them: install datacenter-gpu-manager-4-{plugins} in the probe image (deploy/Dockerfile)"
    )


def run_diag(
    level: int,
    *,
    serials: Mapping[int, str | None],
    host: str | None = None,
    timeout_s: float = 7200,
    dcgmi: str = "dcgmi",
    cuda_driver_version: str | None = None,
    plugin_root: str = PLUGIN_ROOT,
) -> DcgmEvidence:
    """Run `dcgmi diag -r LEVEL -j` and parse it. Raises FileNotFoundError when dcgmi is not installed.

    `serials` are this node's boards (NVML index: serial, None where NVML has none): DCGM's GPU ids are its own,
    so each entry is filed under the board its serial names (`tie_to_boards`).
    It runs in a writable working directory with DCGM_HOME_DIR there, and the evidence names the plugin set
    this node's driver makes DCGM load (a remote `host`'s engine loads its own: then it is not known here).
    """
    import json
    import os
    import shutil
    import subprocess

    exe = shutil.which(dcgmi)
    if exe is None:
        raise FileNotFoundError(f"{dcgmi} is not installed on this node (DCGM provides it)")
    plugins = None if host else plugin_set(cuda_driver_version)
    missing = _missing_plugins(plugins, plugin_root)
    if missing:
        return DcgmEvidence(level=level, plugins=plugins, runtime_error=missing)
    cmd = [exe, "diag", "-r", str(level), "-j"] + (["--host", host] if host else [])
    env = dict(os.environ)
    env["DCGM_HOME_DIR"] = cwd = working_dir(env)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return DcgmEvidence(
            level=level, plugins=plugins, runtime_error=f"dcgmi diag -r {level} did not finish in {timeout_s:.0f} s"
        )
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        meaning = DCGMI_EXIT_CODES.get(proc.returncode, "unknown exit code")
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return DcgmEvidence(
            level=level,
            exit_code=proc.returncode,
            plugins=plugins,
            runtime_error=f"dcgmi exited {proc.returncode} ({meaning}) without JSON: {tail[0]}",
        )
    parsed = parse_diag(doc, level=level, exit_code=proc.returncode).model_copy(update={"plugins": plugins})
    if parsed.runtime_error is None and not parsed.results and proc.returncode:
        meaning = DCGMI_EXIT_CODES.get(proc.returncode, "unknown exit code")
        parsed = parsed.model_copy(update={"runtime_error": f"dcgmi exited {proc.returncode} ({meaning})"})
    return tie_to_boards(parsed, serials, local=host is None)
