"""`gpucert configure SPEC --static`: the recipe gate a pull request runs, with no cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def gate(tmp_path: Path, edit=None) -> tuple[subprocess.CompletedProcess[str], dict]:
    doc = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    doc["target"]["fleet"] = str(ROOT / "examples" / "fleets" / "h100-4x8-faulty.yaml")
    doc["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    if edit:
        edit(doc)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    r = subprocess.run(
        [sys.executable, "-m", "gpucert.cli.main", "configure", "spec.yaml", "--static", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    runs = list((tmp_path / "reports").iterdir()) if (tmp_path / "reports").exists() else []
    verdict = json.loads((runs[0] / "verdict.json").read_text()) if runs else {}
    return r, verdict


def component(doc: dict, name: str) -> dict:
    return next(c for c in doc["stack"]["components"] if c["name"] == name)


def test_a_sound_recipe_passes(tmp_path: Path) -> None:
    r, verdict = gate(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["result"] == "pass"
    assert verdict["target"] == "static"
    assert verdict["summary"]["checks"] == 3


def test_driver_older_than_the_cuda_minimum_fails(tmp_path: Path) -> None:
    r, verdict = gate(tmp_path, lambda d: component(d, "driver").update(version="550.54.14"))
    assert r.returncode == 1
    (f,) = verdict["findings"]
    assert f["check"] == "stack.compat"
    assert "driver 550.54.14 is older than the minimum 570.26 for CUDA 12.8" in f["message"]


def test_a_cycle_in_after_fails(tmp_path: Path) -> None:
    r, verdict = gate(tmp_path, lambda d: component(d, "driver").update(after=["dcgm-exporter"]))
    assert r.returncode == 1
    (f,) = verdict["findings"]
    assert f["check"] == "stack.ordering"
    assert "cycle" in f["message"]


def test_after_naming_an_undeclared_component_is_a_spec_error(tmp_path: Path) -> None:
    # a misspelt `after` target is not silently dropped: the spec does not load, and no run folder is left
    r, verdict = gate(tmp_path, lambda d: component(d, "dcgm-exporter").update(after=["devce-plugin"]))
    assert r.returncode == 2
    assert "spec.yaml" in r.stderr
    assert "stack.components[5].after[0]" in r.stderr
    assert "'devce-plugin', which the spec does not declare; did you mean 'device-plugin'?" in r.stderr
    assert verdict == {}


def test_unknown_cuda_and_split_device_plugin_image(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        component(d, "cuda").update(version="11.2")
        component(d, "gpu-feature-discovery").update(version="0.16.2")

    r, verdict = gate(tmp_path, edit)
    assert r.returncode == 1
    assert {f["check"] for f in verdict["findings"]} == {"stack.compat", "stack.version"}
