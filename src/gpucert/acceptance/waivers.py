"""Waivers (`kind: Waivers`): deviations the buyer and the vendor agreed to accept, and how a run applies them.

Each waiver names a check, a selector (a node, one of its GPUs, or a GPU's serial: a serial follows the board),
what is accepted (`as-is`, or a limit the observed value must still meet), a reason, who approved it and an expiry
date. A failed check a waiver in force covers is reported `waived` with its waiver, never dropped; errors, skips and
checks that did not run are never waived, so a waiver cannot make an incomplete run pass. Each waiver is itself two
checks of the run: `waiver.expired` (still in force at the run's time) and `waiver.unmatched` (it covers a failure
the run found). Expiry is judged at the run's time: the newest measurement in its folder, so re-evaluating the
same evidence gives the same verdict.

Loading reads the waivers file; the rest is pure (the run's checks come through the Evaluation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from gpucert.measure.evidence import read_evidence
from gpucert.plan.checks import PREREQUISITE_CHECKS, CheckKey, CheckStatus, Family, Finding, family_of
from gpucert.plan.layout import run_id_time
from gpucert.spec.cluster import Metadata
from gpucert.spec.documents import Document, Problem, load_document
from gpucert.spec.names import NameError_, check_node_name

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation

__all__ = [
    "EXPIRED",
    "UNMATCHED",
    "Limit",
    "Selector",
    "Waiver",
    "WaiverBook",
    "Waivers",
    "book_for",
    "decide_waiver",
    "load_waivers",
    "run_time",
    "serial_of",
    "waiver_id",
]

EXPIRED, UNMATCHED = "waiver.expired", "waiver.unmatched"
SerialOf = Callable[[str, int], str | None]


class Selector(Document):
    """Where a waiver applies: a node (every GPU of it), one GPU of a node, or the GPU with a serial."""

    node: str | None = None
    gpu: Annotated[int, Field(ge=0)] | None = None
    serial: Annotated[str, Field(min_length=1)] | None = None

    @field_validator("node")
    @classmethod
    def _node_name(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                check_node_name(v)
            except NameError_ as exc:
                raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _one_way(self) -> Selector:
        if (self.node is None) == (self.serial is None):
            raise ValueError("select one of `node` (with `gpu` for one GPU) or `serial` (the GPU's board serial)")
        if self.gpu is not None and self.node is None:
            raise ValueError("`gpu` needs the `node` it is on; a serial names the board wherever it is")
        return self

    def __str__(self) -> str:
        if self.serial is not None:
            return f"serial {self.serial}"
        return str(self.node) if self.gpu is None else f"{self.node}/gpu{self.gpu}"


class Limit(Document):
    """The deviation accepted: the observed value must still be at least `min` (or at most `max`)."""

    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _one(self) -> Limit:
        if (self.min is None) == (self.max is None):
            raise ValueError("give one of `min` or `max` (or write `accept: as-is`)")
        return self

    def __str__(self) -> str:
        return f"min {self.min:g}" if self.min is not None else f"max {self.max:g}"


class Waiver(Document):
    check: str
    select: Selector
    accept: Literal["as-is"] | Limit
    reason: str
    approved_by: str = Field(alias="approvedBy")
    expires: date

    @field_validator("reason", "approved_by")
    @classmethod
    def _said(cls, v: str) -> str:
        """A waiver is people's decision: who approved it and why must be written, not blank or whitespace."""
        if not v.strip():
            raise ValueError("is blank: write who approved the waiver and why (e.g. approvedBy: 'buyer: j.doe')")
        return v

    def approvers(self) -> list[str]:
        """The people `approvedBy` names: `buyer: j.doe; vendor: a.smith` is j.doe and a.smith (the role before a
        colon says which party signs; names are separated by `;` or `,`)."""
        parts = [p.strip() for p in self.approved_by.replace(",", ";").split(";")]
        return [p.split(":", 1)[-1].strip() for p in parts if p.split(":", 1)[-1].strip()]

    @field_validator("accept", mode="before")
    @classmethod
    def _one_form(cls, v: Any) -> Any:
        """`as-is` or a limit, said plainly (a union's errors would name pydantic's union members)."""
        if isinstance(v, dict):
            try:
                return Limit.model_validate(v)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = "unknown key; the keys here are min and max (or write `accept: as-is`)"
                raise ValueError(f"{where + ': ' if where else ''}{msg}") from None
        if v != "as-is":
            raise ValueError(f"{v!r}: write `accept: as-is`, or the limit still to be met: {{min: X}} or {{max: X}}")
        return v

    @field_validator("check")
    @classmethod
    def _waivable(cls, check: str) -> str:
        try:
            family = family_of(check)
        except ValueError:
            families = ", ".join(f.value for f in Family if f is not Family.WAIVER)
            raise ValueError(f"{check!r} is not a gpucert check id (the families are {families}, ...)") from None
        if family is Family.WAIVER:
            raise ValueError(f"{check} is a waiver's own check: it cannot be waived; fix or remove the waiver")
        if check in PREREQUISITE_CHECKS:
            raise ValueError(
                f"{check} cannot be waived: other checks depend on it, and a waiver cannot stand in for checks that "
                "could not run (or for a version the spec pins: change the spec); repair the node instead"
            )
        return check

    def in_force(self, at: datetime) -> bool:
        """In force through the whole of its expiry date (UTC)."""
        return at.astimezone(UTC).date() <= self.expires

    def selects(self, finding: Finding, serial_of: SerialOf) -> bool:
        """Whether the finding is of this waiver's check and where its selector points."""
        if finding.check != self.check or finding.node is None:
            return False
        s = self.select
        if s.serial is not None:
            return finding.gpu is not None and serial_of(finding.node, finding.gpu) == s.serial
        return finding.node == s.node and (s.gpu is None or s.gpu == finding.gpu)

    def why_not(self, finding: Finding, at: datetime) -> str | None:
        """None when this waiver accepts the (failed) finding at `at`; else why it does not."""
        if not self.in_force(at):
            return f"it expired on {self.expires.isoformat()} (the run is of {at:%Y-%m-%d})"
        if isinstance(self.accept, Limit):
            observed = finding.observed
            if not isinstance(observed, int | float):
                return f"it accepts {self.accept}, and this finding has no measured value to hold to it"
            lo, hi = self.accept.min, self.accept.max
            if (lo is not None and observed < lo) or (hi is not None and observed > hi):
                return f"it accepts {self.accept}, and {observed:g} is beyond that"
        return None

    def describe(self) -> str:
        return f"{self.check} on {self.select}"

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Waivers(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Waivers"]
    metadata: Metadata
    waivers: list[Waiver] = Field(default_factory=list)


def _once_each(doc: Waivers) -> list[Problem]:
    seen: dict[tuple[str, str], int] = {}
    problems: list[Problem] = []
    for i, w in enumerate(doc.waivers):
        first = seen.setdefault((w.check, str(w.select)), i)
        if first != i:
            problems.append((("waivers", i), f"waives {w.describe()} again (see waivers[{first}]); keep one"))
    return problems


def _approved(approvers: list[str] | None) -> Callable[[Waivers], list[Problem]]:
    """Each waiver approved by people the spec names (`acceptance.approvers`), when it names any."""

    def check(doc: Waivers) -> list[Problem]:
        problems = _once_each(doc)
        if approvers is None:
            return problems
        known = {a.strip() for a in approvers}
        for i, w in enumerate(doc.waivers):
            strangers = [a for a in w.approvers() if a not in known]
            if strangers:
                problems.append(
                    (
                        ("waivers", i, "approvedBy"),
                        f"{', '.join(strangers)} is not among the spec's approvers (acceptance.approvers: "
                        f"{', '.join(sorted(known))}): have one of them approve it, or add the approver to the spec",
                    )
                )
        return problems

    return check


def load_waivers(path: Path, approvers: list[str] | None = None) -> Waivers:
    """Read and validate a Waivers document (approved by people among `approvers`, the spec's
    `acceptance.approvers`, when it names them); ConfigError naming file, key path and line."""
    return load_document(path, Waivers, check=_approved(approvers))


def waiver_id(index: int) -> str:
    return f"waivers[{index}]"


class WaiverBook:
    """A run's waivers, judged at the run's time."""

    def __init__(self, doc: Waivers, at: datetime) -> None:
        self.doc = doc
        self.at = at
        self.by_id = {waiver_id(i): w for i, w in enumerate(doc.waivers)}

    @property
    def ids(self) -> list[str]:
        return list(self.by_id)

    def matching(self, finding: Finding, serial_of: SerialOf) -> Iterator[tuple[str, Waiver]]:
        return ((wid, w) for wid, w in self.by_id.items() if w.selects(finding, serial_of))

    def waive(self, finding: Finding, serial_of: SerialOf) -> Finding:
        """The finding `waived` when a waiver in force covers its failure; otherwise the finding as it was, with
        each waiver that selects it and why that one does not cover it (an expired waiver, a limit not met)."""
        if finding.status is not CheckStatus.FAIL:
            return finding
        notes = []
        for wid, w in self.matching(finding, serial_of):
            why = w.why_not(finding, self.at)
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


def serial_of(ev: Evaluation) -> SerialOf:
    """The board serial of a GPU slot as the run measured it (None when not measured or not reported)."""

    def of(node: str, gpu: int) -> str | None:
        e = ev.usable(node)
        g = e.gpu(gpu) if e is not None and e.collected else None
        return g.serial if g is not None else None

    return of


def candidates_of(wid: str, ev: Evaluation) -> list[tuple[CheckKey, Finding]]:
    """The checks of the run a waiver's check and selector name, each with its decision. A straggler finding is
    the decision of its metric's check (one test: below the baseline, else behind the peers)."""
    book = ev.waiver_book
    assert book is not None
    w = book.by_id[wid]
    metric = w.check.removeprefix("straggler.")
    s = w.select
    keys = []
    for key in sorted(ev.plan.required, key=CheckKey.sort_key):
        if key.check not in (w.check, metric) or key.node is None:
            continue
        if s.serial is not None:
            if key.gpu is None or serial_of(ev)(key.node, key.gpu) != s.serial:
                continue
        elif key.node != s.node or (s.gpu is not None and key.gpu != s.gpu):
            continue
        keys.append(key)
    return [(k, ev.decide(k)) for k in keys]


def run_time(ev: Evaluation) -> datetime:
    """The time a run's waivers are judged at: its newest measurement (evidence, and the identities a re-test read
    from carried nodes), so the same evidence re-evaluated is judged the same; a run that measured nothing: the time
    its folder was made (its id)."""
    stamps = [e.finished for n in ev.inventory.names if (e := ev.usable(n)) is not None]
    stamps += [read_evidence(p).finished for p in ev.folder.identity_files()]
    times = []
    for stamp in stamps:
        try:
            times.append(datetime.fromisoformat(stamp).astimezone(UTC))
        except ValueError:
            continue
    if times:
        return max(times)
    return run_id_time(ev.folder.id) or datetime.now(UTC)


def book_for(ev: Evaluation) -> WaiverBook | None:
    """`Evaluation.waiver_book`: the run's waivers (inputs/waivers.yaml) judged at the run's time; None for a run
    prepared without waivers."""
    path = ev.folder.waivers_copy
    if not path.exists():
        return None
    return WaiverBook(load_waivers(path, ev.spec.acceptance.approvers), run_time(ev))


def decide_waiver(check: str, wid: str, ev: Evaluation) -> Finding:
    """`waiver.expired` or `waiver.unmatched` of one waiver of the run."""
    book = ev.waiver_book
    if book is None or wid not in book.by_id:
        return Finding(check, CheckStatus.ERROR, None, None, f"{wid}: no such waiver in this run's inputs")
    if check == EXPIRED:
        found = book.expired(wid)
    else:
        recert = ev.recertification
        suite = family_of(book.by_id[wid].check).suite
        outside = None
        if suite not in ev.plan.suites:
            outside = f"about {suite} checks, which this run ({', '.join(ev.plan.suites)}) does not judge"
        elif recert is not None:
            outside = f"outside this recertification of {recert['node']}"
        found = book.unmatched(wid, candidates_of(wid, ev), outside)
    return dataclasses.replace(found, waiver=wid)
