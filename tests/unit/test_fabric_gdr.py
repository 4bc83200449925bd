"""probes/fabric_gdr.py: DMA-BUF asked as NCCL 2.30 asks it. The adapter's answer is the errno of
ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0): EBADF (the fd) means the kernel and driver support DMA-BUF, EOPNOTSUPP or
EPROTONOSUPPORT that they do not (NVIDIA/nccl src/transport/net_ib/gdr.cc, ibDmaBufSupportInitOnce); the GPU's
is cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124) (src/init.cc, dmaBufSupported), asked through
CuPy's driver module (cupy_backends/cuda/api/driver.pyx: deviceGet(int), deviceGetAttribute(int, Device))."""

from __future__ import annotations

import ctypes.util
import errno
import sys
import types
from typing import Any

import pytest

from gpucert.measure.probes.fabric_gdr import (
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
    NO_DEVICE,
    gpu_dmabuf,
    nic_dmabuf,
    nic_dmabuf_facts,
)


class Verbs:
    def __init__(self, answers: dict[str, int | None]) -> None:
        self.answers = answers

    def adapters(self) -> list[tuple[str, Any]]:
        return [(name, name) for name in self.answers]

    def dmabuf_errno(self, device: Any) -> int | None:
        return self.answers[device]


def test_an_adapter_supports_dmabuf_when_only_the_bad_fd_is_refused() -> None:
    answers = {
        "mlx5_0": errno.EBADF,  # the call exists and got as far as the fd: supported
        "mlx5_1": errno.EOPNOTSUPP,  # the driver has no DMA-BUF
        "mlx5_2": errno.EPROTONOSUPPORT,  # the kernel has none
        "mlx5_3": None,  # no ibv_reg_dmabuf_mr in this libibverbs, or no protection domain: not asked
    }
    assert nic_dmabuf(Verbs(answers)) == {"mlx5_0": True, "mlx5_1": False, "mlx5_2": False}


def test_an_adapter_not_asked_is_said_why_never_a_no() -> None:
    """rdma-core's libibverbs lists a verbs device only where its character device can be stat'ed
    (libibverbs/init.c, try_access_device: RDMA_CDEV_DIR "/dev/infiniband" + "/uverbsN"), so a pod without the
    RDMA device plugin's resource lists none: that is why, recorded, never "no DMA-BUF"."""
    assert nic_dmabuf_facts(Verbs({})) == ({}, NO_DEVICE)
    found, why = nic_dmabuf_facts(Verbs({"mlx5_0": errno.EBADF, "mlx5_3": None}))
    assert found == {"mlx5_0": True}
    assert why is not None
    assert why.startswith("mlx5_3: this libibverbs has no ibv_reg_dmabuf_mr")


def test_the_gpus_dmabuf_is_cudas_attribute_124(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, int]] = []

    def attribute(attrib: int, device: int) -> int:
        asked.append((attrib, device))
        if device == 2:
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE")  # a driver that does not know the attribute
        return int(device == 0)

    driver = types.ModuleType("cupy.cuda.driver")
    driver.deviceGet = lambda i: i  # type: ignore[attr-defined]
    driver.deviceGetAttribute = attribute  # type: ignore[attr-defined]
    cuda = types.ModuleType("cupy.cuda")
    cuda.driver = driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.driver", driver)
    assert gpu_dmabuf([0, 1, 2]) == {0: True, 1: False}  # GPU 2 not asked, not guessed
    assert CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED == 124
    assert {a for a, _ in asked} == {124}


def test_without_cupy_no_gpu_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert gpu_dmabuf([0]) == {}


@pytest.mark.skipif(ctypes.util.find_library("ibverbs") is None, reason="libibverbs is not installed here")
def test_the_real_libibverbs_loads_and_lists_no_adapter_on_a_machine_without_one() -> None:
    """rdma-core's libibverbs through ctypes: every symbol the question uses resolves (ibv_reg_dmabuf_mr since
    IBVERBS_1.12), and a machine without RDMA adapters has nothing to answer."""
    from gpucert.measure.probes.fabric_gdr import LibVerbs

    verbs = LibVerbs()
    assert verbs.reg is not None
    assert verbs.adapters() == []
    assert nic_dmabuf(verbs) == {}
    assert nic_dmabuf_facts(verbs) == ({}, NO_DEVICE)
