"""A DOCA-OFED pin, read where the Network Operator runs it (docs/spec.md: a `source` naming its driver pods)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import fleet_doc, spec_doc

DOCA = {
    "name": "doca-ofed",
    "version": "24.10-0.7.0.0",
    "source": {"namespace": "nvidia-network-operator", "app": "mofed-ubuntu22.04", "container": "mofed-container"},
}


def _spec() -> dict[str, Any]:
    doc = spec_doc()
    doc["stack"]["components"].append(DOCA)
    return doc


@pytest.mark.parametrize("installed", [None, "24.07-0.6.1.0"])
def test_a_doca_ofed_pin_passes_where_it_matches_and_fails_on_every_node_where_it_does_not(
    certify, installed: str | None
) -> None:
    fleet = fleet_doc(**({"stack": {"doca-ofed": installed}} if installed else {}))
    run = certify(fleet, spec=_spec(), suites=("configure",))
    doca = {
        f["node"]: f for f in run.verdict["findings"] if f["check"] == "stack.version" and "doca-ofed" in f["message"]
    }
    if installed is None:
        assert run.findings == set(), run.verdict["findings"]
        return
    every = [f"gpu-node-{i}" for i in range(1, 5)]
    assert run.findings == {("stack.version", node, None) for node in every}
    assert sorted(doca) == every
    for node, f in doca.items():
        assert f["status"] == "fail"
        assert (f["observed"], f["expected"]) == ("24.07-0.6.1.0", "24.10-0.7.0.0")
        assert f["message"].startswith(f"{node}: doca-ofed 24.07-0.6.1.0 from ")
