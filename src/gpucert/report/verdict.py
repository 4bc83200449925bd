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

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.required import Plan

__all__ = [
    "KINDS",
    "NODE_RESULTS",
    "READABLE_SCHEMAS",
    "RESULTS",
    "VERDICT_SCHEMA",
    "Outcome",
    "build_verdict",
    "count_problems",
    "headline",
    "headline_parts",
    "kind_of",
    "node_passed",
    "node_result",
    "side_notes",
    "verdict_problems",
]

VERDICT_SCHEMA = "gpucert.io/verdict/v3"
READABLE_SCHEMAS = ("gpucert.io/verdict/v2", VERDICT_SCHEMA)
RESULTS = ("pass", "fail", "incomplete")
NODE_RESULTS = ("pass", "waived", "fail", "incomplete")  # a node's (and the fleet row's) result
# the run's kind, from its run folder's mode (runfolder.MODES), and what its headline calls it
KINDS = {
    "certify": "Certification",
    "configure": "Configuration",
    "static": "Static gate",
    "retest": "Re-test",
    "recertify": "Recertification",
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


def headline_parts(verdict: Mapping[str, Any]) -> tuple[str, str]:
    """What the run was, and its result: ("Configuration", "PASS: nothing measured"); a v2 verdict (no kind) is a
    certification."""
    kind = str(verdict.get("kind") or "certify")
    result = str(verdict["result"]).upper()
    return KINDS.get(kind, "Certification"), f"{result}: {_UNMEASURED[kind]}" if kind in _UNMEASURED else result


def headline(verdict: Mapping[str, Any]) -> str:
    """As every report heads the run: "Certification FAIL", "Configuration PASS: nothing measured"."""
    return " ".join(headline_parts(verdict))


def node_passed(result: object) -> bool:
    """A node's result that is a pass: `pass`, or `waived` (v3: passed with a failure a waiver accepts)."""
    return result in ("pass", "waived")


def node_result(summary: Mapping[str, Any]) -> str:
    """A node's result in v3's words: a v2 verdict said `pass` for a node that passed by its waiver (its
    `waivedChecks` name the waived checks); v3 says `waived`."""
    result = str(summary["result"])
    return "waived" if result == "pass" and summary.get("waivedChecks") else result


def _sort_key(f: Finding) -> tuple[str, str, int, str]:
    return (f.node or "", f.check, -1 if f.gpu is None else f.gpu, f.message)


def _judge_skips(
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
            elif cause.status not in BAD:
                f = Finding(
                    f.check,
                    CheckStatus.ERROR,
                    f.node,
                    f.gpu,
                    f"skipped because of {f.cause}, which did not fail ({cause.status.value}): {f.message}",
                )
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
    retest: Mapping[str, Any] | None = None,
    node_pools: Mapping[str, str | None] | None = None,
    pools: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The verdict of a run: `outcomes` by key, against what `plan` requires and what the session `selected`;
    `waivers` by id as the run's waivers file states them, `retest` the record of a re-test.

    `kind` is what the run was (`KINDS`: a configure run certifies nothing). `node_pools` gives each node's pool
    (None: in no pool or several) and `pools` each pool's expectations
    (`nodes`, `gpusPerNode`, `product`, `baseline`): the verdict says per node its `pool`, and per pool its result
    over its nodes (additive to v2).
    """
    judged, cause_not_run, _ = _judge_skips(outcomes)
    ran = set(plan.required & judged.keys())
    missing = set(plan.required - judged.keys())
    if selected is None:  # the session never said what it collected (a worker died): none counts as deselected
        deselected, not_reached = set(), set(missing)
    else:
        deselected, not_reached = missing - selected, missing & selected
    unsettled = cause_not_run & plan.required
    complete = not missing and not unsettled
    everything = list(judged.values())
    counts = _summary(everything)
    result = _result(counts, complete)
    skip_causes = Counter(f.cause or "(none)" for k, f in judged.items() if f.status is CheckStatus.SKIP)
    findings = sorted((f for f in everything if f.status in (*BAD, CheckStatus.WAIVED)), key=_sort_key)
    stated = waivers or {}

    def finding_json(f: Finding) -> dict[str, Any]:
        out = f.to_json()
        if f.waiver is not None:
            out["waiver"] = {"id": f.waiver, **stated.get(f.waiver, {})}
        return out

    by_node: dict[str | None, list[Finding]] = defaultdict(list)
    for k, f in judged.items():
        by_node[k.node].append(f)
    still_open = {k.node for k in missing | unsettled}

    def group(where: str | None) -> dict[str, Any]:
        mine = by_node.get(where, [])
        c = _summary(mine)
        open_ = where in still_open
        return {
            "result": _node_result(c, not open_),
            **c,
            "failing": sorted({f.check for f in mine if f.status in BAD}),
            "waivedChecks": sorted({f.check for f in mine if f.status is CheckStatus.WAIVED}),
        }

    names = list(dict.fromkeys([*nodes, *sorted({k.node for k in judged if k.node is not None})]))
    when = measured or {}
    carried: Mapping[str, Any] = (retest or {}).get("carried", {})
    of = node_pools or {}
    per_node = {
        n: {**group(n), "measured": when.get(n), "carriedFrom": carried.get(n), "pool": of.get(n)} for n in names
    }
    out = {
        "schema": VERDICT_SCHEMA,
        "run": run,
        "kind": kind,
        "spec": spec,
        "target": target,
        "result": result,
        "coverage": {
            "suites": list(plan.suites),
            "required": len(plan.required),
            "ran": len(ran),
            "deselected": len(deselected),
            "notReached": len(not_reached),
            "skippedWithoutCause": len(unsettled),
            "complete": complete,
            "stopped": stopped,
            "missing": [str(k) for k in sorted(missing | unsettled, key=CheckKey.sort_key)[:MISSING_LISTED]],
            "skips": [{"cause": c, "checks": n} for c, n in skip_causes.most_common()],
            "notRequired": [{"check": c, "why": why} for c, why in plan.not_required],
        },
        "summary": {
            "nodes": len(nodes),
            "gpus": gpus,
            "checks": len(judged),
            **counts,
        },
        "findings": [finding_json(f) for f in findings],
        "fleet": group(None),
        "nodes": per_node,
        "pools": {name: _pool_summary(name, info, per_node) for name, info in (pools or {}).items()},
    }
    if retest is not None:
        out["retest"] = {
            "source": retest["source"]["run"],
            "sourceCertificate": retest["source"].get("certificate"),
            "measured": list(retest.get("measured", {})),
            "carried": list(carried),
            "why": dict(retest.get("measured", {})),
        }
    return out


def _pool_summary(name: str, info: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A pool's nodes and their results: failed when any failed (or when it has no node at all), incomplete when
    any is, else passed. Whether it has as many nodes as it expects is `inventory.nodes`'s, at the fleet level."""
    mine = {n: s for n, s in nodes.items() if s.get("pool") == name}
    results = Counter(s["result"] for s in mine.values())
    result = "fail" if results["fail"] or not mine else "incomplete" if results["incomplete"] else "pass"
    return {
        **info,
        "found": len(mine),
        "result": result,
        "results": {r: results[r] for r in NODE_RESULTS},
        "failing": sorted({c for s in mine.values() for c in s["failing"]}),
    }


def side_notes(verdict: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a summary says beside the result: the peer comparisons too few peers left undecided, and the fleet
    behind its SKU figure (informational), as (kind, text) lines."""
    notes = [
        ("undecided", f"{u['comparison']} ({', '.join(u['where'])}): {u['why']}; for {', '.join(u['metrics'])}")
        for u in verdict.get("undecided", [])
    ]
    notes += [("informational", line["message"]) for line in verdict.get("fleetAgainstSku", []) if line["behind"]]
    if (verdict.get("preflight") or {}).get("skipped"):
        notes.append(("preflight", "skipped (--skip-preflight): the cluster's prerequisites were not checked first"))
    return notes


def verdict_problems(verdict: Any) -> list[str]:
    """What makes a verdict.json not one gpucert could have written: a result its own counts and coverage do not
    support (a `pass` with failures or with checks that did not run), missing keys, an unknown schema. Empty when
    the verdict is consistent. Signing and verifying refuse an inconsistent verdict."""
    if not isinstance(verdict, dict):
        return [f"not a JSON object ({type(verdict).__name__})"]
    if verdict.get("schema") not in READABLE_SCHEMAS:
        return [f"schema is {verdict.get('schema')!r}, none of {', '.join(READABLE_SCHEMAS)}"]
    missing = [
        k for k in ("run", "spec", "target", "result", "coverage", "summary", "findings", "nodes") if k not in verdict
    ]
    if missing:
        return [f"keys missing: {', '.join(missing)}"]
    result, c, s = verdict["result"], verdict["coverage"], verdict["summary"]
    try:
        bad = int(s["failed"]) + int(s["errors"])
        complete = bool(c["complete"]) and int(c["ran"]) == int(c["required"])
        counted = {f.get("status") for f in verdict["findings"]} - {"waived"}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [f"summary or coverage unreadable ({exc})"]
    problems = []
    if result not in RESULTS:
        problems.append(f"result {result!r} is none of {', '.join(RESULTS)}")
    elif result == "pass" and (bad or not complete or counted):
        problems.append(
            f"result pass with {s['failed']} failed, {s['errors']} errors and {c['ran']} of {c['required']} required "
            "checks run"
        )
    elif result == "incomplete" and (bad or complete):
        problems.append("result incomplete, but its counts say failed or complete")
    elif result == "fail" and not bad:
        problems.append("result fail without a failed or errored check")
    node_results = {n: v.get("result") for n, v in verdict["nodes"].items() if isinstance(v, dict)}
    if result == "pass" and not all(node_passed(r) for r in node_results.values()):
        problems.append("result pass, but not every node passed")
    return problems + count_problems(verdict)


COUNTED = {"passed": "pass", "failed": "fail", "errors": "error", "skipped": "skip", "waived": "waived"}
LISTED = ("failed", "errors", "waived")  # the counts whose every check is listed among the findings


def _counts(where: str, group: Any) -> tuple[dict[str, int] | None, str | None]:
    if not isinstance(group, dict):
        return None, f"{where} is not an object"
    try:
        counts = {k: group[k] for k in COUNTED}
    except KeyError as exc:
        return None, f"{where} has no count of {exc.args[0]}"
    if any(type(v) is not int or v < 0 for v in counts.values()):
        return None, f"{where}'s counts are not whole numbers: {counts}"
    return counts, None


def _group_problems(where: str, group: Any, listed: Counter[tuple[Any, Any]]) -> tuple[dict[str, int], list[str]]:
    """One group's (the fleet's or a node's) counts, and where they disagree with its findings and its result."""
    counts, why = _counts(where, group)
    if counts is None:
        return dict.fromkeys(COUNTED, 0), [str(why)]
    node = None if where == "fleet" else where.removeprefix("nodes.")
    problems = [
        f"{where} counts {counts[k]} {k}, its findings list {listed[(node, COUNTED[k])]}"
        for k in LISTED
        if listed[(node, COUNTED[k])] != counts[k]
    ]
    bad = counts["failed"] + counts["errors"]
    if (group.get("result") == "fail") != (bad > 0):
        problems.append(f"{where} is {group.get('result')} with {bad} failed or errored checks")
    return counts, problems


def count_problems(verdict: dict[str, Any]) -> list[str]:
    """Where the verdict's counts do not add up from its own checks (empty when they do): the summary is the sum
    of its fleet's and its nodes' counts, its checks their total; every failed, errored and waived check is
    listed among the findings, node by node; a group fails exactly when one of its checks failed or errored; and
    coverage runs no more checks than it requires. A verdict re-signed after an edit still has to add up."""
    summary, groups = _counts("summary", verdict.get("summary"))
    if summary is None:
        return [groups or "summary unreadable"]
    nodes = verdict.get("nodes")
    if not isinstance(nodes, dict) or not isinstance(verdict.get("findings"), list):
        return ["nodes or findings unreadable"]
    parts = {"fleet": verdict.get("fleet", dict.fromkeys(COUNTED, 0)), **{f"nodes.{n}": v for n, v in nodes.items()}}
    if verdict.get("schema") == "gpucert.io/verdict/v2":  # the first v2 writer (cc4c956) counted no group's waivers
        parts = {w: {"waived": 0, **g} if isinstance(g, dict) else g for w, g in parts.items()}
    problems: list[str] = []
    total = dict.fromkeys(COUNTED, 0)
    listed = Counter((f.get("node"), f.get("status")) for f in verdict["findings"] if isinstance(f, dict))
    for where, group in parts.items():
        counts, found = _group_problems(where, group, listed)
        problems += found
        total = {k: total[k] + counts[k] for k in COUNTED}
    return problems or _total_problems(verdict, summary, total)


def _total_problems(verdict: dict[str, Any], summary: dict[str, int], total: dict[str, int]) -> list[str]:
    """The summary against the sum of its groups, its checks against its counts, coverage against its checks."""
    problems = []
    sums = [f"{k} {summary[k]} (its groups add up to {total[k]})" for k in COUNTED if summary[k] != total[k]]
    if sums:
        problems.append(f"the summary's counts are not its checks': {', '.join(sums)}")
    checks = verdict["summary"].get("checks")
    if checks != sum(summary.values()):
        problems.append(f"summary.checks is {checks}, its counts add up to {sum(summary.values())}")
    ran = (verdict.get("coverage") or {}).get("ran")
    if isinstance(ran, int) and isinstance(checks, int) and ran > checks:
        problems.append(f"coverage says {ran} checks ran, the summary counts {checks}")
    return problems
