"""Host buffers for the PCIe probes: on the NUMA node of the thread that first touches them, page-locked in place.

CuPy's `alloc_pinned_memory` goes through its default `PinnedMemoryPool`, whose `malloc` hands back a freed block
of the same rounded size (cupy/cuda/pinned_memory.pyx; the pool is installed by cupy/__init__.py, CuPy 14.2): the
second GPU's buffer would be the first GPU's, on the first GPU's socket. Here every buffer is fresh anonymous
memory, first touched by the calling thread (the runner pins it to the GPU's NUMA node, and Linux's default local
policy puts each page on the node of the CPU that touches it first), then page-locked where it lies with
cudaHostRegister, and unregistered when the buffer is dropped. `page_nodes` reads back where the pages are
(move_pages(2) with no target nodes), so the evidence says which node the buffer was on, not which it should be.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import weakref
from typing import Any

import numpy as np

__all__ = ["HOST_REGISTER_PORTABLE", "first_touched", "page_nodes", "registered"]

PAGE = mmap.PAGESIZE
HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable (cuda_runtime_api.h): pinned for every CUDA context
_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}  # the syscall's number (asm/unistd_64.h; asm-generic/unistd.h)


def first_touched(nbytes: int) -> Any:
    """`nbytes` of fresh anonymous memory as a uint8 array, every page written once by this thread."""
    buf = np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8, count=nbytes)
    buf[::PAGE] = 0  # the first touch places the page
    return buf


def registered(buf: Any, runtime: Any) -> Any:
    """`buf` page-locked for DMA (cudaHostRegister) until it is dropped; `runtime` is cupy.cuda.runtime."""
    ptr = int(buf.ctypes.data)
    runtime.hostRegister(ptr, int(buf.nbytes), HOST_REGISTER_PORTABLE)
    # runs as the array dies, before it lets go of the mapping: unregistered, then unmapped
    weakref.finalize(buf, runtime.hostUnregister, ptr).atexit = False
    return buf


def page_nodes(buf: Any, samples: int = 16) -> list[int] | None:
    """The NUMA nodes a sample of `buf`'s pages are on (sorted, distinct); None where the kernel does not say."""
    number = _MOVE_PAGES.get(platform.machine())
    if number is None or buf.nbytes == 0:
        return None
    base, pages = int(buf.ctypes.data), max(1, buf.nbytes // PAGE)
    picks = sorted({base + (pages - 1) * k // max(1, samples - 1) * PAGE for k in range(samples)})
    addrs = (ctypes.c_void_p * len(picks))(*picks)
    status = (ctypes.c_int * len(picks))()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, 0, ctypes.c_ulong(len(picks)), addrs, None, status, 0) != 0:
        return None
    nodes = {s for s in status if s >= 0}  # a negative status is an errno for that page (-ENOENT: not present)
    return sorted(nodes) or None
