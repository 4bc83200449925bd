"""A two-node simulated soak, written as a user would: its fleet and a spec from examples/clean.yaml (shared by the
soak tests that need only a small fleet of their own)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"


def soak_spec(
    tmp: Path, soak: dict[str, Any], faults: list[dict[str, Any]] | None = None, *, local_baseline: bool = False
) -> Path:
    """tmp/spec.yaml over tmp/fleet.yaml (2 x 8 H100, the soak's `faults` at time scale 0) with `soak` as its soak
    section; `local_baseline` copies the SKU baseline beside the spec and names it relatively (a test may edit it)."""
    fleet = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "soak"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": 2, "namePrefix": "gpu-node-", "gpusPerNode": 8},
        "noise": {"cv": 0.01, "gpuSpread": 0.01, "nodeSpread": 0.005},
        "seed": 11,
        "soak": {"timeScale": 0, "faults": faults or []},
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")
    spec = yaml.safe_load((ROOT / "examples" / "clean.yaml").read_text(encoding="utf-8"))
    spec["target"]["fleet"] = "fleet.yaml"
    spec["expect"]["nodes"] = 2
    if local_baseline:
        shutil.copy(BASELINE, tmp / BASELINE.name)
        spec["certify"]["baseline"] = BASELINE.name
    else:
        spec["certify"]["baseline"] = str(BASELINE)
    spec["soak"] = soak
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return tmp / "spec.yaml"
