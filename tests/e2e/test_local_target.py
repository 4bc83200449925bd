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
    # the H100's figures, under the product name the numpy device reports: a baseline must be for the GPUs certified
    cpu = yaml.safe_load((ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml").read_text())
    cpu.update(sku="CPU-numpy", product="CPU-numpy-device")
    (pytester.path / "cpu.yaml").write_text(yaml.safe_dump(cpu))
    spec["certify"]["baseline"] = str(pytester.path / "cpu.yaml")
    spec["certify"]["probes"] = ["dcgm", "memory", "pcie", "nccl"]
    (pytester.path / "fleet.yaml").write_text("")
    run = certify({}, spec=spec)
    ev_files = list((run.run_dir / "evidence").iterdir())
    assert len(ev_files) == 1
    checks = {f["check"] for f in run.verdict["findings"]}
    # a CPU is no H100: its measured bandwidths fail the baseline, which shows they were measured and judged
    assert {"memory.bandwidth", "pcie.h2d", "pcie.d2h", "nccl.all_reduce"} <= checks
    measured = [f for f in run.verdict["findings"] if f["check"] in ("memory.bandwidth", "pcie.h2d", "nccl.all_reduce")]
    assert measured
    assert all(f["status"] == "fail" and "below the baseline" in f["message"] for f in measured)
    # the spec requires DCGM and dcgmi is not installed: those checks could not run, which is no pass
    dcgm = [f for f in run.verdict["findings"] if f["check"].startswith("dcgm.")]
    assert dcgm
    assert all(f["status"] == "error" and "dcgmi is not installed" in f["message"] for f in dcgm)
    assert "compute.gemm" not in checks  # not in the probes list: not required, so not run
    assert {"check": "compute.*", "why": "probe 'compute' is not in certify.probes"} in run.verdict["coverage"][
        "notRequired"
    ]
