"""Collection: the suites' tests parametrized over the run's inventory (nodes, a node's GPUs, rails, components,
DCGM tests, waivers; and, from the plan, the static gate's inputs, pools and rack pairs), the checks each item
decides (`check_keys`), and the items the plan requires.

A per-GPU check is one item per check and node (a test that takes `gpus: NodeGpus`): the item decides the check
on each of the node's GPUs, and every GPU's check stays its own key in the verdict (issue 28: one item per GPU
check was most of a fleet run's cost, pytest's own work per item). `-k`, `--lf` and `--deselect` select by check
and node. A test that takes `gpu: GpuSlot` is still one item per GPU.

Every xdist worker parametrizes from the same inventory.json, so all of them collect the same items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from gpucert.evaluate.evaluation import GpuSlot
from gpucert.evaluate.rules.performance_checks import decided_as
from gpucert.plan.checks import CheckKey, Finding
from gpucert.plan.fabric_checks import rail_detail
from gpucert.pytest.context import run_context
from gpucert.pytest.gpus import GpuChecks, decide_gpus

if TYPE_CHECKING:
    from gpucert.pytest.context import RunContext

__all__ = [
    "NO_SPEC",
    "NodeGpus",
    "check_key",
    "check_keys",
    "decision_of",
    "keep_required",
    "keyword_checks",
    "of_gpus",
    "parametrize",
    "record_selected",
    "refuse_suites_without_spec",
]

NO_SPEC = "gpucert suites need a spec: pytest suites --spec SPEC (or run `gpucert certify SPEC`)"
# the parameters that name a check's detail: those of a node, and those of the fleet (parametrized from the plan)
FLEET_DETAILS = ("gate_input", "pool", "racks")
DETAILS = ("component", "waiver", "rail", *FLEET_DETAILS)


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """The GPUs of one node a per-GPU check's item decides: what `gpus` tests are parametrized over (one item per
    check and node; its id is the node's name)."""

    node: str
    count: int

    def __repr__(self) -> str:
        return self.node


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
        details = list(ev.plan.fleet_details(check))
        if details:
            metafunc.parametrize(fleet_detail, details, ids=details)
        return
    if not ({"node", "gpu", "gpus"} & set(names)):
        return
    nodes = [n for n in ev.inventory.names if n not in ctx.carried]  # a re-test's carried nodes: no items (carried.py)
    if "gpus" in names:
        metafunc.parametrize("gpus", [NodeGpus(n, ev.pools.gpus_per_node(n)) for n in nodes], ids=nodes)
    elif "gpu" in names:
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


_KEYS = pytest.StashKey[tuple[CheckKey, ...]]()


def check_keys(item: pytest.Item) -> tuple[CheckKey, ...]:
    """The checks a test item decides, from its `check` marker and its parameters: one, or for a `gpus` item the
    check on each of its node's GPUs that the plan requires (none: the item decides nothing). Built once per item
    (collection, the `decision` fixture and each phase's report ask for them; at fleet scale rebuilding them was a
    cost per item)."""
    stash: pytest.Stash | None = getattr(item, "stash", None)
    if stash is None:
        return _check_keys(item)
    if _KEYS not in stash:
        stash[_KEYS] = _check_keys(item)
    return stash[_KEYS]


def check_key(item: pytest.Item) -> CheckKey | None:
    """The check a test item decides when it decides one (a node's, the fleet's, one GPU's); None when it decides
    none, or several (a `gpus` item: `check_keys`)."""
    keys = check_keys(item)
    return keys[0] if len(keys) == 1 and not of_gpus(item) else None


def _params(item: pytest.Item) -> dict[str, Any]:
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    return params


def of_gpus(item: pytest.Item) -> bool:
    return isinstance(_params(item).get("gpus"), NodeGpus)


def decision_of(ctx: RunContext, item: pytest.Item) -> Finding | GpuChecks | None:
    """What gpucert decided for the item's check (a `gpus` item: on each of its node's GPUs); None when the item
    names no check. An exception in a rule of one check is that check's error: the item's, or the one GPU's."""
    keys = check_keys(item)
    if not keys:
        return None
    return decide_gpus(ctx, keys) if of_gpus(item) else ctx.evaluation.decide(keys[0])


