"""The typed verdict (`gpucert.io/verdict/v3`, read back from v2 too): what `build_verdict` returns, what every
report, acceptance and fleet reader takes, and the one place verdict.json is parsed.

Frozen pydantic models, not dataclasses: verdict.json is read back from disk (a buyer's copy, a signed run, a
hostile edit), and pydantic gives each bad value its key path for the one-line error, while its aliases keep the
JSON's camelCase names and its field order keeps the file byte-for-byte what the dict writer wrote before (the base,
`Part`, and the error's wording are plan/records.py's, shared with run.json and the re-test and recertify records).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, Strict

from gpucert.plan.records import Bool, Carried, Int, Part, Str, parse_record

if TYPE_CHECKING:
    from gpucert.plan.runfolder import RunFolder

__all__ = [
    "AgainstSku",
    "Carried",
    "Coverage",
    "FindingWaiver",
    "Group",
    "NodeSummary",
    "NotRequired",
    "PoolSummary",
    "RecertifySummary",
    "RetestSummary",
    "SkipCause",
    "Summary",
    "Undecided",
    "Verdict",
    "VerdictFinding",
    "parse_verdict",
    "read_verdict",
]

Number = Annotated[int, Strict()] | Annotated[float, Strict()]  # as written: 3350 stays 3350, 3350.0 stays 3350.0
Figure = Bool | Int | Annotated[float, Strict()] | Str | None  # a finding's observed, expected, limit
Result = Literal["pass", "fail", "incomplete"]
NodeResult = Literal["pass", "waived", "fail", "incomplete"]


class SkipCause(Part):
    cause: Str
    checks: Int


class NotRequired(Part):
    check: Str
    why: Str


class Coverage(Part):
    """Which of the checks the plan requires ran, and why the others did not."""

    suites: tuple[Str, ...] = ()
    required: Int
    ran: Int
    deselected: Int = 0
    not_reached: Int = 0
    skipped_without_cause: Int = 0
    complete: Bool
    stopped: Str | None = None
    missing: tuple[Str, ...] = ()
    skips: tuple[SkipCause, ...] = ()
    not_required: tuple[NotRequired, ...] = ()


class Summary(Part):
    """The run's counts: every check it decided, by status."""

    nodes: Int
    gpus: Int
    checks: Int
    passed: Int
    failed: Int
    errors: Int
    skipped: Int
    waived: Int = 0


class FindingWaiver(Part):
    """The waiver a waived finding names, with its terms as the run's waivers file states them (absent keys: the
    file did not state the waiver)."""

    OMITTED_WHEN_NONE = frozenset({"check", "select", "accept", "reason", "approved_by", "expires"})
    id: Str
    check: Str | None = None
    select: dict[str, Any] | None = None
    accept: Str | dict[str, Any] | None = None
    reason: Str | None = None
    approved_by: Str | None = None
    expires: Str | None = None


class VerdictFinding(Part):
    """A check that did not pass (failed, errored, or waived with its waiver)."""

    OMITTED_WHEN_NONE = frozenset({"waiver"})
    check: Str
    node: Str | None = None
    gpu: Int | None = None
    status: Literal["fail", "error", "waived", "skip", "pass"]
    observed: Figure = None
    expected: Figure = None
    limit: Figure = None
    unit: Str | None = None
    message: Str = ""
    cause: Str | None = None
    waiver: FindingWaiver | None = None

    @property
    def where(self) -> str:
        """`gpu-node-2/gpu3`, `gpu-node-2`, or `fleet` for a check of the whole fleet."""
        return (self.node or "fleet") + ("" if self.gpu is None else f"/gpu{self.gpu}")


class Group(Part):
    """The fleet's own checks, or one node's: counts, result, and the checks that failed or were waived."""

    result: NodeResult
    passed: Int
    failed: Int
    errors: Int
    skipped: Int
    waived: Int = 0
    failing: tuple[Str, ...] = ()
    waived_checks: tuple[Str, ...] = ()

    @property
    def passed_result(self) -> bool:
        """A pass: `pass`, or `waived` (passed with a failure a waiver accepts)."""
        return self.result in ("pass", "waived")

    @property
    def v3_result(self) -> NodeResult:
        """The result in v3's words: a v2 verdict said `pass` for a node that passed by its waiver."""
        return "waived" if self.result == "pass" and self.waived_checks else self.result


