"""XIDs by what they mean: the ones an application can cause on a healthy GPU, and the ones that report a fault of
the GPU, its memory or its links. Pure data, no I/O.

Source, every row: NVIDIA, "Analyzing Xid Errors with the Xid Catalog", Table 1 "Xids" (Ampere and newer GPUs:
A100, H100, B100, GB200), https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, read 2026-12-04.
Each row keeps the catalog's mnemonic, its description (in our words) and its "Resolution Bucket (Immediate
Action)"; XIDs 48, 63 and 64 also match "Dynamic Page Retirement" (https://docs.nvidia.com/deploy/
dynamic-page-retirement/, "Visibility", section XIDs). Cross-checked: every XID that DCGM's health watch fails a
GPU for (NVIDIA/DCGM testing/TestHealthMonitor.cpp, `m_devastatingXids`: 48, 74, 79, 94, 95, 119, 120, 140) is here.

How a code is sorted, from the catalog alone:
- application: the catalog says the fault is the user application's (or its abort) and the GPU stays usable
  (immediate action RESTART_APP, IGNORE or WORKFLOW_XID_45 with that wording in its trigger conditions);
- hardware: the catalog describes a memory (ECC, row remapping, retirement), link (NVLink, C2C, PCIe), bus or
  GPU micro-controller/firmware fault, or asks for a GPU reset or a bare-metal restart to clear it.
A baseline may excuse the first kind (`health.applicationXids`), never the second: a GPU that reported one is not
fit to hand over. Codes in neither table (copy-engine and video-engine exceptions, driver firmware errors, ...) are
left to the baseline's author; the catalog's buckets for them are not a verdict on the GPU.
"""

from __future__ import annotations

__all__ = ["APPLICATION_XIDS", "HARDWARE_XIDS", "XID_SOURCE"]

XID_SOURCE = "NVIDIA Xid catalog, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# the catalog's user-application faults: the application must restart, the GPU stays healthy
APPLICATION_XIDS: dict[int, str] = {
    13: "graphics engine exception, typically an out-of-bounds access by the application "
    "[ROBUST_CHANNEL_GR_EXCEPTION; RESTART_APP]",
    31: "GPU memory page fault, an illegal address access, typically an application bug "
    "[ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT; RESTART_APP]",
    43: "GPU stopped processing: the application hit a software-induced fault, the GPU stays healthy "
    "[ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR; IGNORE]",
    45: "preemptive cleanup after the application was aborted (Ctrl-C, kill, GPU reset) or an earlier error "
    "[ROBUST_CHANNEL_PREEMPTIVE_REMOVAL; WORKFLOW_XID_45]",
    68: "NVDEC0 (video decoder) exception in the application's work [ROBUST_CHANNEL_NVDEC0_ERROR; RESTART_APP]",
}

# faults of the board: memory errors and their repair, links, the bus, the GPU's micro-controllers and firmware
HARDWARE_XIDS: dict[int, str] = {
    46: "GPU stopped processing, the GPU must be reset [ROBUST_CHANNEL_GPU_TIMEOUT_ERROR; RESET_GPU]",
    48: "double-bit (uncorrectable) ECC error, a GPU reset or node reboot clears it "
    "[ROBUST_CHANNEL_GPU_ECC_DBE; WORKFLOW_XID_48]",
    61: "internal micro-controller (PMU) breakpoint; listed unused on A100/H100/B100/GB200 [PMU_BREAKPOINT]",
    62: "internal micro-controller halt [PMU_HALT_ERROR; RESET_GPU]",
    63: "GPU memory remapping (or page retirement) event after an ECC memory error "
    "[INFOROM_DRAM_RETIREMENT_EVENT; IGNORE]",
    64: "GPU memory remapping (or page retirement) failure [INFOROM_DRAM_RETIREMENT_FAILURE; RESET_GPU]",
    74: "NVLink error on a link to another GPU or NVSwitch, a GPU reset or node reboot clears it "
    "[NVLINK_ERROR; WORKFLOW_NVLINK_ERR]",
    79: "GPU has fallen off the bus: not reachable over PCI Express [ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS; "
    "RESTART_BM]",
    92: "high single-bit ECC error rate [EXCESSIVE_SBE_INTERRUPTS; IGNORE, investigate: CONTACT_SUPPORT]",
    94: "contained memory error (one application killed; reset the GPU when convenient) "
    "[ROBUST_CHANNEL_CONTAINED_ERROR; RESTART_APP]",
    95: "uncontained memory error, the GPU must be reset [ROBUST_CHANNEL_UNCONTAINED_ERROR; RESET_GPU]",
    109: "context switch timeout [ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR; RESET_GPU]",
    110: "security fault, uncommon unless the hardware failed [SEC_FAULT_ERROR; RESET_GPU]",
    119: "GSP (GPU System Processor) RPC timeout [GSP_RPC_TIMEOUT; RESET_GPU]",
    120: "error in code running on the GSP [GSP_ERROR; RESET_GPU]",
    121: "corrected errors on the C2C NVLink to a Grace CPU (GB200) [C2C_ERROR; IGNORE, investigate: CONTACT_SUPPORT]",
    136: "NVLink link training failed [ALI_TRAINING_FAIL; RESET_GPU]",
    140: "uncorrectable ECC error that escaped page offlining or row remapping "
    "[UNRECOVERABLE_ECC_ERROR_ESCAPE; RESET_GPU]",
    143: "GPU initialization error [GPU_INIT_ERROR; RESET_GPU]",
    144: "NVLink SAW error [NVLINK_SAW_ERROR; WORKFLOW_NVLINK5_ERR]",
    145: "NVLink RLW error [NVLINK_RLW_ERROR; WORKFLOW_NVLINK5_ERR]",
    146: "NVLink TLW error [NVLINK_TLW_ERROR; WORKFLOW_NVLINK5_ERR]",
    147: "NVLink TREX error [NVLINK_TREX_ERROR; WORKFLOW_NVLINK5_ERR]",
    148: "NVLink NVLPW_CTRL error [NVLINK_NVLPW_CTRL_ERROR; WORKFLOW_NVLINK5_ERR]",
    149: "NVLink NETIR error [NVLINK_NETIR_ERROR; WORKFLOW_NVLINK5_ERR]",
    150: "NVLink MSE error [NVLINK_MSE_ERROR; WORKFLOW_NVLINK5_ERR]",
    156: "resource retirement event [RESOURCE_RETIREMENT_EVENT; RESET_GPU]",
    157: "resource retirement failure: no repair resources left [RESOURCE_RETIREMENT_FAILURE; IGNORE, investigate: "
    "CONTACT_SUPPORT]",
    158: "GPU fatal timeout [GPU_FATAL_TIMEOUT; RESET_GPU]",
    171: "uncorrectable DRAM error, detail to XID 48 [UNCORRECTABLE_DRAM_ERROR]",
    172: "uncorrectable SRAM error, detail to XID 48 [UNCORRECTABLE_SRAM_ERROR]",
}