def _check_keys(item: pytest.Item) -> tuple[CheckKey, ...]:
    marker = item.get_closest_marker("check")
    if marker is None:
        return ()
    params = _params(item)
    try:
        check = str(marker.args[0]).format(**params)
    except (KeyError, IndexError):
        return ()  # not parametrized by gpucert (no spec): the test skips and decides nothing
    detail = next((params[p] for p in DETAILS if isinstance(params.get(p), str)), None)
    if detail is None and set(FLEET_DETAILS) & set(getattr(item, "fixturenames", ())):
        return ()  # the gate was given nothing for this check: no item decides it
    gpus, gpu = params.get("gpus"), params.get("gpu")
    if isinstance(gpus, NodeGpus):
        keys = (CheckKey(check, gpus.node, i, detail) for i in range(gpus.count))
        ctx = run_context(item.config)
        plan = ctx.evaluation.plan if ctx is not None else None
        return tuple(k for k in keys if plan is None or k in plan)
    if isinstance(gpu, GpuSlot):
        return (CheckKey(check, gpu.node, gpu.index, detail),)
    node = params.get("node")
    return (CheckKey(check, node if isinstance(node, str) else None, None, detail),)


def keyword_checks(item: pytest.Item) -> None:
    """Make every check id an item decides one of its `-k` keywords. pytest 9.1.1's `-k` matches a case-insensitive
    substring of an item's names, its markers' names and `Node.listextrakeywords()` (the `extra_keyword_matches` of
    the item and its parents: `_pytest/mark/__init__.py`, `KeywordMatcher.from_item`), never a marker's arguments;
    an identifier of its grammar takes dots, colons, dashes, slashes and brackets (`_pytest/mark/expression.py`,
    `ident`), so `-k health.ecc` is written as the verdict names the check. Runs before `-k` deselects (plugin.py)."""
    keys = check_keys(item)
    if keys:
        item.extra_keyword_matches.update(decided_as(keys[0].check))


def keep_required(ctx: RunContext, items: list[pytest.Item]) -> None:
    """Leave out the items whose check the spec does not require (a probe it did not ask for, a 1-GPU node's P2P)."""
    plan = ctx.evaluation.plan
    kept = [
        item
        for item in items
        if (not (keys := check_keys(item)) and not _decides(item))
        or (keys and (of_gpus(item) or keys[0] in plan))  # a `gpus` item's keys are the required ones already
    ]
    ctx.left_out = len(items) - len(kept)
    items[:] = kept


def _decides(item: pytest.Item) -> bool:
    """Whether the item is one of gpucert's checks that should decide something (a fleet detail, a node's GPUs):
    with no key, the plan requires nothing of it and it is left out."""
    return bool(set(FLEET_DETAILS) & set(getattr(item, "fixturenames", ()))) or of_gpus(item)


def refuse_suites_without_spec(items: list[pytest.Item]) -> None:
    """A suite run without a spec would only skip: pytest's usage error (exit 4), with the fix."""
    if any(item.get_closest_marker("check") for item in items):
        raise pytest.UsageError(NO_SPEC)


def record_selected(session: pytest.Session, ctx: RunContext) -> None:
    """The keys this session (or this worker) collected, after -k, --lf, --deselect: the verdict's coverage. None
    for a collection a Ctrl-C cut short: pytest 9.1.1 calls pytest_collection_finish in Session.perform_collect's
    `finally` (_pytest/main.py), with the items collected so far and before -k or the spec's selection ran; those
    would count every other check as deselected, as if the user had left it out, where it was never reached."""
    if not ctx.collection_done:
        return
    keys = [k for item in session.items for k in check_keys(item)]
    ctx.selected = set(keys)
    ctx.collected = len(session.items)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # the controller learns what each worker selected when the worker finishes
        workeroutput["gpucert_selected"] = [k.to_json() for k in keys]
