"""Every probe's timing protocol and byte/FLOP accounting, on the NumPy device (real copies, real GEMMs)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpucert.measure.evidence import read_evidence
from gpucert.measure.probes import compute, memory, nccl, p2p, pcie
from gpucert.measure.probes.dcgm import parse_diag, run_diag
from gpucert.measure.probes.device import NumpyDevice
from gpucert.measure.probes.health import read_gpu
from gpucert.measure.probes.runner import ProbePlan, run_plan
from gpucert.measure.probes.timing import Budget, time_region

from .fake_nvml import (
    FakeGpu,
    NVMLError_GpuIsLost,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
    fake_nvml,
)

FAST = Budget(warmup_s=0.0, measure_s=0.02, min_reps=3, max_reps=6)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


class FixedClock(NumpyDevice):
    """A NumPy device whose events say every repetition took exactly `seconds`: the work still runs, so the
    accounting (bytes, FLOPs per sample) can be checked to the digit."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.fills = 0

    def elapsed_s(self, start: Any, end: Any) -> float:
        return self.seconds

    def fill(self, buf: Any, value: float) -> None:
        self.fills += 1
        super().fill(buf, value)


def test_timing_protocol_budgets_and_flush() -> None:
    dev = FixedClock(0.001)
    calls = []
    samples = time_region(dev, lambda: calls.append(1), Budget(0.0, 0.0, 4, 10))
    assert samples == [0.001] * 4  # min_reps when the time budget is already spent
    assert len(calls) == 1 + 4  # one warm-up call, then the timed ones
    assert dev.fills == 4  # the L2 flushed before every timed repetition
    real = time_region(NumpyDevice(), lambda: None, Budget(0.0, 0.05, 2, 7))
    assert 2 <= len(real) <= 7
    assert all(t >= 0 for t in real)


def test_memory_counts_read_and_write_bytes() -> None:
    dev = FixedClock(0.002)
    m = memory.copy_bandwidth(dev, FAST, nbytes=1 << 20)
    assert m.unit == "GB/s"
    assert m.params["bytes_moved_per_rep"] == 2 << 20
    assert m.samples[0] == pytest.approx((2 << 20) / 0.002 / 1e9)
    assert 3 <= len(m.samples) <= 6


def test_memory_really_copies() -> None:
    dev = NumpyDevice()
    src, dst = dev.empty(4096), dev.empty(4096)
    dev.fill(src, 7)
    dev.copy(dst, src)
    assert np.all(dst == 7)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32", "fp32", "fp64"])
def test_gemm_counts_2n3_flops(dtype: str) -> None:
    m = compute.gemm_throughput(FixedClock(0.01), dtype, FAST, n=64)
    assert m.params["flops_per_rep"] == 2 * 64**3
    assert m.samples[0] == pytest.approx(2 * 64**3 / 0.01 / 1e12)
    assert ("emulated" in m.params) == (dtype in ("bf16", "tf32"))


def test_gemm_multiplies() -> None:
    dev = NumpyDevice()
    a, b, c = dev.gemm_operands(32, "fp64")
    dev.gemm(a, b, c, 32, "fp64")
    np.testing.assert_allclose(c, a @ b)


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_pcie_counts_each_byte_once(direction: str) -> None:
    m = pcie.host_copy_bandwidth(FixedClock(0.004), direction, FAST, nbytes=1 << 20)
    assert m.samples[0] == pytest.approx((1 << 20) / 0.004 / 1e9)
    assert m.params["direction"] == direction
    with pytest.raises(ValueError, match="h2d or d2h"):
        pcie.host_copy_bandwidth(NumpyDevice(), "sideways", FAST, nbytes=16)


