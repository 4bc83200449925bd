"""The static gate over what a change edits: GPU Operator values or ClusterPolicies (`--operator-values`,
`--cluster-policy`) and SKU baselines against the base ref (`--base-ref`), with no cluster. Each test runs once
per configuration (or baseline file) given."""

import pytest

from gpucert import Finding, expect


@pytest.mark.check("stack.version")
def test_configuration_deploys_the_pinned_versions(gate_input: str, decision: Finding) -> None:
    """The version of the component the configuration would deploy (set in it, else its operator release's
    default) is the one every pool of the spec pins."""
    expect(decision)


@pytest.mark.check("stack.compat")
def test_deployed_driver_supports_every_pool(gate_input: str, decision: Finding) -> None:
    """The driver it would deploy supports each pool's GPU product (at least the product's minimum driver) and
    the CUDA release each pool declares."""
    expect(decision)


@pytest.mark.check("stack.release")
def test_versions_are_of_the_operator_release(gate_input: str, decision: Finding) -> None:
    """Every component version the configuration sets is one its GPU Operator release ships."""
    expect(decision)


@pytest.mark.check("stack.known_bad")
def test_no_known_bad_version_or_combination(gate_input: str, decision: Finding) -> None:
    """No component would run a version, or a combination of versions, known to be bad (stack/data/known-bad.yaml)."""
    expect(decision)


@pytest.mark.check("baseline.change")
def test_baseline_not_loosened_without_a_new_source(gate_input: str, decision: Finding) -> None:
    """Against the base ref, no tolerance is wider, no expected figure lower (higher where lower is better), no
    health or PCIe limit looser, unless the figure's `source` changed with it."""
    expect(decision)
