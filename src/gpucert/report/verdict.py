"""verdict.json (`gpucert.io/verdict/v3`): the machine-readable result of a run. Pure (RunFolder writes it).

v3 adds to v2 the run's `kind` (certify, configure, static, retest, recertify: a configure run measures nothing
and certifies nothing) and the node result `waived` (passed, with a failure a waiver in force accepts). Readers
take v2 documents too (`READABLE_SCHEMAS`; a v2 document is a certification and its waived nodes say `pass`).

`result` is `pass` only when every check the plan requires ran and none failed or errored; `incomplete` when a
required check was deselected, never reached, or skipped for a cause that did not run; `fail` otherwise (a failed
check outranks incompleteness). A skip is one root cause, one finding only when the check it names as its cause
failed: a skip whose cause passed (or was waived) is reported as an error.

A failure a waiver in force covers is `waived`: listed among the findings with its waiver, counted in
`summary.waived`, and no obstacle to `pass`; it is never an error, a skip or a check that did not run. A re-test's
nodes say where their evidence comes from (`nodes[n].carriedFrom`, null for a node measured in this run).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from gpucert.evaluate.skips import skip_stands
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.records import Carried, RetestRecord
from gpucert.plan.required import Plan
from gpucert.report.verdict_checks import READABLE_SCHEMAS, RESULTS, count_problems, node_passed, verdict_problems
from gpucert.report.verdict_model import (
    Coverage,
    FindingWaiver,
    Group,
    NodeSummary,
    NotRequired,
    PoolSummary,
    RetestSummary,
    SkipCause,
    Summary,
    Verdict,
    VerdictFinding,
)

__all__ = [
    "KINDS",
    "MISSING_LISTED",
    "NODE_RESULTS",
    "READABLE_SCHEMAS",
    "RESULTS",
    "VERDICT_SCHEMA",
    "Outcome",
    "Verdict",
    "build_verdict",
    "count_problems",
    "headline",
    "headline_parts",
    "incomplete_parts",
    "judge_skips",
    "kind_of",
    "node_passed",
    "node_result",
    "side_notes",
    "verdict_problems",
]

VERDICT_SCHEMA = READABLE_SCHEMAS[-1]
NODE_RESULTS = ("pass", "waived", "fail", "incomplete")  # a node's (and the fleet row's) result
# the run's kind, from its run folder's mode (layout.Mode), and what its headline calls it
KINDS = {
    "certify": "Certification",
    "configure": "Configuration",
    "static": "Static gate",
    "retest": "Re-test",
    "recertify": "Recertification",
    "soak": "Soak",
}
_KIND_OF_MODE = {"measure": "certify", "plan": "configure", "static": "static", "retest": "retest"}
_UNMEASURED = {"configure": "nothing measured", "static": "no cluster read, nothing measured"}
MISSING_LISTED = 50  # the verdict names this many missing checks; the counts cover all of them
BAD = (CheckStatus.FAIL, CheckStatus.ERROR)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one test item decided, and when it ran."""

    finding: Finding
    start: float = 0.0
    stop: float = 0.0

    def __init__(self, finding: Finding, start: float = 0.0, stop: float = 0.0) -> None:
        # each slot set by its own descriptor, as Finding.__init__ sets its fields (the frozen dataclass's looks
        # each name up through object.__setattr__): a re-test makes one Outcome per carried check, 188,000 at
        # 1,024 x 8, at 0.25 us each instead of 0.45 (tests/unit/test_verdict_model.py)
        _OUTCOME_SLOTS[0](self, finding)
        _OUTCOME_SLOTS[1](self, start)
        _OUTCOME_SLOTS[2](self, stop)


# each field's slot descriptor's __set__, in the fields' order: what Outcome.__init__ sets a field by
_OUTCOME_SLOTS: tuple[Callable[[Outcome, object], None], ...] = tuple(
    getattr(Outcome, f.name).__set__ for f in fields(Outcome)
)


def kind_of(mode: str) -> str:
    """The verdict's `kind` of a run folder's mode."""
    return _KIND_OF_MODE.get(mode, mode)


def headline_parts(verdict: Verdict | Mapping[str, Any]) -> tuple[str, str]:
    """What the run was, and its result: ("Configuration", "PASS: nothing measured"); a v2 verdict (no kind) is a
    certification."""
    if isinstance(verdict, Verdict):
        kind, result = verdict.what, verdict.result.upper()
    else:
        kind, result = str(verdict.get("kind") or "certify"), str(verdict["result"]).upper()
    return KINDS.get(kind, "Certification"), f"{result}: {_UNMEASURED[kind]}" if kind in _UNMEASURED else result


