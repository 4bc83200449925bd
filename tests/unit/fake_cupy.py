"""A small CuPy for CupyDevice without a GPU, whose behaviour follows CuPy's own source where the probes rely on it.

- `Device.cublas_handle` is `Device._get_handle('cublas_handles', cublas.create, cublas.destroy)`: a dict in a
  `threading.local`, each handle wrapped in a `Handle` whose `__dealloc__` calls `cublas.destroy` (cupy/cuda/
  device.pyx, CuPy 14.2.0 lines 52-60 and 233-263; 13.6.0 the same). A thread's locals die with the thread, so the
  handle is destroyed when the thread that asked for it ends.
- `cublas.create` / `destroy` wrap cublasCreate / cublasDestroy; `gemmEx` calls `_setStream(handle)` and then
  cublasGemmEx (cupy_backends/cuda/libs/cublas.pyx, 14.2.0 lines 602-613, 666-668, 1639-1645). cuBLAS answers a
  destroyed handle with CUBLAS_STATUS_NOT_INITIALIZED; the fake raises that.
- `cuda.alloc_pinned_memory` goes through the default PinnedMemoryPool, which returns a freed block of the same
  rounded size (cupy/cuda/pinned_memory.pyx, PinnedMemoryPool.malloc; installed by cupy/__init__.py, 14.2.0).
- `runtime.hostRegister(ptr, size, flags)` / `hostUnregister(ptr)` / `deviceGetPCIBusId(ordinal)` are thin wrappers
  of the CUDA runtime calls (cupy_backends/cuda/api/runtime.pyx, 14.2.0 lines 402-409, 578-586).
"""

from __future__ import annotations

import os
import threading
import types
from typing import Any


class CublasError(RuntimeError):
    pass


class _Handle:  # device.pyx: destroys its handle when the thread-local dict holding it goes
    def __init__(self, fake: FakeCupy, handle: int) -> None:
        self.fake, self.handle = fake, handle

    def __del__(self) -> None:
        self.fake.destroy(self.handle)


class _Device:
    fake: FakeCupy  # set on the class each FakeCupy makes of it

    def __init__(self, index: int) -> None:
        self.id = index

    def use(self) -> None:
        return None

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None

    @property
    def pci_bus_id(self) -> str:
        return self.fake.buses[self.id]

    @property
    def cublas_handle(self) -> int:
        return self.fake.cublas_handle(self.id)


class FakeCupy:
    def __init__(self, buses: list[str]) -> None:
        self.buses = buses
        self.live: set[int] = set()  # cuBLAS handles created and not destroyed
        self.made: list[tuple[int, str]] = []  # (handle, thread name that created it)
        self.destroyed: list[int] = []
        self.gemms: list[tuple[int, str]] = []  # (handle, thread name)
        self.registered: dict[int, tuple[int, set[int]]] = {}  # ptr -> (size, CPUs the registering thread had)
        self.unregistered: list[int] = []
        self.pool_blocks: list[bytearray] = []
        self._next = 1000
        self._local = threading.local()
        self.module = self._module()

    # cupy_backends.cuda.libs.cublas
    def create(self) -> int:
        self._next += 1
        self.live.add(self._next)
        self.made.append((self._next, threading.current_thread().name))
        return self._next

    def destroy(self, handle: int) -> None:
        if handle not in self.live:
            raise CublasError("CUBLAS_STATUS_NOT_INITIALIZED (destroying a handle twice)")
        self.live.discard(handle)
        self.destroyed.append(handle)

    def gemm_ex(self, handle: int, *args: Any) -> None:
        if handle not in self.live:
            raise CublasError("CUBLAS_STATUS_NOT_INITIALIZED")
        self.gemms.append((handle, threading.current_thread().name))

    def _module(self) -> types.ModuleType:
        runtime = types.SimpleNamespace(
            getDeviceProperties=lambda i: {"name": b"NVIDIA H100 80GB HBM3", "l2CacheSize": 50 << 20},
            deviceGetPCIBusId=lambda i: self.buses[i],
            hostRegister=self.host_register,
            hostUnregister=self.unregistered.append,
        )
        device = type("Device", (_Device,), {"fake": self})
        cuda = types.SimpleNamespace(Device=device, runtime=runtime, alloc_pinned_memory=self.alloc_pinned_memory)
        cupy = types.ModuleType("cupy")
        cupy.cuda = cuda  # type: ignore[attr-defined]
        return cupy

    def alloc_pinned_memory(self, size: int) -> bytearray:  # the default pool: a freed block of the size comes back
        for block in self.pool_blocks:
            if len(block) == size:
                return block
        self.pool_blocks.append(bytearray(size))
        return self.pool_blocks[-1]

    def host_register(self, ptr: int, size: int, flags: int) -> None:
        self.registered[ptr] = (size, os.sched_getaffinity(0))

    def cublas_handle(self, device: int) -> int:  # Device._get_handle
        handles = getattr(self._local, "cublas_handles", None)
        if handles is None:
            handles = self._local.cublas_handles = {}
        entry = handles.get(device)
        if entry is None:
            entry = handles[device] = _Handle(self, self.create())
        return int(entry.handle)

    def cublas_module(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            create=self.create, destroy=self.destroy, gemmEx=self.gemm_ex, CUBLAS_OP_N=0, CUBLAS_GEMM_DEFAULT=-1
        )

    def install(self, monkeypatch: Any) -> None:
        import sys

        libs = types.ModuleType("cupy_backends.cuda.libs")
        libs.cublas = self.cublas_module()  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "cupy", self.module)
        monkeypatch.setitem(sys.modules, "cupy_backends", types.ModuleType("cupy_backends"))
        monkeypatch.setitem(sys.modules, "cupy_backends.cuda", types.ModuleType("cupy_backends.cuda"))
        monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", libs)
