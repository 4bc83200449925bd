"""Waivers (`kind: Waivers`): the document of deviations the buyer and the vendor agreed to accept.

Each waiver names a check, a selector (a node, one of its GPUs, a GPU's serial: a serial follows the board, or
for the fabric's per-rail checks one rail of a node),
what is accepted (`as-is`, or a limit the observed value must still meet), a reason, who approved it and an expiry
date. How a run applies them (which failure a waiver covers, its own checks `waiver.expired` and
`waiver.unmatched`) is evaluate/rules/waivers.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from gpucert.plan.checks import PREREQUISITE_CHECKS, Family, Finding, family_of
from gpucert.plan.fabric_checks import NODE_RAIL_CHECKS
from gpucert.spec.cluster import Metadata
from gpucert.spec.documents import Document, Problem, load_document
from gpucert.spec.names import NameError_, check_node_name

__all__ = ["Limit", "Selector", "SerialOf", "Waiver", "Waivers", "load_waivers", "waiver_id"]

# the board serial of a GPU slot (node, index) as a run measured it; None when not measured or not reported
SerialOf = Callable[[str, int], str | None]


class Selector(Document):
    """Where a waiver applies: a node (every GPU of it), one GPU of a node, the GPU with a serial, or one rail of
    a node (the fabric's per-rail checks: `fabric.port`, `fabric.counters`, `fabric.affinity`, `fabric.rdma_bw`)."""

    node: str | None = None
    gpu: Annotated[int, Field(ge=0)] | None = None
    serial: Annotated[str, Field(min_length=1)] | None = None
    rail: Annotated[int, Field(ge=0)] | None = None

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
            raise ValueError(
                "select one of `node` (with `gpu` for one GPU, or `rail` for one rail: select {node: X, rail: N}) "
                "or `serial` (the GPU's board serial)"
            )
        if self.gpu is not None and self.node is None:
            raise ValueError("`gpu` needs the `node` it is on; a serial names the board wherever it is")
        if self.rail is not None and (self.node is None or self.gpu is not None):
            raise ValueError("`rail` selects one rail of a `node` (select {node: X, rail: N}), never with a GPU")
        return self

    def __str__(self) -> str:
        if self.serial is not None:
            return f"serial {self.serial}"
        if self.rail is not None:
            return f"{self.node}/rail{self.rail}"
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
    # `as-is` or a limit, told apart by their form, so a limit's error is said at its own key (accept.min)
    accept: Annotated[
        Annotated[Literal["as-is"], Tag("as-is")] | Annotated[Limit, Tag("limit")],
        Discriminator(lambda v: "limit" if isinstance(v, dict | Limit) else "as-is"),
    ]
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
        if isinstance(v, dict | Limit):
            return v
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

    @model_validator(mode="after")
    def _rail_of_a_rail_check(self) -> Waiver:
        if self.select.rail is not None and self.check not in NODE_RAIL_CHECKS:
            raise ValueError(
                f"select.rail: {self.check} is not judged per rail; a rail is selected for "
                f"{', '.join(NODE_RAIL_CHECKS)} (remove `rail`, or waive one of those)"
            )
        return self

    def in_force(self, at: datetime) -> bool:
        """In force through the whole of its expiry date (UTC)."""
        return at.astimezone(UTC).date() <= self.expires

    def selects(self, finding: Finding, serial_of: SerialOf, rail: int | None = None) -> bool:
        """Whether the finding (of `rail`, for a per-rail fabric check) is of this waiver's check and where its
        selector points. A rail selector never covers a finding whose rail is not known."""
        if finding.check != self.check or finding.node is None:
            return False
        s = self.select
        if s.rail is not None and rail != s.rail:
            return False
        if s.serial is not None:
            return finding.gpu is not None and serial_of(finding.node, finding.gpu) == s.serial
        return finding.node == s.node and (s.gpu is None or s.gpu == finding.gpu)

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