def headline(verdict: Verdict | Mapping[str, Any]) -> str:
    """As every report heads the run: "Certification FAIL", "Configuration PASS: nothing measured"."""
    return " ".join(headline_parts(verdict))


def node_result(summary: Group | Mapping[str, Any]) -> str:
    """A node's result in v3's words: a v2 verdict said `pass` for a node that passed by its waiver (its
    `waivedChecks` name the waived checks); v3 says `waived`."""
    if isinstance(summary, Group):
        return summary.v3_result
    result = str(summary["result"])
    return "waived" if result == "pass" and summary.get("waivedChecks") else result


def _sort_key(f: Finding) -> tuple[str, str, int, str]:
    return (f.node or "", f.check, -1 if f.gpu is None else f.gpu, f.message)


def _cause_finder(outcomes: Mapping[CheckKey, Outcome]) -> Callable[[str], Finding | None]:
    """The finding named by a skip's `cause` (`str(key)` of the check it follows from), as a map of every outcome
    by its name would find it, built only where the name alone cannot: a run has a few hundred skips among ~10^5
    checks (1,024 x 8), and naming every key was 0.5 s of a re-test's verdict. A name is parsed back to its key
    (CheckKey.parse); the map is built once where the name does not read back to itself, or could name two keys
    (`X@fleet`: the fleet's own check, or a node named `fleet`: the map keeps the later)."""
    everything: dict[str, Finding] | None = None

    def find(cause: str) -> Finding | None:
        nonlocal everything
        if not cause:  # no key's name is empty (each has an `@`)
            return None
        if everything is None:
            try:
                key: CheckKey | None = CheckKey.parse(cause)
            except ValueError:  # not a key's name: `/gpuX` with X no number
                key = None
            if key is not None and str(key) == cause:
                twin = key._replace(node="fleet") if key.node is None else None
                twin = key._replace(node=None) if key.node == "fleet" else twin
                if twin is None or twin not in outcomes:
                    found = outcomes.get(key)
                    return None if found is None else found.finding
            everything = {str(k): o.finding for k, o in outcomes.items()}
        return everything.get(cause)

    return find


def _judged(
    outcomes: Mapping[CheckKey, Outcome],
) -> tuple[list[tuple[CheckKey, Finding]], set[CheckKey], list[Finding]]:
    """The findings that did not pass, in order, with unjustified skips turned into errors (a skip never becomes a
    pass); the skips whose cause did not run; and the errors made. Every other finding is its outcome's, a pass."""
    odd = [(k, o.finding) for k, o in outcomes.items() if o.finding.status is not CheckStatus.PASS]
    cause_not_run: set[CheckKey] = set()
    made: list[Finding] = []
    find = _cause_finder(outcomes)
    for i, (key, f) in enumerate(odd):
        if f.status is not CheckStatus.SKIP:
            continue
        cause = find(f.cause or "")
        if cause is None:
            cause_not_run.add(key)
        elif (stands := skip_stands(f, cause)) is not f:  # its cause did not fail: an error
            odd[i] = (key, stands)
            made.append(stands)
    return odd, cause_not_run, made


def judge_skips(
    outcomes: Mapping[CheckKey, Outcome],
) -> tuple[dict[CheckKey, Finding], set[CheckKey], list[Finding]]:
    """Each outcome's finding with unjustified skips turned into errors; the skips whose cause did not run; and
    the errors made."""
    odd, cause_not_run, made = _judged(outcomes)
    judged = {k: o.finding for k, o in outcomes.items()}
    judged.update(odd)
    return judged, cause_not_run, made


def _counts(total: int, odd: list[Finding]) -> dict[str, int]:
    """The counts of `total` findings of which `odd` are all those that did not pass."""
    c = Counter(f.status for f in odd)
    return {
        "passed": total - len(odd),
        "failed": c[CheckStatus.FAIL],
        "errors": c[CheckStatus.ERROR],
        "skipped": c[CheckStatus.SKIP],
        "waived": c[CheckStatus.WAIVED],
    }


def _result(counts: Mapping[str, int], complete: bool) -> str:
    if counts["failed"] or counts["errors"]:
        return "fail"
    return "pass" if complete else "incomplete"


def _node_result(counts: Mapping[str, int], complete: bool) -> str:
    """A node's result: as the run's, but `waived` where it passed only because a waiver accepted a failure."""
    result = _result(counts, complete)
    return "waived" if result == "pass" and counts["waived"] else result


