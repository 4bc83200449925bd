"""The probe pod's preflight: can this node run the probes at all? Checked once, before any probe.

A node whose image lacks the CUDA headers, whose pod has no NVML library, no writable home or no `dcgmi` would
otherwise fail every probe on its own, and the run would show N per-metric errors where there is one cause. Each
step here tries the smallest thing that exercises one dependency and, when it fails, says why and what to change:

  home     $HOME is writable (CuPy, NCCL and DCGM write there)
  cache    CuPy's kernel cache ($CUPY_CACHE_DIR) is writable
  nvml     nvidia-ml-py is importable and nvmlInit succeeds (the NVIDIA driver's libnvidia-ml.so.1)
  cupy     CuPy imports and sees the CUDA runtime (without NVML's driver: only that CuPy is installed)
  kernel   an elementwise kernel compiles (NVRTC and the CUDA headers) and runs on GPU 0
  cublas   a cuBLAS handle is created and destroyed
  nccl     CuPy has NCCL and reads its version               (only when the plan has the nccl probe)
  dcgmi    `dcgmi --version` runs                            (only when the plan has the dcgm probe)
  rdma     perftest's ib_write_bw (with --use_cuda) and rdma-core's ibv_devinfo run (only when the plan measures
           the fabric: a probe image without them is this node's one finding, not every fabric check's)

The NumPy device (tests, a CPU smoke run) checks home only. Each step runs under the watchdog: a driver that
hangs in nvmlInit or in the first context is a failed step, not a hung pod. The GPU steps (cupy to nccl) run in
a child process, so the probe process holds no CUDA context before DCGM's diagnostic, and a driver that crashes
the child fails a step instead of the pod. Imports nothing of the harness.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucert.measure.evidence import PreflightStep
from gpucert.measure.probes.watchdog import ProbeTimeout, within
from gpucert.spec.cluster import Probe

__all__ = [
    "NVML_FIXES",
    "RDMA_TOOLS",
    "STEP_FIXES",
    "Preflight",
    "nccl_version",
    "run_preflight",
    "steps_for",
    "summary",
]

STEP_S = 120.0  # what one step may take (the first CUDA context on a busy 8-GPU node takes seconds, not minutes)

GPU_EXTRA = "install the GPU extra in the probe image: pip install 'gpucert[gpu]'"
# the fix for a step that fails in a way not named below
STEP_FIXES = {
    "home": "give the probe pod a writable $HOME (an emptyDir mounted there, or HOME set to one)",
    "cache": "set CUPY_CACHE_DIR to a writable directory (an emptyDir)",
    "nvml": "run the pod with the NVIDIA container runtime (runtimeClassName: nvidia, as the GPU Operator sets up) "
    "so the driver's libnvidia-ml.so.1 is mounted, on a node whose NVIDIA driver is installed and loaded",
    "cupy": "use a CuPy for the node's CUDA major (cupy-cuda12x, or cupy-cuda13x on a CUDA 13 driver)",
    "kernel": "put the CUDA headers CuPy compiles with in the image (cuda-cudart-dev and cuda-cccl of the image's "
    "CUDA with CUDA_PATH pointing there, or pip install 'cupy-cuda12x[ctk]'), and check the driver supports the "
    "image's CUDA",
    "cublas": "put cuBLAS of CuPy's CUDA major in the image (nvidia-cublas-cu12, or the CUDA image's libcublas)",
    "nccl": "put NCCL in the image (pip install nvidia-nccl-cu12) or drop nccl from certify.probes",
    "dcgmi": "install DCGM 4 in the probe image (datacenter-gpu-manager-4-core) or drop dcgm from certify.probes",
    "rdma": "install perftest built with CUDA (ib_write_bw --use_cuda) and rdma-core's ibverbs-utils (ibv_devinfo) "
    "in the probe image, as deploy/Dockerfile does, or remove the pool's fabric section",
}
RDMA_TOOLS = ("ib_write_bw", "ibv_devinfo")
CHILD_FIX = (
    "run `python -m gpucert.measure.probes.preflight memory` in the probe image on that node to see the failure, "
    "and check that the node's driver supports the image's CUDA"
)
# pynvml's error classes (nvidia-ml-py 13, pynvml.py: `_extractNVMLErrorsAsClasses`) and what each means here
NVML_FIXES = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 is not in the container: " + STEP_FIXES["nvml"],
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded on the host: install or load the driver",
    "NVMLError_NoPermission": "the pod may not open /dev/nvidia*: request nvidia.com/gpu through the device plugin",
    "NVMLError_LibRmVersionMismatch": "the driver's user-space library and kernel module differ: reboot the node "
    "after the driver upgrade",
}


@dataclass
class Preflight:
    """The steps in order, and NVML (opened by the `nvml` step) for the probes that follow."""

    steps: list[PreflightStep] = field(default_factory=list)
    nvml: Any = None

    @property
    def failed(self) -> list[PreflightStep]:
        return [s for s in self.steps if not s.ok]


def summary(failed: list[PreflightStep]) -> str:
    """One line: each failed step, what went wrong and the fix."""
    return "; ".join(f"preflight {s.step} failed: {s.detail}; fix: {s.fix}" for s in failed)


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ProbeTimeout) else f"{type(exc).__name__}: {exc}".rstrip(": ")


def _writable(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryFile(dir=directory):
        return directory


class _Steps:
    def __init__(self, timeout_s: float) -> None:
        self.out = Preflight()
        self.timeout_s = timeout_s

    def run(self, step: str, fn: Callable[[], str], fix: Callable[[BaseException], str | None] | None = None) -> bool:
        try:
            detail = within(self.timeout_s, fn, f"preflight {step}")
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            hint = fix(exc) if fix is not None else None
            self.out.steps.append(PreflightStep(step=step, ok=False, detail=_why(exc), fix=hint or STEP_FIXES[step]))
            return False
        self.out.steps.append(PreflightStep(step=step, ok=True, detail=detail))
        return True


def _import_fix(exc: BaseException) -> str | None:
    return GPU_EXTRA if isinstance(exc, ImportError) else None


def _nvml_fix(exc: BaseException) -> str | None:
    return _import_fix(exc) or NVML_FIXES.get(type(exc).__name__)


def _kernel_fix(exc: BaseException) -> str | None:
    # CuPy 14.2 raises RuntimeError("Failed to find CUDA headers") when cuda-pathfinder finds no cuda_runtime.h
    # for the NVRTC include path (cupy/_core/core.pyx, lines 2593-2603; see tests/unit/test_deploy.py)
    return STEP_FIXES["kernel"] if "header" in str(exc).lower() else None


def _open_nvml(holder: Preflight) -> str:
    import pynvml

    pynvml.nvmlInit()
    holder.nvml = pynvml
    driver = pynvml.nvmlSystemGetDriverVersion()
    return f"driver {driver.decode() if isinstance(driver, bytes) else driver}, {pynvml.nvmlDeviceGetCount()} GPUs"


def _cupy() -> str:
    import cupy

    return f"CuPy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}"


def _cupy_installed() -> str:
    """Whether CuPy is installed, without loading CUDA (the driver is not there)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        raise ModuleNotFoundError("No module named 'cupy'")
    return "CuPy installed (not started: no NVIDIA driver)"


