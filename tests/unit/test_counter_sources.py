"""Issue 25: each default counter limit carries its source in the data, and a figure of gpucert's own says so."""

from __future__ import annotations

from gpucert.spec.fabric import DEFAULT_COUNTER_LIMITS


def test_the_rates_no_public_source_gives_say_they_are_gpucerts_own() -> None:
    own = {name for name, c in DEFAULT_COUNTER_LIMITS.items() if "not a published figure" in c.source}
    assert own == {"link_error_recovery", "port_rcv_errors", "port_xmit_discards"}
    for name in own:
        assert "no public per-hour limit found" in DEFAULT_COUNTER_LIMITS[name].source


def test_the_other_limits_cite_the_infiniband_specification() -> None:
    cited = {name for name, c in DEFAULT_COUNTER_LIMITS.items() if "IBTA" in c.source}
    assert cited == set(DEFAULT_COUNTER_LIMITS) - {"link_error_recovery", "port_rcv_errors", "port_xmit_discards"}
