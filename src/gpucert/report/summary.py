"""The verdict's summary, written once for every place that prints it: pytest's terminal (the gpucert section after
pytest's own summary) and `gpucert certify` and its kin (the tables, then the same lines). Pure: a Verdict in, lines
and table rows out; each sink only styles them (pytest's terminal writer, rich on the command line).

A line's `style` names what it says (`pass`, `fail`, `incomplete`, `waived`, `note`), not a colour."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpucert.report.html import natural_key
from gpucert.report.verdict import headline_parts, incomplete_parts, side_notes
from gpucert.report.verdict_model import Group, NodeSummary, Verdict

__all__ = ["LISTED", "Line", "Table", "summary_lines", "summary_tables"]

LISTED = 20  # failed (and waived) checks named one per line; the counts and verdict.json cover the rest
MISSING_SHOWN = 10  # required checks named as not run
NODES_LISTED = 64  # past this many nodes, the terminal's table lists those that did not pass and sums the others


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    style: str | None = None
    indent: int = 0


Row = tuple[tuple[str, str | None], ...]  # a cell is (text, style)


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]


def _headline(verdict: Verdict, shout: bool) -> Line:
    """ "CERTIFICATION FAIL: 630 of 640 required checks ran; ..." (pytest's section shouts the run's kind; the
    command line colours it instead)."""
    noun, said = headline_parts(verdict)
    c, s = verdict.coverage, verdict.summary
    return Line(
        f"{noun.upper() if shout else noun} {said}: {c.ran} of {c.required} required checks ran; {s.passed} "
        f"passed, {s.failed} failed, {s.errors} errors, {s.skipped} skipped for a failing cause"
        + (f", {s.waived} waived" if s.waived else "")
        + f" ({s.checks} checks on {s.nodes} nodes / {s.gpus} GPUs)",
        "pass" if verdict.passed else verdict.result,
    )


def _listed(verdict: Verdict) -> list[Line]:
    """Each failed or errored check, then each waived one with its waiver's terms, at most LISTED of each."""
    lines = [Line(f"{f.status.upper()} {f.check}@{f.where}", "fail", 1) for f in verdict.failures()[:LISTED]]
    for f in verdict.waived()[:LISTED]:
        w = f.waiver
        terms = f" by {w.id} ({w.reason}; approved by {w.approved_by}; expires {w.expires})" if w else ""
        lines.append(Line(f"waived: {f.check}@{f.where}{terms}", "waived", 1))
    return lines


def _incomplete(verdict: Verdict) -> list[Line]:
    c = verdict.coverage
    if c.complete:
        return []
    said = Line(
        f"incomplete: of the required checks, {', '.join(incomplete_parts(c))}; a run is PASS only when every "
        "required check ran",
        "incomplete",
        1,
    )
    return [said, *(Line(f"did not run: {key}", "incomplete", 2) for key in c.missing[:MISSING_SHOWN])]


def summary_lines(
    verdict: Verdict, *, shout: bool, listed: bool = True, left_out: int = 0, verdict_path: Path | None = None
) -> list[Line]:
    """The summary: the headline and counts, each failed and waived check (`listed`; the command line lists them
    in its findings table instead), the re-test, what did not run, and what the verdict says beside the checks."""
    lines = [_headline(verdict, shout), *(_listed(verdict) if listed else [])]
    retest = verdict.retest
    if retest is not None:
        names = ", ".join(sorted(retest.measured, key=natural_key)) or "none"
        lines.append(
            Line(
                f"re-test of {retest.source}: {len(retest.measured)} nodes measured now, "
                f"{len(retest.carried)} carried over (measured now: {names})",
                indent=1,
            )
        )
        if retest.absent:
            gone = ", ".join(retest.absent)
            lines.append(
                Line(f"re-test: not in the fleet now, so not re-tested: {gone} (in {retest.source})", "note", 1)
            )
    lines += _incomplete(verdict)
    if left_out:
        lines.append(Line(f"{left_out} test items the spec does not require were left out", indent=1))
    lines += [Line(f"not required: {n.check}: {n.why}", indent=1) for n in verdict.coverage.not_required]
    lines += [Line(f"{kind}: {text}", "note", 1) for kind, text in side_notes(verdict)]
    if verdict_path is not None:
        lines.append(Line(f"verdict: {verdict_path}", indent=1))
    return lines


def _group_row(name: str, g: Group, pool: list[str]) -> Row:
    counts = (g.passed, g.failed, g.errors, g.skipped, g.waived)
    return (
        (name, None),
        *((p, None) for p in pool),
        (g.result.upper(), g.result),
        *((str(n), None) for n in counts),
        (", ".join(g.failing), None),
    )


def _passed_row(passed: Sequence[tuple[str, NodeSummary]], several: bool) -> Row:
    """One row for the nodes that passed: how many, and their checks' counts summed."""
    counts = {k: sum(getattr(s, k) for _, s in passed) for k in ("passed", "failed", "errors", "skipped", "waived")}
    pools = ", ".join(sorted({s.pool or "(none)" for _, s in passed}))
    return _group_row(f"{len(passed)} nodes passed", Group(result="pass", **counts), [pools] if several else [])


def _nodes_table(verdict: Verdict) -> Table | None:
    """A row per node (by pool where there are several), and the fleet's own checks where they did not pass (as
    report.html: a green "(fleet) PASS" over failing nodes reads as the fleet passing); past NODES_LISTED nodes,
    a row per node that did not pass and one row for those that did. None without a row (a static gate reads no
    node)."""
    several = len(verdict.pools) > 1
    order = {p: i for i, p in enumerate(verdict.pools)}
    nodes = sorted(verdict.nodes.items(), key=lambda kv: (order.get(kv[1].pool or "", len(order)), natural_key(kv[0])))
    rows = []
    if verdict.fleet is not None and verdict.fleet.result != "pass":
        rows.append(_group_row("(fleet)", verdict.fleet, ["-"] if several else []))
    if len(nodes) > NODES_LISTED:  # a fleet's thousand rows of PASS bury the few that matter: report.html has all
        passed = [(n, s) for n, s in nodes if s.result == "pass"]
        nodes = [(n, s) for n, s in nodes if s.result != "pass"]
    else:
        passed = []
    rows += [_group_row(n, s, [s.pool or "(none)"] if several else []) for n, s in nodes]
    if passed:
        rows.append(_passed_row(passed, several))
    if not rows:
        return None
    columns = ("node", *(("pool",) if several else ()), "result", "passed", "failed", "errors", "skipped", "waived")
    return Table(f"gpucert verdict: {verdict.spec} ({verdict.target})", (*columns, "failing checks"), tuple(rows))


def summary_tables(verdict: Verdict) -> list[Table]:
    """The command line's tables: the nodes, the pools (where there are several), and every finding."""
    tables = [t for t in [_nodes_table(verdict)] if t is not None]
    if len(verdict.pools) > 1:
        pools: tuple[Row, ...] = tuple(
            (
                (name, None),
                (str(p.product), None),
                (str(p.gpus_per_node), None),
                (f"{p.found} of {p.nodes}", None),
                (str(p.baseline), None),
                (p.result.upper(), p.result),
            )
            for name, p in verdict.pools.items()
        )
        tables.append(Table("pools", ("pool", "product", "GPUs/node", "nodes", "baseline", "result"), pools))
    if verdict.findings:
        found: tuple[Row, ...] = tuple(
            ((f.check, None), (f.where, None), (f.status, None), (f.message, None)) for f in verdict.findings
        )
        tables.append(Table("findings", ("check", "where", "status", "message"), found))
    return tables