def test_p2p_measures_every_ordered_pair() -> None:
    devs = [FixedClock(0.001) for _ in range(3)]
    ev = p2p.peer_matrix(devs, FAST, nbytes=1 << 16)
    assert sorted((q.src, q.dst) for q in ev.pairs) == [(i, j) for i in range(3) for j in range(3) if i != j]
    assert all(q.peer_access for q in ev.pairs)
    assert ev.pairs[0].samples[0] == pytest.approx((1 << 16) / 0.001 / 1e9)


def test_nccl_busbw_formula_and_correctness() -> None:
    assert nccl.busbw_factor(8) == pytest.approx(1.75)
    assert nccl.busbw_factor(2) == pytest.approx(1.0)
    ev = nccl.all_reduce_sweep(nccl.NumpyCollective(4), FAST, sizes=[1 << 12, 1 << 16])
    assert ev.correct
    assert ev.ranks == 4
    for point in ev.points:
        for t_us, alg, bus in zip(point.time_us, point.algbw, point.busbw, strict=True):
            assert alg == pytest.approx(point.size_bytes / (t_us / 1e6) / 1e9)
            assert bus == pytest.approx(alg * 2 * 3 / 4)


def test_nccl_detects_a_wrong_reduction() -> None:
    class Broken(nccl.NumpyCollective):
        def all_reduce(self, send: list[Any], recv: list[Any], count: int) -> None:
            super().all_reduce(send, recv, count)
            recv[2][count // 2] += 1.0  # one rank gets one wrong element

    assert not nccl.all_reduce_sweep(Broken(3), FAST, sizes=[1 << 12]).correct


# ---- NVML health, against a fake pynvml that answers as the driver does -----------------------------------------


def test_fake_nvml_matches_the_real_module() -> None:
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is in the test extra; install it to check the fake")
    fake = fake_nvml()
    for name, value in vars(fake).items():
        if name.startswith("__"):
            continue
        assert hasattr(pynvml, name), f"pynvml has no {name}: the fake NVML invented it"
        if name.startswith("NVML_"):
            assert getattr(pynvml, name) == value, f"{name} is {getattr(pynvml, name)} in pynvml"
        elif name.startswith("NVMLError_"):
            assert value.value == getattr(pynvml, name)(value.value).value
    assert pynvml.NVML_NVLINK_MAX_LINKS > 18  # why the link loop must stop at the GPU's own count


def ecc_counts() -> dict[tuple[int, int], int]:
    return {(0, 0): 3, (0, 1): 0, (1, 0): 12, (1, 1): 0}  # (counter, error): volatile 0, aggregate 1


def test_health_reads_every_counter() -> None:
    g = read_gpu(fake_nvml(FakeGpu(remap=(2, 0, 0, 0), ecc=ecc_counts())), 0)
    h = g.health
    assert h is not None
    assert (h.ecc.volatile_corrected, h.ecc.volatile_uncorrected, h.ecc.aggregate_corrected) == (3, 0, 12)
    assert h.remapped_rows.correctable == 2
    assert h.remapped_rows.failure is False
    assert (h.pcie.current_generation, h.pcie.max_generation, h.pcie.under_load) == (1, 5, False)
    assert h.power_w == pytest.approx(71.234)
    assert h.slowdown_temperature_c == 87
    assert g.memory_mib == 81559
    assert g.uuid is not None
    assert g.uuid.startswith("GPU-6f1e7f3a")
    assert (h.not_supported, h.unavailable) == ([], {})


@pytest.mark.parametrize(("product", "links"), [("NVIDIA H200", 18), ("NVIDIA A100-SXM4-80GB", 12)])
def test_nvlink_loop_stops_at_the_gpus_own_links(product: str, links: int) -> None:
    """nvidia-ml-py 13 says 36 links; the driver answers INVALID_ARGUMENT past the GPU's own."""
    g = read_gpu(fake_nvml(FakeGpu(name=product, nvlinks=links)), 0)
    assert g.product == product
    assert g.health is not None
    assert g.health.nvlink_active == [True] * links
    assert g.health.unavailable == {}


def test_a_link_nvml_refuses_is_unknown_and_the_others_stand() -> None:
    nvml = fake_nvml(FakeGpu(nvlinks=4))
    real = nvml.nvmlDeviceGetNvLinkState

    def flaky(h: Any, link: int) -> int:
        if link == 2:
            raise NVMLError_GpuIsLost()
        return int(real(h, link))

    nvml.nvmlDeviceGetNvLinkState = flaky
    h = read_gpu(nvml, 0).health
    assert h is not None
    assert h.nvlink_active == [True, True, None, True]
    assert h.unavailable == {"nvlink.2": "NVMLError_GpuIsLost: GPU is lost"}


def test_not_supported_is_recorded_never_zero() -> None:
    gpu = FakeGpu(
        fail={"nvmlDeviceGetRemappedRows": NVMLError_NotSupported, "nvmlDeviceGetNvLinkState": NVMLError_NotSupported}
    )
    h = read_gpu(fake_nvml(gpu), 0).health
    assert h is not None
    assert h.remapped_rows.failure is None
    assert h.remapped_rows.uncorrectable is None
    assert h.nvlink_active is None
    assert set(h.not_supported) == {"remapped_rows", "nvlink.0"}


def test_one_refused_reading_leaves_the_others_standing() -> None:
    gpu = FakeGpu(
        ecc=ecc_counts(),
        fail={"nvmlDeviceGetPowerUsage": NVMLError_GpuIsLost, "nvmlDeviceGetSerial": NVMLError_NoPermission},
    )
    g = read_gpu(fake_nvml(gpu), 0)
    assert g.health is not None
    assert g.health.power_w is None
    assert g.health.unavailable == {
        "power": "NVMLError_GpuIsLost: GPU is lost",
        "serial": "NVMLError_NoPermission: Insufficient Permissions",
    }
    assert g.serial is None
    assert g.uuid == gpu.uuid  # the identity NVML did give stands
    assert g.health.ecc.volatile_corrected == 3
    assert g.health.power_limit_w == 700


def test_a_gpu_nvml_cannot_open_is_never_given_an_identity() -> None:
    g = read_gpu(fake_nvml(FakeGpu(fail={"nvmlDeviceGetHandleByIndex": NVMLError_GpuIsLost})), 0)
    assert (g.uuid, g.product, g.serial, g.pci_bus_id) == (None, None, None, None)
    assert g.health is not None
    assert g.health.unavailable == {"handle": "NVMLError_GpuIsLost: GPU is lost"}


# ---- dcgmi, run for real: a stand-in executable prints a recorded document and exits with dcgmi's code ---------


def install_dcgmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture: str, code: int) -> None:
    exe = tmp_path / "bin" / "dcgmi"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat '{FIXTURES / fixture}'\nexit {code}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")


