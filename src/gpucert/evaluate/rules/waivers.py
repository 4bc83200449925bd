"""The `waiver` family, and how a run applies its waivers (spec/waivers.py is the document).

A failed check a waiver in force covers is reported `waived` with its waiver, never dropped; errors, skips and
checks that did not run are never waived, so a waiver cannot make an incomplete run pass. Each waiver is itself two
checks of the run: `waiver.expired` (still in force at the run's time) and `waiver.unmatched` (it covers a failure
the run found). Expiry is judged at the run's time (RunView.run_time: the newest measurement in its folder), so
re-evaluating the same evidence gives the same verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime

from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.view import RunView
from gpucert.plan.checks import CheckKey, CheckStatus, Finding, family_of
from gpucert.plan.fabric_checks import rail_of
from gpucert.spec.waivers import Limit, SerialOf, Waiver, Waivers, waiver_id

__all__ = ["EXPIRED", "UNMATCHED", "WaiverBook", "book_of", "candidates_of", "decide_waiver", "serial_of", "why_not"]

EXPIRED, UNMATCHED = "waiver.expired", "waiver.unmatched"


def why_not(w: Waiver, finding: Finding, at: datetime) -> str | None:
    """None when this waiver accepts the (failed) finding at `at`; else why it does not."""
    if not w.in_force(at):
        return f"it expired on {w.expires.isoformat()} (the run is of {at:%Y-%m-%d})"
    if isinstance(w.accept, Limit):
        observed = finding.observed
        if not isinstance(observed, int | float):
            return f"it accepts {w.accept}, and this finding has no measured value to hold to it"
        lo, hi = w.accept.min, w.accept.max
        if (lo is not None and observed < lo) or (hi is not None and observed > hi):
            return f"it accepts {w.accept}, and {observed:g} is beyond that"
    return None


class WaiverBook:
    """A run's waivers, judged at the run's time."""

    def __init__(self, doc: Waivers, at: datetime) -> None:
        self.doc = doc
        self.at = at
        self.by_id = {waiver_id(i): w for i, w in enumerate(doc.waivers)}

    @property
    def ids(self) -> list[str]:
        return list(self.by_id)

    def matching(self, finding: Finding, serial_of: SerialOf, rail: int | None = None) -> Iterator[tuple[str, Waiver]]:
        return ((wid, w) for wid, w in self.by_id.items() if w.selects(finding, serial_of, rail))

    def waive(self, finding: Finding, serial_of: SerialOf, rail: int | None = None) -> Finding:
        """The finding (of `rail`, for a per-rail fabric check) `waived` when a waiver in force covers its failure;
        otherwise the finding as it was, with each waiver that selects it and why that one does not cover it (an
        expired waiver, a limit not met)."""
        if finding.status is not CheckStatus.FAIL:
            return finding
        notes = []
        for wid, w in self.matching(finding, serial_of, rail):
            why = why_not(w, finding, self.at)
            if why is None:
                message = (
                    f"{finding.message} [WAIVED by {wid}, accepted {w.accept if w.accept != 'as-is' else 'as is'}: "
                    f"{w.reason}; approved by {w.approved_by}; expires {w.expires.isoformat()}]"
                )
                return dataclasses.replace(finding, status=CheckStatus.WAIVED, waiver=wid, message=message)
            notes.append(f"{wid} does not cover it: {why}")
        if notes:
            return dataclasses.replace(finding, message=f"{finding.message} [{'; '.join(notes)}]")
        return finding

    def expired(self, wid: str) -> Finding:
        w = self.by_id[wid]
        if w.in_force(self.at):
            return Finding(EXPIRED, CheckStatus.PASS, None, None, f"{wid} ({w.describe()}) in force until {w.expires}")
        return Finding(
            EXPIRED,
            CheckStatus.FAIL,
            None,
            None,
            f"{wid} ({w.describe()}) expired on {w.expires.isoformat()}, before this run ({self.at:%Y-%m-%d}): what "
            "it accepted is a failure again; renew the waiver (a new expiry, approved again) or repair",
            observed=self.at.strftime("%Y-%m-%d"),
            expected=w.expires.isoformat(),
        )

    def unmatched(self, wid: str, candidates: list[tuple[CheckKey, Finding]], outside: str | None = None) -> Finding:
        """Whether the waiver covers a failure of this run: `candidates` are the decisions of the checks its
        check and selector name; `outside` says why a run of part of the fleet has none (a recertification)."""
        w = self.by_id[wid]
        if outside is not None and not candidates:
            return Finding(UNMATCHED, CheckStatus.PASS, None, None, f"{wid} ({w.describe()}) is {outside}")
        if not w.in_force(self.at):
            return Finding(
                UNMATCHED,
                CheckStatus.SKIP,
                None,
                None,
                f"{wid} has expired (see waiver.expired)",
                cause=str(CheckKey(EXPIRED, None, None, wid)),
            )
        failed = [f for _, f in candidates if f.status is CheckStatus.FAIL and f.check == w.check]
        if failed:
            where = ", ".join(f.where for f in failed[:5]) + (" ..." if len(failed) > 5 else "")
            return Finding(
                UNMATCHED, CheckStatus.PASS, None, None, f"{wid} selects the failure of {w.check} on {where}"
            )
        skipped = [f for _, f in candidates if f.status is CheckStatus.SKIP and f.cause]
        if skipped:
            message = f"{wid} ({w.describe()}): the check could not run here ({skipped[0].message})"
            return Finding(UNMATCHED, CheckStatus.SKIP, None, None, message, cause=skipped[0].cause)
        why = (
            "this run has no such check there (a node the inventory does not list, a GPU index past the node's, "
            "a serial no GPU shows, or a check the spec does not require)"
            if not candidates
            else "the check passed there"
        )
        return Finding(
            UNMATCHED,
            CheckStatus.FAIL,
            None,
            None,
            f"{wid} ({w.describe()}) matches no failure of this run: {why}; a waiver that waives nothing would "
            "silently cover a future failure there: remove it, or correct its check or selector",
        )


def serial_of(view: RunView) -> SerialOf:
    """The board serial of a GPU slot as the run measured it (None when not measured or not reported)."""

    def of(node: str, gpu: int) -> str | None:
        e = view.usable(node)
        g = e.gpu(gpu) if e is not None and e.collected else None
        return g.serial if g is not None else None

    return of


def _same(selected: int | None, of_key: int | None) -> bool:
    """A selector's GPU or rail, where it gives one, is the key's."""
    return selected is None or selected == of_key


def candidates_of(wid: str, view: RunView) -> list[tuple[CheckKey, Finding]]:
    """The checks of the run a waiver's check and selector name, each with its decision. A straggler finding is
    the decision of its metric's check (one test: below the baseline, else behind the peers)."""
    book = book_of(view)
    assert book is not None
    w = book.by_id[wid]
    metric = w.check.removeprefix("straggler.")
    s = w.select
    keys = []
    for key in sorted(view.plan.required, key=CheckKey.sort_key):
        if key.check not in (w.check, metric) or key.node is None:
            continue
        if s.serial is not None:
            if key.gpu is None or serial_of(view)(key.node, key.gpu) != s.serial:
                continue
        elif key.node != s.node or not _same(s.gpu, key.gpu) or not _same(s.rail, rail_of(key.detail)):
            continue
        keys.append(key)
    return [(k, view.decide(k)) for k in keys]


def book_of(view: RunView) -> WaiverBook | None:
    """The run's waivers judged at the run's time; None for a run prepared without waivers."""
    return view.once(
        "waiver.book", lambda: WaiverBook(view.waivers, view.run_time) if view.waivers is not None else None
    )


def decide_waiver(view: RunView, key: CheckKey) -> Finding:
    """`waiver.expired` or `waiver.unmatched` of one waiver of the run (the key's detail names it)."""
    check, wid = key.check, key.detail
    if wid is None or check not in (EXPIRED, UNMATCHED):
        raise no_rule(key)
    book = book_of(view)
    if book is None or wid not in book.by_id:
        return Finding(check, CheckStatus.ERROR, None, None, f"{wid}: no such waiver in this run's inputs")
    if check == EXPIRED:
        found = book.expired(wid)
    else:
        recert = view.recertification
        suite = family_of(book.by_id[wid].check).suite
        outside = None
        if suite not in view.plan.suites:
            outside = f"about {suite} checks, which this run ({', '.join(view.plan.suites)}) does not judge"
        elif recert is not None:
            outside = f"outside this recertification of {recert.node}"
        found = book.unmatched(wid, candidates_of(wid, view), outside)
    return dataclasses.replace(found, waiver=wid)
