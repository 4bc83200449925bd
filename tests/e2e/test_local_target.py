"""The local target end to end on the CPU: the numpy device runs the real probes, the suites judge them."""

from __future__ import annotations

import yaml

from .conftest import ROOT


def test_local_target_on_the_numpy_device(certify, pytester, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no dcgmi on this machine either way
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["target"] = {"kind": "local", "device": "numpy", "gpus": 2, "profile": "smoke"}
    spec["expect"] = {"nodes": 1, "gpusPerNode": 2, "gpuProduct": "CPU-numpy-device"}
    spec["stack"] = {"components": []}
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    spec["certify"]["probes"] = ["dcgm", "memory", "pcie", "nccl"]
    (pytester.path / "fleet.yaml").write_text("")
    run = certify({}, spec=spec)
    ev_files = list((run.run_dir / "evidence").iterdir())
    assert len(ev_files) == 1
    checks = {f["check"] for f in run.verdict["findings"]}
    # a CPU is no H100: its measured bandwidths fail the baseline, which shows they were measured and judged
    assert {"memory.bandwidth", "pcie.h2d", "pcie.d2h", "nccl.all_reduce"} <= checks
    assert not any(c.startswith("dcgm.") for c in checks)  # dcgmi is unavailable: skipped with the reason
    junit = (run.run_dir / "junit.xml").read_text()
    assert "the dcgm probe is unavailable: dcgmi is not installed" in junit
    assert "compute.gemm" not in checks  # not in the probes list: skipped, not failed
