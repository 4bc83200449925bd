"""The verdict does not depend on how pytest items are cut (issue 28: one item per check and node).

The demo's verdict, and the demo's with a waiver and a second fault on the same node (one item where GPUs pass,
fail and are waived), were pinned from main before the per-GPU checks became one item per node
(tests/e2e/pinned/*.json). Every field that can be equal must be: the findings in order, the summary counts, the
coverage, each node's and the fleet's sums. Only the run id and the times differ between two runs.

To re-pin after a deliberate change of what is decided: GPUCERT_PIN=1 pytest tests/e2e/test_pinned_verdicts.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..in_process import gpucert_here

PINNED = Path(__file__).parent / "pinned"
WAIVERS = {
    "apiVersion": "gpucert.io/v1alpha1",
    "kind": "Waivers",
    "metadata": {"name": "pinned"},
    "waivers": [
        {
            "check": "health.ecc",
            "select": {"node": "gpu-node-1", "gpu": 5},
            "accept": "as-is",
            "reason": "a pinned case: one GPU of an item waived, another failing, six passing",
            "approvedBy": "buyer: test; vendor: test",
            "expires": "2099-12-31",
        }
    ],
}
VOLATILE = ("run", "measured", "started", "finished")  # differ between any two runs of the same evidence


def _without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def _waived_spec(project: Path) -> str:
    """The demo, gpu-node-1's GPU 1 failing ECC as well, and its GPU 5's ECC failure waived."""
    spec = yaml.safe_load((project / "examples" / "demo.yaml").read_text())
    fleet = yaml.safe_load((project / "examples" / "fleets" / "h100-4x8-faulty.yaml").read_text())
    fleet["faults"].append({"kind": "ecc", "node": "gpu-node-1", "gpu": 1, "uncorrected": 1})
    (project / "examples" / "fleets" / "pinned.yaml").write_text(yaml.safe_dump(fleet))
    (project / "examples" / "waivers.yaml").write_text(yaml.safe_dump(WAIVERS))
    spec["target"]["fleet"] = "fleets/pinned.yaml"
    spec["acceptance"] = {"waivers": "waivers.yaml"}
    (project / "examples" / "pinned.yaml").write_text(yaml.safe_dump(spec))
    return "examples/pinned.yaml"


@pytest.mark.parametrize("case", ["demo", "waived"])
def test_the_verdict_is_the_one_pinned_before_items_per_node(project: Path, case: str) -> None:
    spec = "examples/demo.yaml" if case == "demo" else _waived_spec(project)
    r = gpucert_here("certify", spec, "-q", "--reports", "out", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr  # both fleets fail certification
    (run,) = (project / "out").iterdir()
    verdict = _without_volatile(json.loads((run / "verdict.json").read_text()))
    pinned = PINNED / f"{case}.json"
    if os.environ.get("GPUCERT_PIN"):
        pinned.write_text(json.dumps(verdict, indent=1) + "\n")
    assert verdict == json.loads(pinned.read_text())
    if case == "waived":  # the case is what it says: the item of gpu-node-1's ECC has a pass, a fail and a waiver
        ecc = {(f["gpu"], f["status"]) for f in verdict["findings"] if f["check"] == "health.ecc"}
        assert {(1, "fail"), (5, "waived")} <= ecc
