"""The probe pod's preflight (issue 21, items 4 and 16) against the real libraries where this machine has them.

This machine has nvidia-ml-py but no NVIDIA driver and no CuPy: the real `pynvml.nvmlInit()` raises
`NVMLError_LibraryNotFound` (nvidia-ml-py 13.615.71, pynvml.py `_LoadNvmlLibrary`: `CDLL("libnvidia-ml.so.1")`
fails with OSError and `_nvmlCheckReturn(NVML_ERROR_LIBRARY_NOT_FOUND)` raises the class
`_extractNVMLErrorsAsClasses` made for that code), and `import cupy` raises ImportError. Those are the first-run
failures of a pod without the NVIDIA runtime and of an image without the GPU extra.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpucert.errors import ConfigError
from gpucert.measure.probes import preflight
from gpucert.measure.probes.health import open_nvml
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.spec.cluster import Probe

ROOT = Path(__file__).resolve().parents[2]
ALL = set(Probe)
no_nvml = pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver (libnvidia-ml)"
)


def steps(pre: preflight.Preflight) -> dict[str, tuple[bool, str, str | None]]:
    return {s.step: (s.ok, s.detail, s.fix) for s in pre.steps}


@no_nvml
def test_no_nvml_library_and_no_cupy_name_what_is_missing(tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    pre = preflight.run_preflight(ALL - {Probe.DCGM}, True, env={**os.environ, "HOME": str(tmp_path)})
    found = steps(pre)
    assert found["home"][0]
    assert found["cache"][0]
    ok, detail, fix = found["nvml"]
    assert not ok
    assert detail == "NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert fix is not None
    assert fix.startswith("libnvidia-ml.so.1 is not in the container: run the pod with the NVIDIA")
    ok, detail, fix = found["cupy"]
    assert not ok
    assert detail.startswith("ModuleNotFoundError: No module named 'cupy'")
    assert fix == preflight.GPU_EXTRA
    assert set(found) == {"home", "cache", "nvml", "cupy"}  # kernel, cuBLAS and NCCL not tried without CuPy
    assert pre.nvml is None


@no_nvml
def test_in_a_probe_pod_no_nvml_is_the_nodes_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache"))
    plan = ProbePlan(run_id="r", node="gpu-01", probes=[Probe.HEALTH, Probe.MEMORY], device="cupy")
    ev = run_plan(plan)  # before: the runner raised ConfigError out of the pod for a missing GPU extra
    assert not ev.collected
    (err,) = ev.errors
    assert err.probe == "preflight"
    assert "preflight nvml failed: NVMLError_LibraryNotFound" in err.message
    assert ev.gpus == []


@no_nvml
def test_local_target_without_nvml_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError) as caught:
        open_nvml()
    message = str(caught.value)
    assert "NVMLError_LibraryNotFound" in message
    assert "libnvidia-ml.so.1, the NVIDIA driver's NVML library, is not installed on this machine" in message
    assert "\n" not in message


@no_nvml
def test_gpucert_certify_local_without_nvml_exits_2_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpucert.cli.main", "certify", str(ROOT / "examples" / "local.yaml"), "--reports", "r"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("gpucert: error:")]
    assert "NVML could not start (NVMLError_LibraryNotFound" in line
    assert "install the NVIDIA driver" in line


def fake_dcgmi(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "bin" / "dcgmi"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}/usr/bin:/bin")


def only(pre: preflight.Preflight, step: str) -> tuple[bool, str, str | None]:
    return steps(pre)[step]


def dcgm_only(tmp_path: Path, timeout_s: float = 30) -> preflight.Preflight:
    """A GPU plan of DCGM alone, NVML and CuPy stood in for so the dcgmi step is what is looked at."""
    return preflight.run_preflight({Probe.DCGM}, True, nvml=object(), env={"HOME": str(tmp_path)}, timeout_s=timeout_s)


def test_no_dcgmi_says_install_dcgm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    ok, detail, fix = only(dcgm_only(tmp_path), "dcgmi")
    assert not ok
    assert "FileNotFoundError" in detail
    assert "'dcgmi'" in detail
    assert fix == preflight.STEP_FIXES["dcgmi"]


def test_dcgmi_version_is_recorded_and_a_failing_dcgmi_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dcgmi(tmp_path, "echo 'Version : 4.5.2'", monkeypatch)
    assert only(dcgm_only(tmp_path), "dcgmi") == (True, "Version : 4.5.2", None)
    (tmp_path / "bin" / "dcgmi").write_text("#!/bin/sh\necho 'libdcgm.so.4: cannot open' >&2\nexit 127\n")
    ok, detail, _ = only(dcgm_only(tmp_path), "dcgmi")
    assert not ok
    assert detail == "RuntimeError: dcgmi --version exited 127: libdcgm.so.4: cannot open"


def test_a_hung_step_is_a_failed_step_not_a_hung_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dcgmi(tmp_path, "sleep 5", monkeypatch)
    ok, detail, _ = only(dcgm_only(tmp_path, timeout_s=0.3), "dcgmi")
    assert not ok
    assert "preflight dcgmi did not finish in 0.3 s" in detail


def test_an_unwritable_home_fails_even_for_root(tmp_path: Path) -> None:
    pre = preflight.run_preflight(set(), False, env={"HOME": "/dev/null/home"})
    ((ok, detail, fix),) = steps(pre).values()
    assert not ok
    assert detail.startswith("NotADirectoryError")
    assert fix == preflight.STEP_FIXES["home"]


def test_cupy_without_nccl_names_nccl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # cupy/cuda/nccl.py (CuPy 13 and 14): `available = False` when `from cupy_backends.cuda.libs.nccl import *`
    # raises ImportError (no libnccl.so.2); the module still imports, and get_version does not exist
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = False  # type: ignore[attr-defined]
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = nccl  # type: ignore[attr-defined]
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    with pytest.raises(ImportError, match=r"cupy\.cuda\.nccl\.available is False"):
        preflight.nccl_version()


def test_the_steps_follow_the_plan() -> None:
    assert preflight.steps_for(set(), on_gpu=False) == ["home"]
    assert preflight.steps_for({Probe.HEALTH}, on_gpu=True) == ["home", "cache", "nvml", "cupy", "kernel"]
    assert preflight.steps_for(ALL, on_gpu=True)[-3:] == ["cublas", "nccl", "dcgmi"]


def test_the_gpu_steps_run_in_a_child_whose_crash_is_a_failed_step(tmp_path: Path) -> None:
    """The GPU steps run in their own process (no CUDA context in the probe process before DCGM); here that
    process dies of SIGSEGV at start, as under a broken driver, and the pod goes on to report it."""
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "sitecustomize.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": f"{crash}{os.pathsep}{ROOT / 'src'}"}
    pre = preflight.run_preflight({Probe.MEMORY}, True, nvml=object(), env=env)
    ok, detail, fix = steps(pre)["cupy"]
    assert not ok
    assert detail.startswith("the preflight's GPU process ended (signal 11)")
    assert fix == preflight.CHILD_FIX


def test_missing_cuda_headers_name_the_headers_as_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy 14.2.0 raises RuntimeError("Failed to find CUDA headers") when it compiles its first elementwise kernel
    (cp.full with a non-zero value) and cuda-pathfinder finds no cuda_runtime.h (cupy/_core/core.pyx lines
    2593-2603); the CuPy here stands in for exactly that, with the attributes the steps read."""

    def no_headers(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Failed to find CUDA headers")

    class Device:
        def __init__(self, index: int) -> None:
            self.index = index

        def __enter__(self) -> Device:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    cupy = types.ModuleType("cupy")
    cupy.__version__ = "14.2.0"  # type: ignore[attr-defined]
    cupy.float32 = "float32"  # type: ignore[attr-defined]
    cupy.full = no_headers  # type: ignore[attr-defined]
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device, runtime=types.SimpleNamespace(runtimeGetVersion=lambda: 12080)
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    pre = preflight.run_preflight({Probe.MEMORY}, True, nvml=object(), env={"HOME": "/tmp"}, isolate=False)
    found = steps(pre)
    assert found["cupy"] == (True, "CuPy 14.2.0, CUDA runtime 12080", None)
    ok, detail, fix = found["kernel"]
    assert not ok
    assert detail == "RuntimeError: Failed to find CUDA headers"
    assert fix == preflight.STEP_FIXES["kernel"]
    assert "cuda-cudart-dev" in fix
    assert preflight.summary(pre.failed).startswith("preflight kernel failed: RuntimeError: Failed to find CUDA")


@no_nvml
def test_no_driver_is_one_cause_not_also_a_kernel_with_the_headers_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod without the NVIDIA runtime, whose image has CuPy (review of issue 21, item 16): the real pynvml here
    raises NVMLError_LibraryNotFound (module docstring), and CUDA, which needs the same driver, cannot start a
    context either (cudaRuntimeGetVersion answers without a driver, so `import cupy` and the runtime's version
    work). The first kernel then failed too and the finding's second cause named the CUDA headers' fix, which is
    not the node's problem. The CuPy here stands in for that: installed, its runtime version read, every kernel
    failing as CUDA does with no driver."""
    import importlib.machinery

    def no_driver(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version")

    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cupy.__version__ = "14.2.0"  # type: ignore[attr-defined]
    cupy.float32 = "float32"  # type: ignore[attr-defined]
    cupy.full = no_driver  # type: ignore[attr-defined]
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=lambda index: contextlib.nullcontext(), runtime=types.SimpleNamespace(runtimeGetVersion=lambda: 12080)
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    env = {**os.environ, "HOME": str(tmp_path), "CUPY_CACHE_DIR": str(tmp_path / "cache")}
    pre = preflight.run_preflight({Probe.MEMORY}, True, env=env, isolate=False)
    assert [s.step for s in pre.failed] == ["nvml"]
    assert "CUDA headers" not in preflight.summary(pre.failed)
    assert steps(pre)["cupy"][0]  # installed: said, not started
    assert "kernel" not in steps(pre)


def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, help_text: str, tools: tuple[str, ...]) -> None:
    """ib_write_bw as perftest 6.29 answers (src/perftest_parameters.c: usage lists --use_cuda only when
    cuda_memory_supported(); --version prints "Version: %s" and returns VERSION_EXIT, 10), and ibv_devinfo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "ib_write_bw": f'case "$1" in --version) echo "Version: 6.29"; exit 10;; *) printf "{help_text}\\n";; esac',
        "ibv_devinfo": "echo ibv_devinfo",
    }
    for tool in tools:
        exe = bin_dir / tool
        exe.write_text(f"#!/bin/sh\n{scripts[tool]}\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")