SERIALS = {
    0: "1654922041276",
    1: "1654922040389",
    2: "1654922043165",
    3: "1654922041923",
    4: "1654922040171",
    5: "1654922044468",
    6: "1654922042790",
    7: "1654922043571",
}


def test_dcgm_4x_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-pass-8xh100.json", 0)
    d = run_diag(2, serials=SERIALS)
    assert d.runtime_error is None
    assert set(d.results) == {"software", "pcie", "memory"}
    assert all(r.status == "Pass" for t in d.results.values() for r in t.gpus.values())


def test_dcgm_warning_printed_as_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-warn-printed-as-fail.json", 226)
    d = run_diag(2, serials=SERIALS)
    assert d.exit_code == 226
    assert d.results["memory"].gpus[3].status == "Fail"
    assert "PCIe replays" in d.results["memory"].gpus[3].warnings[0]
    assert d.results["memory"].summary == "Fail"


def test_dcgm_runtime_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-runtime-error.json", 235)
    d = run_diag(2, serials=SERIALS)
    assert d.runtime_error is not None
    assert "unable to establish a connection" in d.runtime_error


def test_dcgm_embedded_host_engine_serial_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dcgmi(tmp_path, monkeypatch, "dcgm4-r2-pass-other-host.json", 0)
    d = run_diag(2, serials=SERIALS)
    assert d.runtime_error is not None
    assert "not this node's" in d.runtime_error
    assert "embedded host engine" in d.runtime_error


