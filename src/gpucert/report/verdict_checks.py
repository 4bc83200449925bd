"""Whether a verdict.json, as a raw document, is one gpucert could have written: its result supported by its own
counts and coverage, and its counts adding up from its checks. Signing, verifying and accepting refuse one that is
not. Pure; reads the raw JSON (a hostile document is what it is for), not the typed Verdict.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["COUNTED", "LISTED", "READABLE_SCHEMAS", "RESULTS", "count_problems", "node_passed", "verdict_problems"]

READABLE_SCHEMAS = ("gpucert.io/verdict/v2", "gpucert.io/verdict/v3")
RESULTS = ("pass", "fail", "incomplete")


def node_passed(result: object) -> bool:
    """A node's result that is a pass: `pass`, or `waived` (v3: passed with a failure a waiver accepts)."""
    return result in ("pass", "waived")


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