def fabric_only(tmp_path: Path) -> preflight.Preflight:
    return preflight.run_preflight(set(), False, env={"HOME": str(tmp_path)}, fabric=True)


def test_a_fabric_plan_checks_the_rdma_tools_and_records_perftest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tools(
        tmp_path, monkeypatch, "      --use_cuda=<cuda device id> Use CUDA specific device", preflight.RDMA_TOOLS
    )
    assert only(fabric_only(tmp_path), "rdma") == (True, "perftest 6.29 with --use_cuda; ibv_devinfo", None)


def test_an_image_without_the_rdma_tools_is_the_preflight_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tools(tmp_path, monkeypatch, "", ("ibv_devinfo",))
    ok, detail, fix = only(fabric_only(tmp_path), "rdma")
    assert not ok
    assert detail == "FileNotFoundError: ib_write_bw not found on PATH"
    assert fix == preflight.STEP_FIXES["rdma"]
    assert "deploy/Dockerfile" in fix


def test_an_image_without_ibv_devinfo_names_it_and_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fabric.port's MTU is ibv_devinfo's (port sysfs has none): an image with perftest but without rdma-core's
    ibverbs-utils (the Debian/Ubuntu package whose debian/ibverbs-utils.install ships usr/bin/ibv_devinfo) fails."""
    fake_tools(tmp_path, monkeypatch, "      --use_cuda=<cuda device id> Use CUDA specific device", ("ib_write_bw",))
    ok, detail, fix = only(fabric_only(tmp_path), "rdma")
    assert not ok
    assert detail == "FileNotFoundError: ibv_devinfo not found on PATH"
    assert fix is not None
    assert "ibverbs-utils" in fix


def test_perftest_without_cuda_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tools(tmp_path, monkeypatch, "      --tclass=<value>  Set the Traffic Class", preflight.RDMA_TOOLS)
    ok, detail, _ = only(fabric_only(tmp_path), "rdma")
    assert not ok
    assert "lists no --use_cuda" in detail


def test_only_a_fabric_plan_has_the_rdma_step(tmp_path: Path) -> None:
    assert "rdma" not in steps(preflight.run_preflight(set(), False, env={"HOME": str(tmp_path)}))
    assert preflight.steps_for(set(), on_gpu=False, fabric=True) == ["home", "rdma"]
    assert preflight.steps_for({Probe.HEALTH}, on_gpu=True, fabric=True)[-1] == "rdma"
