"""Whether a run's verdict follows from its own evidence: every check the verdict counts as ran decided again from
the folder's signed inputs (spec and baselines in inputs/), inventory and evidence, and held to what verdict.json
says. Signing, verifying and accepting a run trust its verdict only when it does: a verdict.json edited and signed
again with the vendor's key (a failing node made to pass, its finding dropped, the counts moved) adds up by its own
arithmetic, yet says what its evidence does not.

Re-derived: each check's status (the verdict lists the failed, errored and waived ones as findings), the summary's
counts, each node's (and the fleet's) counts and result, and the run's result. Not re-derivable: which checks ran.
That is the session's (`-k`, an interrupt); it is taken from the verdict's coverage, held to its own arithmetic
(required = ran + deselected + not reached, the plan's number of required checks, the checks it names as missing).
When the verdict names every missing check, the checks that ran are known and compared one by one; when it names
only the first MISSING_LISTED, a node or fleet the verdict says passed still has every one of its checks compared
(a pass needs every check run), and every finding the verdict lists must be the evidence's.

Every kind of run folder gpucert signs is re-derived: a certification, a recertification, a re-test (its carried
evidence is in the folder, signed by its source), configure only and the static gate. A soak and an acceptance
record are not run folders of these kinds and are not re-derived here.

Each check is decided as the session decides it (pytest/gpus.py `decided`, pytest/outcomes.py): the rule's finding,
an exception in the rule the check's error, a skip with no cause an error, a failure a waiver in force accepts
waived; then a skip whose cause ran and did not fail is an error (report/verdict.py `judge_skips`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpucert._version import __version__
from gpucert.errors import EvidenceError, GpucertError
from gpucert.evaluate.evaluation import Evaluation, counted
from gpucert.evaluate.held import figures_document
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.layout import Mode
from gpucert.plan.records import read_run_info
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict import MISSING_LISTED, Outcome, judge_skips
from gpucert.report.verdict_model import Group, Verdict, read_verdict

__all__ = [
    "DERIVED_MODES",
    "NAMED",
    "Differences",
    "VerdictContradicted",
    "decided",
    "other_rules",
    "verdict_differences",
]

DERIVED_MODES = tuple(Mode.recorded())  # static, plan (configure), measure, recertify, retest
NAMED = 8  # differences named, the first ones; the count says how many more
COUNTS = {"passed": CheckStatus.PASS, "failed": CheckStatus.FAIL, "errors": CheckStatus.ERROR}
COUNTS |= {"skipped": CheckStatus.SKIP, "waived": CheckStatus.WAIVED}
LISTED = (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED)  # what the verdict lists among its findings
Where = tuple[str, str | None, int | None]  # check, node, gpu: how a finding names its check


@dataclass(frozen=True)
class Differences:
    """What the verdict says that its evidence does not, each as one line; `total` counts them all."""

    lines: tuple[str, ...]
    total: int

    def __bool__(self) -> bool:
        return self.total > 0

    def named(self) -> list[str]:
        more = self.total - len(self.lines)
        return [*self.lines, *([f"... and {more} more"] if more > 0 else [])]


class VerdictContradicted(EvidenceError):
    """A run whose verdict says what its evidence does not: not signed (exit 1, as a folder that does not verify),
    one line a difference."""

    exit_code = 1

    def __init__(self, differences: Differences, *, path: Path) -> None:
        self.differences = differences
        lines = "".join(f"\n  {line}" for line in differences.named())
        super().__init__(f"the verdict does not follow from the evidence; not signed:{lines}", path=path)


def decided(ev: Evaluation, key: CheckKey) -> Finding:
    """The check's finding as the session counts it (evaluate/evaluation.py `counted`, as pytest/gpus.py asks)."""
    return counted(ev, key)


def _where(f: Finding | object) -> Where:
    return (str(getattr(f, "check", "")), getattr(f, "node", None), getattr(f, "gpu", None))


def _name(where: Where) -> str:
    check, node, gpu = where
    return f"{check} on {node or 'the fleet'}" + ("" if gpu is None else f" GPU {gpu}")


def _coverage_problems(verdict: Verdict, required: int) -> list[str]:
    """The coverage against its own arithmetic and the plan: which checks ran is the session's, so only held."""
    c = verdict.coverage
    out = []
    if c.required != required:
        out.append(f"coverage: the verdict requires {c.required} checks, the run's plan {required}")
    if c.required != c.ran + c.deselected + c.not_reached:
        out.append(f"coverage: {c.ran} ran + {c.deselected} deselected + {c.not_reached} not reached != {c.required}")
    open_ = c.deselected + c.not_reached + c.skipped_without_cause
    if c.complete != (open_ == 0):
        out.append(f"coverage: complete is {c.complete} with {open_} checks not run or skipped without a cause")
    if len(c.missing) != min(open_, MISSING_LISTED):
        out.append(f"coverage: {len(c.missing)} checks named as missing, its counts say {min(open_, MISSING_LISTED)}")
    return out