def _kernel() -> str:
    import cupy

    with cupy.cuda.Device(0):
        x = cupy.full((256,), 3.0, dtype=cupy.float32)  # a non-zero fill: CuPy compiles an elementwise kernel
        total = float((x * 2.0).sum())
    if total != 1536.0:
        raise RuntimeError(f"a kernel on GPU 0 computed {total}, not 1536.0")
    return "elementwise kernel compiled and ran on GPU 0"


def _cublas() -> str:
    import cupy
    from cupy_backends.cuda.libs import cublas

    with cupy.cuda.Device(0):
        handle = cublas.create()  # our own handle, destroyed here: CuPy's per-thread one dies with its thread
        try:
            return f"cuBLAS {cublas.getVersion(handle)}"
        finally:
            cublas.destroy(handle)


def nccl_version() -> str:
    from cupy.cuda import nccl

    if not getattr(nccl, "available", True):  # cupy/cuda/nccl.py: an ImportError of the library sets this False
        raise ImportError("CuPy found no NCCL library (cupy.cuda.nccl.available is False)")
    return f"NCCL {nccl.get_version()}"


def _dcgmi() -> str:
    done = subprocess.run(["dcgmi", "--version"], capture_output=True, text=True, timeout=STEP_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dcgmi --version exited {done.returncode}: {(done.stderr or done.stdout).strip()[:300]}")
    return next((line.strip() for line in done.stdout.splitlines() if line.strip()), "dcgmi")


def _tool(args: list[str]) -> str:
    """What a tool printed (stdout and stderr): perftest exits 10 after --version (VERSION_EXIT), so the exit
    code says nothing here; what it printed does."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=STEP_S, check=False)
    return done.stdout + done.stderr


def _rdma() -> str:
    """perftest and rdma-core are in the image, and ib_write_bw can write from GPU memory. perftest 6.29 lists
    --use_cuda in its --help only when cuda_memory_supported() (src/perftest_parameters.c, usage: built with
    CUDA and libcuda loadable), and prints "Version: %s" for --version (linux-rdma/perftest tag 26.04.17)."""
    missing = [t for t in RDMA_TOOLS if shutil.which(t) is None]
    if missing:
        raise FileNotFoundError(f"{' and '.join(missing)} not found on PATH")
    if "--use_cuda" not in _tool(["ib_write_bw", "--help"]):
        raise RuntimeError(
            "ib_write_bw cannot write from GPU memory: its --help lists no --use_cuda (perftest built without "
            "CUDA, or libcuda.so.1 not loadable in the pod)"
        )
    version = re.search(r"Version:\s*(\S+)", _tool(["ib_write_bw", "--version"]))
    return f"perftest {version.group(1) if version else '(version not printed)'} with --use_cuda; ibv_devinfo"


def steps_for(probes: set[Probe], on_gpu: bool, *, fabric: bool = False) -> list[str]:
    """The steps a plan's preflight runs, in order (each only where the step before it passed)."""
    rdma = ["rdma"] if fabric else []
    if not on_gpu:
        return ["home", *rdma]
    optional = [(Probe.COMPUTE, "cublas"), (Probe.NCCL, "nccl"), (Probe.DCGM, "dcgmi")]
    gpu = ["home", "cache", "nvml", "cupy", "kernel", *(step for probe, step in optional if probe in probes)]
    return [*gpu, *rdma]


def _gpu_steps(s: _Steps, probes: set[Probe]) -> None:
    """CuPy, a kernel, cuBLAS and NCCL: what touches the GPU (every plan starts the GPUs: health reads the PCIe
    link under a copy)."""
    if s.run("cupy", _cupy, _import_fix):
        s.run("kernel", _kernel, _kernel_fix)
        if Probe.COMPUTE in probes:
            s.run("cublas", _cublas)
        if Probe.NCCL in probes:
            s.run("nccl", nccl_version)


def _gpu_steps_in_child(probes: set[Probe], env: Mapping[str, str], timeout_s: float) -> list[PreflightStep]:
    """The GPU steps in a process of their own: the probe process holds no CUDA context before DCGM's diagnostic
    (which must have the GPUs to itself), and a driver that crashes the process fails a step, not the pod."""
    cmd = [sys.executable, "-m", "gpucert.measure.probes.preflight", *(p.value for p in sorted(probes))]
    limit = 4 * timeout_s + 30
    why = ""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=dict(env), check=False)
        last = done.stdout.strip().splitlines()[-1:] or [""]
        with contextlib.suppress(ValueError):
            return [PreflightStep.model_validate(d) for d in json.loads(last[0])]
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        code = done.returncode
        why = f"the preflight's GPU process ended ({f'signal {-code}' if code < 0 else f'exit {code}'}): {tail}"
    except subprocess.TimeoutExpired:
        why = f"the preflight's GPU process did not finish in {limit:g} s"
    return [PreflightStep(step="cupy", ok=False, detail=why, fix=CHILD_FIX)]


