"""The run's waivers (the spec's `acceptance.waivers`): each still in force at the run's time, and each accepting
a failure this run found. A failure a waiver in force covers is reported `waived` by the check that failed."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("waiver.expired")
def test_waiver_in_force(waiver: str, decision: Finding) -> None:
    """The waiver's expiry date is not before the run's time (its newest measurement): an expired waiver accepts
    nothing, and the failure it accepted stands."""
    expect(decision)


@pytest.mark.check("waiver.unmatched")
def test_waiver_matches_a_failure(waiver: str, decision: Finding) -> None:
    """The waiver's check failed where its selector points (a node, a GPU, a serial): a waiver that waives nothing
    would silently cover a later failure there."""
    expect(decision)
