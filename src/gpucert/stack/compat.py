"""CUDA toolkit release -> minimum Linux x86_64 driver, for full (not minor-version) compatibility.

Source: NVIDIA CUDA Toolkit Release Notes, table "CUDA Toolkit and Corresponding Driver Versions"
(https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/), GA release of each minor version.
"""

from __future__ import annotations

from gpucert.spec.versions import parse_version

__all__ = ["COMPAT_SOURCE", "MIN_DRIVER_FOR_CUDA", "cuda_of_driver", "min_driver_for_cuda"]

COMPAT_SOURCE = (
    "NVIDIA CUDA Toolkit Release Notes, table 'CUDA Toolkit and Corresponding Driver Versions' "
    "(Linux x86_64, GA releases)"
)

MIN_DRIVER_FOR_CUDA: dict[tuple[int, int], str] = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}


def min_driver_for_cuda(cuda: str) -> str | None:
    """The minimum driver for CUDA `cuda` (major.minor), or None when the table does not know that release."""
    v = parse_version(cuda)
    return MIN_DRIVER_FOR_CUDA.get((v[0], v[1] if len(v) > 1 else 0))


def cuda_of_driver(driver: str) -> str | None:
    """The newest CUDA release in the table that `driver` fully supports."""
    have = parse_version(driver)
    best: tuple[int, int] | None = None
    for cuda, minimum in MIN_DRIVER_FOR_CUDA.items():
        if have >= parse_version(minimum) and (best is None or cuda > best):
            best = cuda
    return f"{best[0]}.{best[1]}" if best else None
