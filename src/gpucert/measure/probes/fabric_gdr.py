"""DMA-BUF, the second way GPUDirect RDMA works (beside a peer-memory module): asked of the GPU and of every RDMA
adapter the way NCCL 2.30 asks (NVIDIA/nccl):
- the GPU: cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124) is non-zero (src/init.cc,
  dmaBufSupported), through CuPy's driver API;
- the adapter: ibv_reg_dmabuf_mr(pd, 0, 0, 0, fd=-1, 0) on a protection domain of it fails with EBADF when the
  kernel and the adapter's driver support DMA-BUF, with EOPNOTSUPP or EPROTONOSUPPORT when they do not
  (src/transport/net_ib/gdr.cc, ibDmaBufSupportInitOnce); a libibverbs without the call (before rdma-core 34,
  IBVERBS_1.12) has none.
Each answer that could not be asked is left out (the evaluator then has no DMA-BUF to credit), never guessed.
cupy and libibverbs are loaded lazily, here only.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

__all__ = [
    "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED",
    "NO_DEVICE",
    "LibVerbs",
    "Verbs",
    "gpu_dmabuf",
    "nic_dmabuf",
    "nic_dmabuf_facts",
]

CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124  # cuda.h, CUdevice_attribute (CUDA 11.7 and later)
UNSUPPORTED = (errno.EOPNOTSUPP, errno.EPROTONOSUPPORT)


def gpu_dmabuf(ordinals: Sequence[int]) -> dict[int, bool]:
    """Each CUDA device's DMA_BUF_SUPPORTED (by ordinal: with CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML's index)."""
    try:
        from cupy.cuda import driver
    except ImportError:
        return {}
    found = {}
    for i in ordinals:
        try:
            found[i] = bool(driver.deviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, driver.deviceGet(i)))
        except Exception:  # CUDADriverError: a driver before 11.7 does not know the attribute: not asked
            continue
    return found


class Verbs(Protocol):
    """What the DMA-BUF question needs of libibverbs: the adapters, and one registration tried on each."""

    def adapters(self) -> list[tuple[str, Any]]: ...

    def dmabuf_errno(self, device: Any) -> int | None:
        """The errno of ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) on a protection domain of `device` (0 if it
        succeeded), None when the call does not exist or no domain could be had."""
        ...


def nic_dmabuf(verbs: Verbs | None = None) -> dict[str, bool]:
    """Each RDMA adapter's DMA-BUF support, as NCCL decides it."""
    return nic_dmabuf_facts(verbs)[0]


NO_DEVICE = (
    "libibverbs lists no RDMA device in the pod: /dev/infiniband/uverbs* is not there (rdma-core opens the verbs "
    "devices there; the RDMA device plugin puts them in a pod that requests the pool's fabric.rails.resource)"
)


def nic_dmabuf_facts(verbs: Verbs | None = None) -> tuple[dict[str, bool], str | None]:
    """Each RDMA adapter's DMA-BUF support, as NCCL decides it, and why any adapter was not asked (None: every
    one listed was)."""
    try:
        verbs = verbs if verbs is not None else LibVerbs()
    except OSError as exc:  # no libibverbs in the image: the preflight's rdma step says so
        return {}, f"libibverbs could not be loaded: {exc}"
    adapters = verbs.adapters()
    if not adapters:
        return {}, NO_DEVICE
    found, unasked = {}, []
    for name, device in adapters:
        code = verbs.dmabuf_errno(device)
        if code is None:
            unasked.append(name)
        else:
            found[name] = code not in UNSUPPORTED
    if not unasked:
        return found, None
    why = "this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34+), or no protection domain could be had"
    return found, f"{', '.join(unasked)}: {why}"


class LibVerbs:
    """libibverbs through ctypes (rdma-core's verbs.h signatures)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libibverbs.so.1", use_errno=True)
        vp = ctypes.c_void_p
        lib.ibv_get_device_list.restype = ctypes.POINTER(vp)
        lib.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.ibv_free_device_list.argtypes = [ctypes.POINTER(vp)]
        lib.ibv_get_device_name.restype = ctypes.c_char_p
        lib.ibv_get_device_name.argtypes = [vp]
        lib.ibv_open_device.restype = vp
        lib.ibv_open_device.argtypes = [vp]
        lib.ibv_close_device.argtypes = [vp]
        lib.ibv_alloc_pd.restype = vp
        lib.ibv_alloc_pd.argtypes = [vp]
        lib.ibv_dealloc_pd.argtypes = [vp]
        self.lib = lib
        self.reg = getattr(lib, "ibv_reg_dmabuf_mr", None)
        if self.reg is not None:
            self.reg.restype = vp
            self.reg.argtypes = [vp, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]

    def adapters(self) -> list[tuple[str, Any]]:
        count = ctypes.c_int(0)
        devices = self.lib.ibv_get_device_list(ctypes.byref(count))
        if not devices:
            return []
        self._keep = devices  # freed in __del__: the device pointers live as long as the list
        return [(self.lib.ibv_get_device_name(devices[i]).decode(), devices[i]) for i in range(count.value)]

    @contextmanager
    def _pd(self, device: Any) -> Iterator[Any]:
        ctx = self.lib.ibv_open_device(device)
        if not ctx:
            yield None
            return
        pd = self.lib.ibv_alloc_pd(ctx)
        try:
            yield pd or None
        finally:
            if pd:
                self.lib.ibv_dealloc_pd(pd)
            self.lib.ibv_close_device(ctx)

    def dmabuf_errno(self, device: Any) -> int | None:
        if self.reg is None:
            return None
        with self._pd(device) as pd:
            if pd is None:
                return None
            ctypes.set_errno(0)
            mr = self.reg(pd, 0, 0, 0, -1, 0)
            return 0 if mr else ctypes.get_errno()

    def __del__(self) -> None:
        keep = getattr(self, "_keep", None)
        if keep:
            self.lib.ibv_free_device_list(keep)