def _missing_keys(verdict: Verdict, required: set[CheckKey]) -> tuple[set[CheckKey], list[str]]:
    keys: set[CheckKey] = set()
    bad = []
    for name in verdict.coverage.missing:
        try:
            key = CheckKey.parse(name)
        except ValueError:
            bad.append(name)
            continue
        (keys.add(key) if key in required else bad.append(name))
    return keys, [f"coverage: {name} is named as missing but the plan does not require it" for name in bad[:3]]


def _judge(ev: Evaluation, keys: Iterable[CheckKey]) -> dict[CheckKey, Finding]:
    outcomes = {key: Outcome(decided(ev, key)) for key in keys}
    judged, _, _ = judge_skips(outcomes)
    return judged


def _counts(findings: Iterable[Finding]) -> dict[str, int]:
    c = Counter(f.status for f in findings)
    return {name: c[status] for name, status in COUNTS.items()}


def _finding_differences(verdict: Verdict, judged: Mapping[CheckKey, Finding], every_ran: bool) -> list[str]:
    """Each listed finding whose status the evidence does not give, and (when every check that ran is known) each
    check the evidence fails, errs or waives that the verdict does not list."""
    derived: dict[Where, Counter[str]] = defaultdict(Counter)
    for f in judged.values():
        derived[_where(f)][f.status.value] += 1
    recorded: dict[Where, Counter[str]] = defaultdict(Counter)
    for vf in verdict.findings:
        recorded[_where(vf)][vf.status] += 1
    out = []
    for where in sorted({*recorded, *derived}, key=lambda w: (w[1] or "", w[0], -1 if w[2] is None else w[2])):
        rec, der = recorded.get(where, Counter()), derived.get(where, Counter())
        listed = Counter({s: n for s, n in der.items() if CheckStatus(s) in LISTED})
        # every check that ran known: the listed ones are exactly the evidence's; else each listed one is among them
        if rec == listed if every_ran else all(rec[s] <= der[s] for s in rec):
            continue
        said = _statuses(rec) or "passed or skipped (not listed)"
        found = _statuses(der) or ("not run" if every_ran else "not required")
        out.append(f"{_name(where)}: the verdict says {said}, the evidence {found}")
    return out


def _statuses(c: Counter[str]) -> str:
    return ", ".join(s + (f" x{n}" if n > 1 else "") for s, n in sorted(c.items()) if n)


def _group_differences(
    where: str, group: Group | None, mine: list[Finding], open_keys: int, every_ran: bool
) -> list[str]:
    """A node's (or the fleet's) counts and result against its checks decided again. `open_keys`: its checks named
    as missing (not run, or skipped for a cause that did not run)."""
    if group is None:
        return [f"{where}: not in the verdict, the evidence decides {len(mine)} checks of it"] if mine else []
    recorded = group.v3_result
    passed = recorded in ("pass", "waived")
    if not every_ran and not passed:
        return []  # which of its checks ran is not known: its listed findings are compared one by one
    der = _counts(mine)
    bad = der["failed"] or der["errors"]
    result = "fail" if bad else ("incomplete" if open_keys else ("waived" if der["waived"] else "pass"))
    out = []
    if recorded != result:
        out.append(f"{where}: the verdict says {recorded}, the evidence {result}")
    rec = {name: getattr(group, name) for name in COUNTS}
    for name in COUNTS:
        low, high = der[name], der[name] + (open_keys if name == "skipped" else 0)  # an open check may have skipped
        if not low <= rec[name] <= high:
            out.append(f"{where}: the verdict counts {rec[name]} {name}, the evidence {der[name]}")
    return out


def _node_differences(
    verdict: Verdict, judged: Mapping[CheckKey, Finding], missing: set[CheckKey], every_ran: bool
) -> list[str]:
    by_node: dict[str | None, list[Finding]] = defaultdict(list)
    for key, f in judged.items():
        by_node[key.node].append(f)
    open_by_node = Counter(k.node for k in missing)
    out = []
    if verdict.fleet is not None:  # a v2 verdict has no fleet group: the summary holds its checks
        out += _group_differences("the fleet", verdict.fleet, by_node.get(None, []), open_by_node[None], every_ran)
    for node in sorted({*verdict.nodes, *(n for n in by_node if n is not None)}):
        group = verdict.nodes.get(node)
        out += _group_differences(node, group, by_node.get(node, []), open_by_node[node], every_ran)
    return out