def test_dcgmi_missing_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="dcgmi is not installed"):
        run_diag(2, serials={})


def test_dcgmi_without_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "bin" / "dcgmi"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\necho 'Error: a diagnostic is already running' >&2\nexit 217\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    d = run_diag(3, serials={})
    assert d.runtime_error is not None
    assert "217 (a diagnostic is already running)" in d.runtime_error


def test_own_fixtures_parse_like_the_real_samples() -> None:
    for path in FIXTURES.glob("*.json"):
        parse_diag(json.loads(path.read_text()), level=2)


# ---- the runner ------------------------------------------------------------------------------------------------


def test_runner_on_the_numpy_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no dcgmi here
    plan = ProbePlan.model_validate(
        {
            "run_id": "r",
            "node": "cpu-host",
            "device": "numpy",
            "gpus": 2,
            "budget": {"warmup_s": 0, "measure_s": 0.01, "min_reps": 3, "max_reps": 5},
            "sizes": {
                "memory_bytes": 1 << 20,
                "gemm_n": 32,
                "pcie_bytes": 1 << 16,
                "p2p_bytes": 1 << 16,
                "nccl_sizes": [1 << 12],
            },
        }
    )
    ev = run_plan(plan)
    assert [g.index for g in ev.gpus] == [0, 1]
    assert set(ev.gpus[0].measurements) == {
        "memory.bandwidth",
        "pcie.h2d",
        "pcie.d2h",
        "pcie.h2d.concurrent",  # both GPUs copying at once: evidence beside the judged figures
        "pcie.d2h.concurrent",
        *(f"compute.gemm.{t}" for t in ("fp16", "bf16", "tf32", "fp32", "fp64")),
    }
    assert ev.p2p is not None
    assert len(ev.p2p.pairs) == 2
    assert [(q.src, q.dst) for q in ev.p2p.bidirectional] == [(0, 1)]
    assert ev.nccl is not None
    assert ev.nccl.correct
    (err,) = ev.errors
    assert err.probe == "dcgm"
    assert err.unavailable
    (tmp_path / "cpu-host.json").write_text(ev.model_dump_json(by_alias=True))
    assert read_evidence(tmp_path / "cpu-host.json") == ev


def test_gpu_device_without_cupy_names_the_extra() -> None:
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here")
    from gpucert.errors import ConfigError
    from gpucert.measure.probes.device import CupyDevice

    with pytest.raises(ConfigError, match=r"pip install 'gpucert\[gpu\]'"):
        CupyDevice(0)