def run_preflight(
    probes: set[Probe],
    on_gpu: bool,
    *,
    nvml: Any = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = STEP_S,
    isolate: bool = True,
    fabric: bool = False,
) -> Preflight:
    """Every step the plan needs, in order; a step whose dependency failed is not tried (one cause, once).

    `nvml` given (the local target opened it, or the tests' fake) is used as it is; `env` is the process
    environment (the tests' fake kubelet gives a pod's own); `isolate`: the GPU steps in a child process (False:
    here, where the tests' fake CuPy is); `fabric`: the plan measures the fabric (the RDMA tools are needed)."""
    env = os.environ if env is None else env
    s = _Steps(timeout_s)
    s.run("home", lambda: _writable(env.get("HOME") or os.path.expanduser("~")))
    if not on_gpu:
        s.out.nvml = nvml
    else:
        _driver_steps(s, probes, nvml, env, isolate)
    if fabric:
        s.run("rdma", _rdma)
    return s.out


def _driver_steps(s: _Steps, probes: set[Probe], nvml: Any, env: Mapping[str, str], isolate: bool) -> None:
    """The steps of a GPU plan after `home`: the cache, NVML, the GPU steps, dcgmi."""
    timeout_s = s.timeout_s
    home = env.get("HOME") or os.path.expanduser("~")
    s.run("cache", lambda: _writable(env.get("CUPY_CACHE_DIR") or os.path.join(home, ".cupy", "kernel_cache")))
    if nvml is None:
        driver = s.run("nvml", lambda: _open_nvml(s.out), _nvml_fix)
    else:
        s.out.nvml, driver = nvml, True
    # CUDA needs the driver NVML could not reach (libcuda.so.1 is mounted with libnvidia-ml.so.1): a kernel would
    # fail for that one cause and name the CUDA headers' fix for it. Whether CuPy is installed is still said.
    if not driver:
        s.run("cupy", _cupy_installed, _import_fix)
    elif isolate:
        s.out.steps += _gpu_steps_in_child(probes, env, timeout_s)
    else:
        _gpu_steps(s, probes)
    if Probe.DCGM in probes:
        s.run("dcgmi", _dcgmi, lambda e: STEP_FIXES["dcgmi"] if isinstance(e, FileNotFoundError) else None)


def main(argv: list[str]) -> None:
    """`python -m gpucert.measure.probes.preflight PROBE...`: the GPU steps, as one JSON line; leaves at once (a hung
    step's thread would hold the exit)."""
    s = _Steps(STEP_S)
    _gpu_steps(s, {Probe(p) for p in argv})
    sys.stdout.write(json.dumps([step.model_dump() for step in s.out.steps]) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