class NodeSummary(Group):
    """A node's group, with when it was measured, where its evidence was carried from (a re-test), and its pool."""

    measured: Str | None = None
    carried_from: Carried | None = None
    pool: Str | None = None

    def pool_or(self, default: str) -> str | None:
        """The node's pool; `default` for a verdict from before pools (it had one), None for a node in no pool."""
        return self.pool if "pool" in self.model_fields_set else default

    @property
    def origin(self) -> str:
        """Where the node's evidence comes from: measured in this run, or carried over by a re-test."""
        if self.carried_from is not None:
            return f"carried from {self.carried_from.run}"
        return "measured" if self.measured else "not measured"


class PoolSummary(Part):
    """A pool's expectations, and its result over its nodes."""

    nodes: Int | None = None
    gpus_per_node: Int | None = None
    product: Str | None = None
    baseline: Str | None = None
    node_selector: dict[str, Str] = Field(default_factory=dict)
    found: Int = 0
    result: Result
    results: dict[str, Int] = Field(default_factory=dict)
    failing: tuple[Str, ...] = ()


class RetestSummary(Part):
    """A re-test: the run it re-tests, the nodes measured now (and why) and those carried over."""

    source: Str
    source_certificate: Str | None = None
    measured: tuple[Str, ...] = ()
    carried: tuple[Str, ...] = ()
    why: dict[str, Str] = Field(default_factory=dict)
    # the source run's nodes the re-test's fleet no longer has (additive to v3; absent when none is gone): a re-test
    # of fewer nodes can pass, and must say which of the certified ones it no longer speaks for
    absent: tuple[Str, ...] | None = None

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"absent"})


class AgainstSku(Part):
    """A pool's median of a metric against its SKU's figure: informational, never a check's outcome."""

    metric: Str
    pool: Str
    median: Number
    expected: Number
    deviation: Number
    unit: Str
    count: Int
    behind: Bool
    informational: Bool = True
    message: Str


class Undecided(Part):
    """A peer comparison too few peers left undecided: never a silent pass."""

    comparison: Str
    where: tuple[Str, ...]
    why: Str
    metrics: tuple[Str, ...]


class RecertifySummary(Part):
    node: Str
    handover: dict[str, Any] | None = None
    fleet_peers: Int = 0
    summary: Str = ""


class Verdict(Part):
    """verdict.json: the run's result, coverage, counts, findings, and each node's and pool's result."""

    OMITTED_WHEN_NONE = frozenset({"kind", "fleet", "retest", "preflight", "recertify"})
    schema_: Literal["gpucert.io/verdict/v2", "gpucert.io/verdict/v3"] = Field(alias="schema")
    run: Str
    kind: Str | None = None  # absent in v2: a certification
    spec: Str
    target: Str
    result: Result
    coverage: Coverage
    summary: Summary
    findings: tuple[VerdictFinding, ...] = ()
    fleet: Group | None = None
    nodes: dict[str, NodeSummary] = Field(default_factory=dict)
    pools: dict[str, PoolSummary] = Field(default_factory=dict)
    retest: RetestSummary | None = None
    fleet_against_sku: tuple[AgainstSku, ...] = ()
    undecided: tuple[Undecided, ...] = ()
    preflight: dict[str, Any] | None = None
    recertify: RecertifySummary | None = None

    @property
    def what(self) -> str:
        """The run's kind (`KINDS`); a v2 verdict, which has none, is a certification."""
        return self.kind or "certify"

    @property
    def passed(self) -> bool:
        return self.result == "pass"

    def failures(self) -> list[VerdictFinding]:
        """The findings that failed or errored (not the waived ones)."""
        return [f for f in self.findings if f.status in ("fail", "error")]

    def waived(self) -> list[VerdictFinding]:
        return [f for f in self.findings if f.status == "waived"]


def parse_verdict(data: Mapping[str, Any] | Any, path: Path | str) -> Verdict:
    """The verdict a document holds, or an EvidenceError naming the file, the first bad key and what is wrong."""
    return parse_record(Verdict, data, path, "a verdict")


def read_verdict(folder: RunFolder) -> Verdict:
    """The run folder's verdict.json, typed; an EvidenceError naming the file (and the key) when it is not one."""
    return parse_verdict(folder.read_verdict(), folder.verdict_path)