def _summary_differences(verdict: Verdict, ev: Evaluation, judged: Mapping[CheckKey, Finding], open_: int) -> list[str]:
    """The run's counts and result against every check that ran (known only when the verdict names every missing
    one), and its nodes and GPUs against the folder's."""
    s = verdict.summary
    out = []
    if s.nodes != len(ev.inventory.names):
        out.append(f"summary: the verdict counts {s.nodes} nodes, the inventory holds {len(ev.inventory.names)}")
    if s.gpus != (gpus := ev.gpu_total()):
        out.append(f"summary: the verdict counts {s.gpus} GPUs, the folder {gpus}")
    der = _counts(judged.values())
    for name in COUNTS:
        low, high = der[name], der[name] + (open_ if name == "skipped" else 0)
        if not low <= getattr(s, name) <= high:
            out.append(f"summary: the verdict counts {getattr(s, name)} {name}, the evidence {der[name]}")
    bad = der["failed"] or der["errors"]
    result = "fail" if bad else ("pass" if verdict.coverage.complete else "incomplete")
    if verdict.result != result:
        out.append(f"result: the verdict says {verdict.result}, the evidence {result}")
    return out


def other_rules(folder: RunFolder) -> str | None:
    """Why this gpucert cannot re-derive the folder's verdict (None when it can): the run was decided by another
    version of gpucert (run.json's gpucert_version), whose rules may decide a check otherwise. A verdict that
    followed from its evidence then would read as contradicted now: re-deriving is for the rules that made it."""
    try:
        made_by = read_run_info(folder).gpucert_version
    except GpucertError as exc:
        return f"its run.json cannot be read: {exc}"
    if made_by == __version__:
        return None
    return (
        f"the run was decided by gpucert {made_by or '(a version it does not name)'}, this is gpucert {__version__}: "
        f"re-derive it with gpucert {made_by or 'of that run'}, or re-evaluate its evidence with this one (gpucert "
        "evaluate) and sign that"
    )


def verdict_differences(folder: RunFolder, verdict: Verdict | None = None) -> Differences:
    """Where the run folder's verdict (`verdict`, or its verdict.json) says what its own evidence does not: empty
    when the verdict follows from the evidence. A folder whose inputs or evidence cannot be read is a difference
    (nothing it says can be re-derived), so is a run mode this does not know."""
    try:
        if folder.mode not in DERIVED_MODES:
            return Differences((f"a {folder.mode} run is not re-derived",), 1)
        if (why := other_rules(folder)) is not None:
            return Differences((why,), 1)
        verdict = verdict if verdict is not None else read_verdict(folder)
        ev = Evaluation.from_run(folder)
        required = set(ev.plan.required)
    except GpucertError as exc:
        return Differences((f"the verdict cannot be re-derived: {exc}",), 1)
    lines = _coverage_problems(verdict, len(required))
    missing, bad = _missing_keys(verdict, required)
    lines += bad
    c = verdict.coverage
    open_ = c.deselected + c.not_reached + c.skipped_without_cause
    every_ran = not lines and len(c.missing) == open_  # the verdict names every check that did not run
    judged = _judge(ev, required - missing if every_ran else required)
    lines += _finding_differences(verdict, judged, every_ran)
    lines += _node_differences(verdict, judged, missing, every_ran)
    if every_ran:
        lines += _summary_differences(verdict, ev, judged, len(missing))
    lines += _figures_differences(folder, ev)
    return Differences(tuple(lines[:NAMED]), len(lines))


def _figures_differences(folder: RunFolder, ev: Evaluation) -> list[str]:
    """figures.json, where the run wrote one, against what its evidence gives (evaluate/held.py): a re-test of the
    run takes a carried node's figures from it, so a signature must not cover figures the evidence does not."""
    path = folder.figures_path
    if not path.is_file():
        return []
    try:
        said = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return [f"figures.json cannot be read: {exc}"]
    try:
        derived = json.loads(figures_document(ev))
    except (GpucertError, OSError, ValueError) as exc:  # a NaN in a head, a document gone: nothing to hold it to
        return [f"figures.json cannot be derived from the run's evidence ({exc}), yet the folder holds one"]
    if said != derived:
        return ["figures.json says other figures than the run's evidence gives (a re-test would take them)"]
    return []
