"""Issue 25's acceptance case, end to end: examples/fabric.yaml certifies the 16-node, two-rack simulated fleet of
examples/fleets/h100-16x8-fabric.yaml, whose three fabric faults (a port trained down, a cable counting symbol
errors under load, a bad uplink between the racks) are exactly its three findings: every pair of nodes measured
once on every rail, in rounds, and nothing healthy reported."""

from __future__ import annotations

import yaml

from .conftest import ROOT


def test_the_example_fabric_gives_exactly_its_three_findings(certify) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "fabric.yaml").read_text())
    spec["target"]["fleet"] = "fleet.yaml"
    spec["pools"][0]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-16x8-fabric.yaml").read_text())
    run = certify(fleet, spec=spec)
    assert run.findings == {
        ("fabric.port", "gpu-node-3", None),
        ("fabric.counters", "gpu-node-12", None),
        ("fabric.rdma_bw", None, None),
    }
    messages = {f["check"]: f["message"] for f in run.verdict["findings"]}
    assert "rail 2" in messages["fabric.port"]
    assert "symbol_error" in messages["fabric.counters"]
    assert "rack-1 and rack-2" in messages["fabric.rdma_bw"]