def _coverage(
    plan: Plan,
    odd: list[Finding],
    open_keys: tuple[set[CheckKey], set[CheckKey]],
    selected: set[CheckKey] | None,
    stopped: str | None,
) -> Coverage:
    """Which required checks ran; the others as deselected, not reached, or skipped for a cause that did not run.
    `open_keys`: the required keys with no finding, and the required skips whose cause did not run."""
    missing, unsettled = open_keys
    if selected is None:  # the session never said what it collected (a worker died): none counts as deselected
        deselected, not_reached = set(), set(missing)
    else:
        deselected, not_reached = missing - selected, missing & selected
    skip_causes = Counter(f.cause or "(none)" for f in odd if f.status is CheckStatus.SKIP)
    return Coverage(
        suites=tuple(plan.suites),
        required=len(plan.required),
        ran=len(plan.required) - len(missing),  # the required keys with a finding
        deselected=len(deselected),
        not_reached=len(not_reached),
        skipped_without_cause=len(unsettled),
        complete=not missing and not unsettled,
        stopped=stopped,
        missing=tuple(str(k) for k in sorted(missing | unsettled, key=CheckKey.sort_key)[:MISSING_LISTED]),
        skips=tuple(SkipCause(cause=c, checks=n) for c, n in skip_causes.most_common()),
        not_required=tuple(NotRequired(check=c, why=why) for c, why in plan.not_required),
    )


def _finding(f: Finding, stated: Mapping[str, Mapping[str, Any]]) -> VerdictFinding:
    """A finding as the verdict lists it; a waived one with its waiver's terms as the waivers file states them."""
    out = f.to_json()
    if f.waiver is not None:
        out["waiver"] = FindingWaiver.model_validate({"id": f.waiver, **stated.get(f.waiver, {})})
    return VerdictFinding.model_validate(out)


def _group(total: int, odd: list[Finding], complete: bool) -> dict[str, Any]:
    """The fields of a Group (the fleet's or a node's) over its `total` checks, `odd` those that did not pass."""
    c = _counts(total, odd)
    return {
        "result": _node_result(c, complete),
        **c,
        "failing": tuple(sorted({f.check for f in odd if f.status in BAD})),
        "waived_checks": tuple(sorted({f.check for f in odd if f.status is CheckStatus.WAIVED})),
    }


def _nodes(
    outcomes: Mapping[CheckKey, Outcome],
    odd: list[tuple[CheckKey, Finding]],
    names: list[str],
    still_open: set[str | None],
    measured: Mapping[str, str | None],
    carried: Mapping[str, Carried],
    pool_of: Mapping[str, str | None],
) -> tuple[Group, dict[str, NodeSummary]]:
    """The fleet's own checks as one group, and each node's (every node of the inventory, and any other a check
    names) with when it was measured, where its evidence was carried from, and its pool. Counted per node: how
    many checks each has, and its findings that did not pass (`odd`: a few among ~185 a node at 1,024 x 8)."""
    total: Counter[str | None] = Counter(map(_node_of, outcomes))
    by_node: dict[str | None, list[Finding]] = defaultdict(list)
    for k, f in odd:
        by_node[k.node].append(f)
    names = list(dict.fromkeys([*names, *sorted(n for n in total if n is not None)]))
    per_node = {
        n: NodeSummary(
            **_group(total[n], by_node.get(n, []), n not in still_open),
            measured=measured.get(n),
            carried_from=carried.get(n),
            pool=pool_of.get(n),
        )
        for n in names
    }
    return Group(**_group(total[None], by_node.get(None, []), None not in still_open)), per_node


_node_of = attrgetter("node")


def _retest_summary(retest: RetestRecord | None) -> RetestSummary | None:
    if retest is None:
        return None
    return RetestSummary(
        source=retest.source.run,
        source_certificate=retest.source.certificate,
        measured=tuple(retest.measured),
        carried=tuple(retest.carried),
        why=dict(retest.measured),
        absent=retest.absent or None,
    )


