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
from collections.abc import Mapping
from dataclasses import dataclass
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


def judge_skips(
    outcomes: Mapping[CheckKey, Outcome],
) -> tuple[dict[CheckKey, Finding], set[CheckKey], list[Finding]]:
    """Each outcome's finding with unjustified skips turned into errors; the skips whose cause did not run; and
    the errors made."""
    by_name = {str(k): o.finding for k, o in outcomes.items()}
    judged: dict[CheckKey, Finding] = {}
    cause_not_run: set[CheckKey] = set()
    made: list[Finding] = []
    for key, o in outcomes.items():
        f = o.finding
        if f.status is CheckStatus.SKIP:
            cause = by_name.get(f.cause or "")
            if cause is None:
                cause_not_run.add(key)
            elif (stands := skip_stands(f, cause)) is not f:  # its cause did not fail: an error
                f = stands
                made.append(f)
        judged[key] = f
    return judged, cause_not_run, made


def _summary(findings: list[Finding]) -> dict[str, int]:
    c = Counter(f.status for f in findings)
    return {
        "passed": c[CheckStatus.PASS],
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
    judged: Mapping[CheckKey, Finding],
    unsettled: set[CheckKey],
    selected: set[CheckKey] | None,
    stopped: str | None,
) -> Coverage:
    """Which required checks ran; the others as deselected, not reached, or skipped for a cause that did not run."""
    missing = set(plan.required - judged.keys())
    if selected is None:  # the session never said what it collected (a worker died): none counts as deselected
        deselected, not_reached = set(), set(missing)
    else:
        deselected, not_reached = missing - selected, missing & selected
    skip_causes = Counter(f.cause or "(none)" for f in judged.values() if f.status is CheckStatus.SKIP)
    return Coverage(
        suites=tuple(plan.suites),
        required=len(plan.required),
        ran=len(plan.required & judged.keys()),
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


def _group(mine: list[Finding], complete: bool) -> dict[str, Any]:
    """The fields of a Group (the fleet's or a node's) over its checks."""
    c = _summary(mine)
    return {
        "result": _node_result(c, complete),
        **c,
        "failing": tuple(sorted({f.check for f in mine if f.status in BAD})),
        "waived_checks": tuple(sorted({f.check for f in mine if f.status is CheckStatus.WAIVED})),
    }


def _nodes(
    judged: Mapping[CheckKey, Finding],
    names: list[str],
    still_open: set[str | None],
    measured: Mapping[str, str | None],
    carried: Mapping[str, Carried],
    pool_of: Mapping[str, str | None],
) -> tuple[Group, dict[str, NodeSummary]]:
    """The fleet's own checks as one group, and each node's (every node of the inventory, and any other a check
    names) with when it was measured, where its evidence was carried from, and its pool."""
    by_node: dict[str | None, list[Finding]] = defaultdict(list)
    for k, f in judged.items():
        by_node[k.node].append(f)
    names = list(dict.fromkeys([*names, *sorted({k.node for k in judged if k.node is not None})]))
    per_node = {
        n: NodeSummary(
            **_group(by_node.get(n, []), n not in still_open),
            measured=measured.get(n),
            carried_from=carried.get(n),
            pool=pool_of.get(n),
        )
        for n in names
    }
    return Group(**_group(by_node.get(None, []), None not in still_open)), per_node


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
    judged, cause_not_run, _ = judge_skips(outcomes)
    unsettled = cause_not_run & plan.required
    coverage = _coverage(plan, judged, unsettled, selected, stopped)
    counts = _summary(list(judged.values()))
    still_open = {k.node for k in (plan.required - judged.keys()) | unsettled}
    carried = retest.carried if retest is not None else {}
    fleet, per_node = _nodes(judged, nodes, still_open, measured or {}, carried, node_pools or {})
    findings = sorted((f for f in judged.values() if f.status in (*BAD, CheckStatus.WAIVED)), key=_sort_key)
    return Verdict.model_validate(
        {
            "schema": VERDICT_SCHEMA,
            "run": run,
            "kind": kind,
            "spec": spec,
            "target": target,
            "result": _result(counts, coverage.complete),
            "coverage": coverage,
            "summary": Summary(nodes=len(nodes), gpus=gpus, checks=len(judged), **counts),
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