def test_probe_command_prints_the_evidence_document(tmp_path: Path) -> None:
    import subprocess
    import sys

    plan = {
        "run_id": "r",
        "node": "n1",
        "device": "numpy",
        "probes": ["memory"],
        "budget": {"warmup_s": 0, "measure_s": 0.01, "min_reps": 3, "max_reps": 3},
        "sizes": {"memory_bytes": 1 << 16},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    r = subprocess.run(
        [sys.executable, "-m", "gpucert.measure.probes", "--plan", str(tmp_path / "plan.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    (tmp_path / "n1.json").write_text(r.stdout)
    ev = read_evidence(tmp_path / "n1.json")
    assert len(ev.gpus[0].measurements["memory.bandwidth"].samples) == 3
    (tmp_path / "bad.json").write_text(json.dumps({**plan, "probez": []}))
    r = subprocess.run(
        [sys.executable, "-m", "gpucert.measure.probes", "--plan", str(tmp_path / "bad.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2
    assert "probez" in r.stderr


def test_nvml_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from gpucert.errors import ConfigError
    from gpucert.measure.probes.health import open_nvml

    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    with pytest.raises(ConfigError, match=r"nvidia-ml-py \(NVML\) is not available.*pip install 'gpucert\[gpu\]'"):
        open_nvml()


def test_gpu_check_script_runs_on_the_cpu() -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    r = subprocess.run(
        [sys.executable, str(script), "--device", "numpy", "--profile", "smoke", "--gpus", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["part", "gpu", "what", "value", "unit", "CV", "/", "n", "note"]  # one table
    assert lines[2].split()[:3] == ["preflight", "home", "ok"]  # the preflight first
    for metric in ("memory.bandwidth", "compute.gemm.bf16", "pcie.h2d", "pcie.d2h"):
        assert metric in r.stdout
    assert "2 pairs" in r.stdout
    assert "correct True" in r.stdout
    assert "RESULT" in r.stdout


def test_gpu_check_script_stops_at_a_failed_preflight() -> None:
    import os
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    r = subprocess.run(
        [sys.executable, str(script), "--device", "numpy", "--profile", "smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": "/dev/null/home"},  # not creatable, not even by root
    )
    assert r.returncode == 1, r.stderr
    (row,) = [line for line in r.stdout.splitlines() if line.startswith("preflight")]
    assert row.split()[:3] == ["preflight", "home", "FAILED"]
    assert "fix: give the probe pod a writable $HOME" in r.stdout
    assert "memory.bandwidth" not in r.stdout  # no probe ran
    assert r.stdout.rstrip().endswith("RESULT PREFLIGHT FAILED")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _multinode_plan(tmp_path: Path) -> Path:
    plan = ProbePlan(
        run_id="r",
        node="set-by-node",
        device="numpy",
        gpus=2,
        budget={"min_reps": 3},
        sizes={"nccl_sizes": [1 << 16, 1 << 20]},
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json(by_alias=True))
    return path


def test_all_reduce_across_processes_over_tcp(tmp_path: Path) -> None:
    """The command line a multi-node Job runs: three processes, each with two NumPy devices, one collective."""
    import subprocess
    import sys

    from gpucert.measure.evidence import FabricEvidence
    from gpucert.measure.probes.framing import unframe

    plan, port = _multinode_plan(tmp_path), _free_port()
    procs = [
        subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "gpucert.measure.probes",
                    "--plan",
                    str(plan),
                    "--node",
                    f"node-{r}",
                    "--framed",
                ),
                *("--processes", "3", "--rendezvous", f"localhost:{port}", "--rendezvous-timeout", "30"),
            ],
            env={**os.environ, "JOB_COMPLETION_INDEX": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (2, 1, 0)  # process 0 last: the others must wait for it
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
    assert outs[0][0].strip() == "gpucert.measure.probes: rank 2 done"
    fabric = FabricEvidence.model_validate_json(unframe(outs[2][0]))
    assert fabric.nodes == ["node-0", "node-1", "node-2"]
    assert fabric.nccl is not None
    assert fabric.nccl.ranks == 6
    assert fabric.nccl.correct
    assert fabric.nccl.params["busbw_factor"] == pytest.approx(2 * 5 / 6)
    assert [len(p.busbw) for p in fabric.nccl.points] == [3, 3]  # a fixed count, the same on every process


def test_process_zero_reports_who_never_joined(tmp_path: Path) -> None:
    from gpucert.measure.probes.multinode import run_multinode

    plan = ProbePlan.model_validate_json(_multinode_plan(tmp_path).read_text())
    fabric = run_multinode(plan, rank=0, processes=2, host="localhost", port=_free_port(), timeout_s=0.5)
    assert fabric is not None
    assert not fabric.collected
    assert f"processes [1] did not join within 0.5 s (joined: process 0 on {plan.node})" in fabric.errors[0].message
