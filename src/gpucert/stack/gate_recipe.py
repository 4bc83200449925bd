"""The static gate of the recipe: the spec's pins and order checked with no cluster, so a pull request that changes a
pin can be gated (gate.py judges the operator values and baselines that change beside it). Not the recipe itself:
that is the spec's model (spec/recipe.py).

Pure: reads only the spec. Each rule returns one fleet-level Finding (node and GPU None).
"""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

from gpucert.plan.checks import CheckStatus, Finding
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.versions import at_least, normalize
from gpucert.stack.compat import COMPAT_SOURCE, MIN_DRIVER_FOR_CUDA, min_driver_for_cuda

__all__ = ["decide", "recipe_compat", "recipe_graph", "recipe_shared_images"]

OK, FAIL, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.SKIP
# components that ship in one image, so their pins must agree (GFD joined the device plugin's image in v0.15.0)
SHARED_IMAGES = (("device-plugin", "gpu-feature-discovery", "0.15.0"),)


def recipe_graph(spec: ClusterSpec) -> Finding:
    """`after` names only declared components and has no cycle, so there is an order to bring the stack up in."""
    declared = {c.name for c in spec.stack.components}
    problems = [
        f"{c.name} is after {d!r}, which the spec does not declare"
        for c in spec.stack.components
        for d in c.after
        if d not in declared
    ]
    problems += [f"{c.name} is after itself" for c in spec.stack.components if c.name in c.after]
    try:
        order = list(TopologicalSorter({c.name: set(c.after) & declared for c in spec.stack.components}).static_order())
    except CycleError as exc:
        cycle = exc.args[1] if len(exc.args) > 1 else []
        problems.append("the `after` graph has a cycle: " + " -> ".join(str(n) for n in cycle))
        order = []
    if problems:
        return Finding("stack.ordering", FAIL, None, None, "; ".join(problems))
    return Finding("stack.ordering", OK, None, None, "bring-up order: " + " -> ".join(order))


def recipe_compat(spec: ClusterSpec) -> Finding:
    """The driver pin is at least the minimum driver of the CUDA release the spec declares."""
    cuda, driver = spec.stack.component("cuda"), spec.stack.component("driver")
    if cuda is None or driver is None:
        return Finding("stack.compat", SKIP, None, None, "the spec pins no `cuda` and `driver` pair to check")
    minimum = min_driver_for_cuda(cuda.version)
    if minimum is None:
        known = ", ".join(f"{a}.{b}" for a, b in MIN_DRIVER_FOR_CUDA)
        return Finding(
            "stack.compat",
            FAIL,
            None,
            None,
            f"CUDA {cuda.version} is not in the compatibility table ({COMPAT_SOURCE}); known releases: {known}",
        )
    ok = at_least(driver.version, minimum)
    msg = (
        f"driver {driver.version} {'satisfies' if ok else 'is older than'} the minimum {minimum} for CUDA "
        f"{cuda.version} ({COMPAT_SOURCE})"
    )
    return Finding("stack.compat", OK if ok else FAIL, None, None, msg, observed=driver.version, expected=minimum)


def recipe_shared_images(spec: ClusterSpec) -> Finding:
    """Components built into one image must be pinned to one version."""
    problems = []
    for a, b, since in SHARED_IMAGES:
        ca, cb = spec.stack.component(a), spec.stack.component(b)
        if ca and cb and at_least(ca.version, since) and normalize(ca.version) != normalize(cb.version):
            problems.append(f"{a} {ca.version} and {b} {cb.version} ship in one image since {since}: pin one version")
    if problems:
        return Finding("stack.version", FAIL, None, None, "; ".join(problems))
    return Finding("stack.version", OK, None, None, "pins that share an image agree")


def decide(check: str, spec: ClusterSpec) -> Finding:
    """The static gate's finding for `check` (stack.ordering, stack.compat or stack.version, fleet-level)."""
    rules = {"stack.ordering": recipe_graph, "stack.compat": recipe_compat, "stack.version": recipe_shared_images}
    if check not in rules:
        raise ValueError(f"the static gate has no rule for {check!r}")
    return rules[check](spec)