def build_verdict(
    *,
    run: str,
    kind: str = "certify",
    spec: str,
    target: str,
    nodes: list[str],
    gpus: int,
    plan: Plan,
    outcomes: Mapping[CheckKey, Outcome],
    selected: set[CheckKey] | None,
    stopped: str | None = None,
    measured: Mapping[str, str | None] | None = None,
    waivers: Mapping[str, Mapping[str, Any]] | None = None,
    retest: RetestRecord | None = None,
    node_pools: Mapping[str, str | None] | None = None,
    pools: Mapping[str, Mapping[str, Any]] | None = None,
    beside: Mapping[str, Any] | None = None,
) -> Verdict:
    """The verdict of a run: `outcomes` by key, against what `plan` requires and what the session `selected`;
    `waivers` by id as the run's waivers file states them, `retest` the record of a re-test.

    `kind` is what the run was (`KINDS`: a configure run certifies nothing). `node_pools` gives each node's pool
    (None: in no pool or several) and `pools` each pool's expectations
    (`nodes`, `gpusPerNode`, `product`, `baseline`): the verdict says per node its `pool`, and per pool its result
    over its nodes (additive to v2). `beside` holds what the verdict says beside the checks, as verdict.json names
    it: `fleetAgainstSku`, `undecided`, and where there was one, `preflight` and `recertify`.
    """
    odd, cause_not_run, _ = _judged(outcomes)
    findings_odd = [f for _, f in odd]
    unsettled = cause_not_run & plan.required
    # the required keys with no outcome: a set's difference with a dict looks each key up with the hash the set
    # keeps, where `required - outcomes.keys()` (or difference_update) hashed each of ~10^5 keys again
    missing = set(plan.required.difference(outcomes))
    coverage = _coverage(plan, findings_odd, (missing, unsettled), selected, stopped)
    counts = _counts(len(outcomes), findings_odd)
    still_open = {k.node for k in missing | unsettled}
    carried = retest.carried if retest is not None else {}
    fleet, per_node = _nodes(outcomes, odd, nodes, still_open, measured or {}, carried, node_pools or {})
    findings = sorted((f for f in findings_odd if f.status in (*BAD, CheckStatus.WAIVED)), key=_sort_key)
    return Verdict.model_validate(
        {
            "schema": VERDICT_SCHEMA,
            "run": run,
            "kind": kind,
            "spec": spec,
            "target": target,
            "result": _result(counts, coverage.complete),
            "coverage": coverage,
            "summary": Summary(nodes=len(nodes), gpus=gpus, checks=len(outcomes), **counts),
            "findings": [_finding(f, waivers or {}) for f in findings],
            "fleet": fleet,
            "nodes": per_node,
            "pools": {name: _pool_summary(name, info, per_node) for name, info in (pools or {}).items()},
            "retest": _retest_summary(retest),
            **(beside or {}),
        }
    )


def _pool_summary(name: str, info: Mapping[str, Any], nodes: Mapping[str, NodeSummary]) -> PoolSummary:
    """A pool's nodes and their results: failed when any failed (or when it has no node at all), incomplete when
    any is, else passed. Whether it has as many nodes as it expects is `inventory.nodes`'s, at the fleet level."""
    mine = {n: s for n, s in nodes.items() if s.pool == name}
    results: Counter[str] = Counter(s.result for s in mine.values())
    result = "fail" if results["fail"] or not mine else "incomplete" if results["incomplete"] else "pass"
    return PoolSummary.model_validate(
        {
            **info,
            "found": len(mine),
            "result": result,
            "results": {r: results[r] for r in NODE_RESULTS},
            "failing": sorted({c for s in mine.values() for c in s.failing}),
        }
    )


def side_notes(verdict: Verdict) -> list[tuple[str, str]]:
    """What a summary says beside the result: the peer comparisons too few peers left undecided, and the fleet
    behind its SKU figure (informational), as (kind, text) lines."""
    notes = [
        ("undecided", f"{u.comparison} ({', '.join(u.where)}): {u.why}; for {', '.join(u.metrics)}")
        for u in verdict.undecided
    ]
    notes += [("informational", line.message) for line in verdict.fleet_against_sku if line.behind]
    if (verdict.preflight or {}).get("skipped"):
        notes.append(("preflight", "skipped (--skip-preflight): the cluster's prerequisites were not checked first"))
    return notes


def incomplete_parts(c: Coverage) -> list[str]:
    """Why the required checks that did not run did not, the non-zero causes only: a Ctrl-C's checks are not
    reached, and are never said in the words of the user's own deselection (-k, --deselect, --lf)."""
    parts = [
        f"{c.deselected} not collected (-k, --deselect, --lf, or a suite left out)" if c.deselected else "",
        f"{c.not_reached} not reached ({c.stopped or 'the session ended'})" if c.not_reached else "",
        f"{c.skipped_without_cause} skipped for a cause that did not run" if c.skipped_without_cause else "",
    ]
    return [p for p in parts if p]
