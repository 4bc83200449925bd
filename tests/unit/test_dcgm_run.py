"""How `dcgmi diag` is run: a writable working directory with DCGM_HOME_DIR in it, and the plugin set DCGM loads
for the node's driver recorded in the evidence (a missing set is the diagnostic's one error, naming the package)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpucert.measure.probes.dcgm import plugin_set, run_diag

from .test_probes import FIXTURES, SERIALS


def spy_dcgmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A dcgmi that records its working directory and DCGM_HOME_DIR, fails as DCGM's software test does where the
    directory is not writable (Software.cpp: euidaccess(".", W_OK) -> DCGM_FR_FILE_CREATE_PERMISSIONS), and prints
    a passing 4.x document otherwise."""
    exe = tmp_path / "bin" / "dcgmi"
    exe.parent.mkdir()
    seen = tmp_path / "seen.json"
    exe.write_text(
        "#!/bin/sh\n"
        f'printf \'{{"cwd": "%s", "home": "%s"}}\' "$PWD" "$DCGM_HOME_DIR" > {seen}\n'
        '[ -w . ] || { echo "No permission to create a file in directory $PWD" >&2; exit 226; }\n'
        f"cat '{FIXTURES / 'dcgm4-r2-pass-8xh100.json'}'\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    return seen


def test_dcgmi_runs_in_dcgm_home_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = spy_dcgmi(tmp_path, monkeypatch)
    home = tmp_path / "scratch" / "dcgm"  # the pod's emptyDir; made on first use
    monkeypatch.setenv("DCGM_HOME_DIR", str(home))
    read_only = tmp_path / "opt"
    read_only.mkdir(mode=0o555)
    monkeypatch.chdir(read_only)  # the image's root-owned WORKDIR, as the probe user sees it
    d = run_diag(2, serials=SERIALS)
    assert d.runtime_error is None
    assert json.loads(seen.read_text()) == {"cwd": str(home), "home": str(home)}


def test_an_unwritable_dcgm_home_moves_to_a_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_dcgmi(tmp_path, monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    if os.access(locked, os.W_OK):
        pytest.skip("running as root: every directory is writable")
    monkeypatch.setenv("DCGM_HOME_DIR", str(locked))
    d = run_diag(2, serials=SERIALS)
    assert d.runtime_error is None
    got = json.loads(seen.read_text())
    assert got["cwd"] == got["home"] != str(locked)
    assert os.access(got["cwd"], os.W_OK)


@pytest.mark.parametrize(
    ("cuda", "arch", "plugins"),
    [
        ("12.8", None, "cuda12"),
        ("13.0", "Hopper", "cuda13"),
        ("13.0", "Volta", "cuda12"),  # CUDA 13.0 dropped SM < 7.5: DCGM runs the cuda12 plugins there
        ("13.1", "Volta", "cuda13"),
        ("14.0", None, "cuda13"),  # past MAX_CUDA_MAJOR_VERSION (13): DCGM falls back to cuda13
        (None, None, None),
    ],
)
def test_the_plugin_set_is_the_one_dcgm_chooses(cuda: str | None, arch: str | None, plugins: str | None) -> None:
    """TestFramework::GetPluginCudaDirExtension and GetCompatibleCudaMajorVersion, nvvs/src/TestFramework.cpp,
    DCGM 4.5.2; MAX_CUDA_MAJOR_VERSION 13 in common/DcgmBuildInfo.hpp."""
    assert plugin_set(cuda, arch) == plugins


def test_the_evidence_names_the_plugin_set_that_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy_dcgmi(tmp_path, monkeypatch)
    monkeypatch.setenv("DCGM_HOME_DIR", str(tmp_path / "home"))
    root = tmp_path / "plugins"
    (root / "cuda12").mkdir(parents=True)
    (root / "cuda13").mkdir()
    d = run_diag(2, serials=SERIALS, cuda_driver_version="13.0", plugin_root=str(root))
    assert (d.plugins, d.runtime_error) == ("cuda13", None)
    assert d.results  # it ran


def test_a_driver_whose_plugins_are_missing_is_one_error_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_dcgmi(tmp_path, monkeypatch)
    root = tmp_path / "plugins"
    (root / "cuda12").mkdir(parents=True)  # the image before this fix: cuda12 only
    d = run_diag(2, serials=SERIALS, cuda_driver_version="13.0", plugin_root=str(root))
    assert d.plugins == "cuda13"
    assert d.runtime_error is not None
    assert "datacenter-gpu-manager-4-cuda13" in d.runtime_error
    assert not seen.exists()  # not run: DCGM would fail every plugin test instead


def test_a_remote_host_engine_loads_its_own_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy_dcgmi(tmp_path, monkeypatch)
    d = run_diag(2, serials=SERIALS, host="10.0.0.1", cuda_driver_version="13.0", plugin_root=str(tmp_path / "none"))
    assert d.plugins is None
