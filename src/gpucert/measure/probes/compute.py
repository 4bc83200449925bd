"""GEMM throughput per dtype: square n x n x n matrix multiplies, 2·n³ FLOPs each."""

from __future__ import annotations

from gpucert.measure.evidence import Measurement
from gpucert.measure.probes.device import Device, NumpyDevice
from gpucert.measure.probes.timing import Budget, time_region

__all__ = ["DEFAULT_N", "gemm_throughput"]

DEFAULT_N = 8192  # fills every SM of an H100/H200 with tiles; 1.1 TFLOP per GEMM


def gemm_throughput(device: Device, dtype: str, budget: Budget, n: int = DEFAULT_N) -> Measurement:
    a, b, c = device.gemm_operands(n, dtype)
    flops = 2 * n * n * n  # one multiply and one add per (i, j, k)
    with device.blas():  # the cuBLAS handle is made, used and destroyed in this thread
        seconds = time_region(device, lambda: device.gemm(a, b, c, n, dtype), budget)
    params: dict[str, object] = {"n": n, "dtype": dtype, "flops_per_rep": flops, "device": device.name}
    if isinstance(device, NumpyDevice) and dtype in ("bf16", "tf32"):
        params["emulated"] = "float32 on the CPU: numpy has no bf16 or tf32"
    return Measurement(unit="TFLOP/s", samples=[flops / t / 1e12 for t in seconds], params=params)
