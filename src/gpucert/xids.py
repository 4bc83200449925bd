"""XIDs by what they mean: the ones an application can cause on a healthy GPU, and the ones that report a fault of
the GPU, its memory or its links. Pure data, no I/O.

Source: NVIDIA, "Xid Errors" (https://docs.nvidia.com/deploy/xid-errors/), its Xid catalog for Ampere and newer
GPUs (the mnemonic, description and resolution bucket of each code), and "Dynamic Page Retirement"
(https://docs.nvidia.com/deploy/dynamic-page-retirement/) for XIDs 48, 63 and 64. A baseline may excuse the first
kind (`health.applicationXids`), never the second: a GPU that reported one is not fit to hand over.
"""

from __future__ import annotations

__all__ = ["APPLICATION_XIDS", "HARDWARE_XIDS", "XID_SOURCE"]

XID_SOURCE = "NVIDIA Xid Errors catalog, https://docs.nvidia.com/deploy/xid-errors/"

# the catalog's "restart the application" codes: an illegal address or an exception raised by user code
APPLICATION_XIDS: dict[int, str] = {
    13: "graphics engine exception (an out-of-range access by the application)",
    31: "GPU memory page fault (an illegal address in the application)",
    43: "GPU stopped processing (the application's channel was reset)",
    45: "preemptive cleanup after an earlier error (the application was killed)",
    68: "video processor exception (the application's NVDEC work)",
}

# faults of the board: memory errors, page retirement and row remapping, links, the bus, the GPU's firmware
HARDWARE_XIDS: dict[int, str] = {
    48: "double-bit (uncorrectable) ECC error",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row-remapping event (a memory row retired)",
    64: "ECC page retirement or row-remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C (chip-to-chip) link error",
}
