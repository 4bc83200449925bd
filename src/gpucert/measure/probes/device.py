"""The probe device protocol: what a timing protocol needs from an accelerator, and two implementations.

`CupyDevice` runs on an NVIDIA GPU (CUDA events, cuBLAS gemmEx, pinned host memory, peer copies); `NumpyDevice`
runs the same operations on the CPU with the host clock, so the timing protocol and the byte and FLOP accounting
are exercised by the tests on a machine without a GPU. Neither fakes the arithmetic: a copy copies, a GEMM
multiplies. cupy is imported lazily, here only.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator, MutableMapping
from typing import Any, Protocol

import numpy as np

from gpucert.errors import ConfigError
from gpucert.measure.probes.hostmem import first_touched, registered

__all__ = ["DTYPE_BYTES", "CupyDevice", "Device", "NumpyDevice", "missing_gpu_extra", "prepare_cuda_environment"]

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp32": 4, "fp64": 8}


def missing_gpu_extra(piece: str, exc: Exception) -> ConfigError:
    return ConfigError(f"{piece} is not available ({exc}); install the GPU extra: pip install 'gpucert[gpu]'")


def _writable(directory: str) -> bool:
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def prepare_cuda_environment(env: MutableMapping[str, str] | None = None) -> list[str]:
    """Set what CUDA and CuPy read when first loaded; call before either is imported. Returns what it changed.

    CUDA numbers devices fastest-first unless told PCI bus order, which is the order NVML uses: the runner also
    checks each pair by bus id. CuPy 14 creates its kernel cache (`$CUPY_CACHE_DIR`, else `~/.cupy/kernel_cache`)
    when `cupy` is imported, CuPy 13 at the first kernel it compiles; a probe pod's user may have no writable
    home, so an unwritable cache moves to a fresh temporary directory.
    """
    env = os.environ if env is None else env
    notes = []
    if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        notes.append("CUDA_DEVICE_ORDER=PCI_BUS_ID (the order NVML numbers GPUs in)")
    home = env.get("HOME") or os.path.expanduser("~")
    cache = env.get("CUPY_CACHE_DIR") or os.path.join(home, ".cupy", "kernel_cache")
    if not _writable(cache):
        env["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpucert-cupy-cache-")
        notes.append(f"CUPY_CACHE_DIR={env['CUPY_CACHE_DIR']} ({cache} is not writable for this user)")
    return notes


class Device(Protocol):
    """One accelerator (or the CPU standing in for one)."""

    name: str
    index: int
    l2_bytes: int
    pci_bus_id: str | None  # None where the device has no bus (the CPU): it is then matched to NVML by index

    def empty(self, nbytes: int) -> Any: ...
    def fill(self, buf: Any, value: float) -> None: ...
    def host_pinned(self, nbytes: int) -> Any: ...
    def copy(self, dst: Any, src: Any) -> None: ...
    def h2d(self, dst: Any, src: Any) -> None: ...
    def d2h(self, dst: Any, src: Any) -> None: ...
    def gemm_operands(self, n: int, dtype: str) -> tuple[Any, Any, Any]: ...
    def blas(self) -> contextlib.AbstractContextManager[None]: ...
    def gemm(self, a: Any, b: Any, c: Any, n: int, dtype: str) -> None: ...
    def event(self) -> Any: ...
    def record(self, event: Any) -> None: ...
    def elapsed_s(self, start: Any, end: Any) -> float: ...
    def synchronize(self) -> None: ...
    def can_access_peer(self, other: Device) -> bool: ...
    def peer_copy(self, dst_device: Device, dst: Any, src: Any) -> None: ...


class NumpyDevice:
    """The CPU as a device: host arrays, numpy copies and matmul, the host clock as events.

    bf16 and tf32 have no CPU type in numpy: their GEMM runs in float32 (`emulated` in the probe's params).
    """

    def __init__(self, index: int = 0, l2_bytes: int = 2 << 20, pci_bus_id: str | None = None) -> None:
        self.index = index
        self.name = f"cpu{index} (numpy)"
        self.l2_bytes = l2_bytes
        self.pci_bus_id = pci_bus_id

    def empty(self, nbytes: int) -> Any:
        return np.empty(nbytes, dtype=np.uint8)

    def fill(self, buf: Any, value: float) -> None:
        buf.view(np.uint8)[:] = int(value) & 0xFF

    def host_pinned(self, nbytes: int) -> Any:
        return first_touched(nbytes)  # where the GPU's buffer would be: on the calling thread's NUMA node

    def copy(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    h2d = copy
    d2h = copy

    def gemm_operands(self, n: int, dtype: str) -> tuple[Any, Any, Any]:
        np_dtype = {"fp16": np.float16, "fp64": np.float64}.get(dtype, np.float32)
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype(np_dtype)
        b = rng.standard_normal((n, n)).astype(np_dtype)
        return a, b, np.empty((n, n), dtype=np_dtype)

    def blas(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def gemm(self, a: Any, b: Any, c: Any, n: int, dtype: str) -> None:
        np.matmul(a, b, out=c)

    def event(self) -> list[float]:
        return [0.0]

    def record(self, event: Any) -> None:
        event[0] = time.perf_counter()

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(end[0] - start[0])

    def synchronize(self) -> None:
        return None

    def can_access_peer(self, other: Device) -> bool:
        return True

    def peer_copy(self, dst_device: Device, dst: Any, src: Any) -> None:
        np.copyto(dst, src)


# cuBLAS data and compute types (cublas_api.h, library_types.h)
_CUDA_R = {"fp16": 2, "bf16": 14, "tf32": 0, "fp32": 0, "fp64": 1}
_COMPUTE = {"fp16": 68, "bf16": 68, "tf32": 77, "fp32": 68, "fp64": 70}  # 32F, 32F_FAST_TF32, 64F
_STORAGE = {"fp16": "float16", "bf16": "uint16", "tf32": "float32", "fp32": "float32", "fp64": "float64"}


class CupyDevice:
    """One NVIDIA GPU through CuPy: CUDA events on the current stream, cuBLAS gemmEx for every dtype.

    cuBLAS runs on a handle of its own, made with `cublas.create()` by `blas()` in the thread that then calls
    gemmEx, and destroyed by it. Not `Device.cublas_handle`: CuPy keeps that one in a `threading.local` and
    destroys it when its thread ends (`Device._get_handle` and `Handle.__dealloc__`, cupy/cuda/device.pyx, CuPy
    13.6 and 14.2), and every probe runs in a watchdog thread of its own.
    """

    def __init__(self, index: int = 0) -> None:
        try:
            import cupy
        except ImportError as exc:
            raise missing_gpu_extra("CuPy", exc) from None
        self.cp = cupy
        self.index = index
        self.dev = cupy.cuda.Device(index)
        self.dev.use()
        props = cupy.cuda.runtime.getDeviceProperties(index)
        self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.l2_bytes = int(props.get("l2CacheSize", 50 << 20))
        self.pci_bus_id: str | None = str(self.dev.pci_bus_id)
        self._blas = threading.local()

    @staticmethod
    def bus_id_of(ordinal: int) -> str | None:
        """CUDA device `ordinal`'s PCI bus id without starting it (cudaDeviceGetPCIBusId needs no context): which
        board a device that cannot start is, to charge the failure to its NVML record."""
        try:
            import cupy

            return str(cupy.cuda.runtime.deviceGetPCIBusId(ordinal))
        except Exception:
            return None

    def empty(self, nbytes: int) -> Any:
        with self.dev:
            return self.cp.empty(nbytes, dtype=self.cp.uint8)

    def fill(self, buf: Any, value: float) -> None:
        with self.dev:
            buf.fill(int(value) & 0xFF)

    def host_pinned(self, nbytes: int) -> Any:
        """Page-locked host memory on the calling thread's NUMA node, outside CuPy's pinned pool (see hostmem)."""
        return registered(first_touched(nbytes), self.cp.cuda.runtime)

    def copy(self, dst: Any, src: Any) -> None:
        with self.dev:
            dst[...] = src

    def h2d(self, dst: Any, src: Any) -> None:
        with self.dev:
            dst.set(src, stream=self.cp.cuda.get_current_stream())

    def d2h(self, dst: Any, src: Any) -> None:
        with self.dev:
            src.get(out=dst, stream=self.cp.cuda.get_current_stream(), blocking=False)

    def gemm_operands(self, n: int, dtype: str) -> tuple[Any, Any, Any]:
        cp = self.cp
        with self.dev:
            if dtype == "bf16":  # bf16 has no CuPy dtype: the upper half of a float32's bits is a bf16 number

                def bf16() -> Any:
                    return (cp.random.standard_normal((n, n), dtype=cp.float32).view(cp.uint32) >> 16).astype(cp.uint16)

                return bf16(), bf16(), cp.empty((n, n), dtype=cp.uint16)
            st = cp.dtype(_STORAGE[dtype])
            return (
                cp.random.standard_normal((n, n), dtype=cp.float32).astype(st),
                cp.random.standard_normal((n, n), dtype=cp.float32).astype(st),
                cp.empty((n, n), dtype=st),
            )

    @contextlib.contextmanager
    def blas(self) -> Iterator[None]:
        """A cuBLAS handle of this thread's, for the GEMMs inside the block; destroyed after them."""
        from cupy_backends.cuda.libs import cublas

        with self.dev:
            handle = cublas.create()
        self._blas.handle = handle
        try:
            yield
        finally:
            del self._blas.handle
            with self.dev:
                cublas.destroy(handle)

    def gemm(self, a: Any, b: Any, c: Any, n: int, dtype: str) -> None:
        from cupy_backends.cuda.libs import cublas

        handle = getattr(self._blas, "handle", None)
        if handle is None:
            raise RuntimeError("CupyDevice.gemm runs inside `with device.blas():` (the thread's own cuBLAS handle)")
        one = np.array(1.0, dtype=np.float64 if dtype == "fp64" else np.float32)
        zero = np.zeros_like(one)
        t = _CUDA_R[dtype]
        with self.dev:
            cublas.gemmEx(  # sets the handle's stream to CuPy's current one first (_setStream, cublas.pyx)
                handle,
                cublas.CUBLAS_OP_N,
                cublas.CUBLAS_OP_N,
                n,
                n,
                n,
                one.ctypes.data,
                a.data.ptr,
                t,
                n,
                b.data.ptr,
                t,
                n,
                zero.ctypes.data,
                c.data.ptr,
                t,
                n,
                _COMPUTE[dtype],
                cublas.CUBLAS_GEMM_DEFAULT,
            )

    def event(self) -> Any:
        with self.dev:
            return self.cp.cuda.Event()

    def record(self, event: Any) -> None:
        with self.dev:
            event.record()

    def elapsed_s(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end)) / 1e3

    def synchronize(self) -> None:
        self.dev.synchronize()

    def can_access_peer(self, other: Device) -> bool:
        """Enable peer access to `other` where the topology allows it; False where it does not."""
        rt = self.cp.cuda.runtime
        if not rt.deviceCanAccessPeer(self.index, other.index):
            return False
        with self.dev:
            try:
                rt.deviceEnablePeerAccess(other.index)
            except rt.CUDARuntimeError as exc:  # already enabled is fine
                if "PeerAccessAlreadyEnabled" not in str(exc):
                    raise
        return True

    def peer_copy(self, dst_device: Device, dst: Any, src: Any) -> None:
        with self.dev:
            self.cp.cuda.runtime.memcpyPeerAsync(
                dst.data.ptr,
                dst_device.index,
                src.data.ptr,
                self.index,
                src.nbytes,
                self.cp.cuda.get_current_stream().ptr,
            )
