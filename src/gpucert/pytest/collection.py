"""Collection: the suites' tests parametrized over the run's inventory (nodes, GPUs, rails, components, DCGM
tests, waivers; and, from the plan, the static gate's inputs, pools and rack pairs), the check each item decides
(`check_key`), and the items the plan requires.

Every xdist worker parametrizes from the same inventory.json, so all of them collect the same items."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpucert.evaluate.evaluation import GpuSlot
from gpucert.plan.checks import CheckKey
from gpucert.plan.fabric_checks import rail_detail

if TYPE_CHECKING:
    from gpucert.pytest.context import RunContext

__all__ = ["NO_SPEC", "check_key", "keep_required", "parametrize", "record_selected", "refuse_suites_without_spec"]

NO_SPEC = "gpucert suites need a spec: pytest suites --spec SPEC (or run `gpucert certify SPEC`)"
# the parameters that name a check's detail: those of a node, and those of the fleet (parametrized from the plan)
FLEET_DETAILS = ("gate_input", "pool", "racks")
DETAILS = ("component", "waiver", "rail", *FLEET_DETAILS)


def parametrize(metafunc: pytest.Metafunc, ctx: RunContext) -> None:
    """Parametrize a suite test over what the run has: the fixtures it names say over what."""
    names = metafunc.fixturenames
    ev = ctx.evaluation
    if "waiver" in names:
        book = ev.waiver_book
        metafunc.parametrize("waiver", book.ids if book is not None else [])
    # checks of the fleet decided once per detail the plan names: the static gate's (one per configuration or
    # baseline it was given), a pool's fabric declaration, the link between two racks
    fleet_detail = next((p for p in FLEET_DETAILS if p in names), None)
    if fleet_detail is not None:
        marker = metafunc.definition.get_closest_marker("check")
        check = str(marker.args[0]) if marker is not None else ""
        details = sorted(k.detail for k in ev.plan.required if k.check == check and k.detail and not k.node)
        if details:
            metafunc.parametrize(fleet_detail, details, ids=details)
        return
    if not ({"node", "gpu"} & set(names)):
        return
    nodes = [n for n in ev.inventory.names if n not in ctx.carried]  # a re-test's carried nodes: no items (carried.py)
    if "gpu" in names:
        slots = [GpuSlot(n, i) for n in nodes for i in range(ev.pools.gpus_per_node(n))]
        metafunc.parametrize("gpu", slots, ids=[repr(s) for s in slots])
    elif "rail" in names:  # a node's rails: those of its pool's fabric
        rails = [(n, rail_detail(r)) for n in nodes for r in range(ev.rails_of(n))]
        metafunc.parametrize(("node", "rail"), rails, ids=[f"{n}/{r}" for n, r in rails])
    elif "component" in names:
        pairs = [(n, c) for n in nodes for c in ev.components()]
        metafunc.parametrize(("node", "component"), pairs, ids=[f"{n}/{c}" for n, c in pairs])
    else:
        metafunc.parametrize("node", nodes, ids=nodes)
    if "dcgm_test" in names:
        metafunc.parametrize("dcgm_test", ev.dcgm_tests())


_KEY = pytest.StashKey[CheckKey | None]()


def check_key(item: pytest.Item) -> CheckKey | None:
    """The check a test item decides, from its `check` marker and its parameters: built once per item (collection,
    the `decision` fixture and each phase's report ask for it; at fleet scale rebuilding it was a cost per item)."""
    stash: pytest.Stash | None = getattr(item, "stash", None)
    if stash is None:
        return _check_key(item)
    if _KEY not in stash:
        stash[_KEY] = _check_key(item)
    return stash[_KEY]


def _check_key(item: pytest.Item) -> CheckKey | None:
    marker = item.get_closest_marker("check")
    if marker is None:
        return None
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    try:
        check = str(marker.args[0]).format(**params)
    except (KeyError, IndexError):
        return None  # not parametrized by gpucert (no spec): the test skips and decides nothing
    gpu = params.get("gpu")
    detail = next((params[p] for p in DETAILS if isinstance(params.get(p), str)), None)
    if detail is None and set(FLEET_DETAILS) & set(getattr(item, "fixturenames", ())):
        return None  # the gate was given nothing for this check: no item decides it
    if isinstance(gpu, GpuSlot):
        return CheckKey(check, gpu.node, gpu.index, detail)
    node = params.get("node")
    return CheckKey(check, node if isinstance(node, str) else None, None, detail)


def keep_required(ctx: RunContext, items: list[pytest.Item]) -> None:
    """Leave out the items whose check the spec does not require (a probe it did not ask for, a 1-GPU node's P2P)."""
    plan = ctx.evaluation.plan
    kept = [
        item
        for item in items
        if ((key := check_key(item)) is None and not set(FLEET_DETAILS) & set(getattr(item, "fixturenames", ())))
        or (key is not None and key in plan)
    ]
    ctx.left_out = len(items) - len(kept)
    items[:] = kept


def refuse_suites_without_spec(items: list[pytest.Item]) -> None:
    """A suite run without a spec would only skip: pytest's usage error (exit 4), with the fix."""
    if any(item.get_closest_marker("check") for item in items):
        raise pytest.UsageError(NO_SPEC)


def record_selected(session: pytest.Session, ctx: RunContext) -> None:
    """The keys this session (or this worker) collected, after -k, --lf, --deselect: the verdict's coverage."""
    keys = [k for k in map(check_key, session.items) if k is not None]
    ctx.selected = set(keys)
    ctx.collected = len(session.items)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # the controller learns what each worker selected when the worker finishes
        workeroutput["gpucert_selected"] = [k.to_json() for k in keys]
