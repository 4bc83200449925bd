"""The typed records gpucert writes into a run folder for itself: run.json (`RunInfo`), a re-test's
retest/record.json (`RetestRecord`) and a recertification's recertify.json (`RecertifyRecord`); and `Part`, the
base of these and of the verdict's models (report/verdict_model.py), with the one translation of a bad record into
an error naming the file and the key.

Frozen pydantic models: the records are read back from disk (a signed run, a copied folder, a hostile edit) and
pydantic gives each bad value its key path; aliases keep the JSON's names and field order keeps the file as the dict
writers wrote it. Only scalars are strict (a count written as "3" or `true` is refused); JSON arrays become tuples.
Keys a later additive version writes are ignored on reading; keys an older one did not write take their default.
No I/O of their own (RunFolder reads and writes the files).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_serializer
from pydantic.alias_generators import to_camel
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from gpucert.errors import EvidenceError

__all__ = [
    "RECERTIFY_SCHEMA",
    "RETEST_SCHEMA",
    "Bool",
    "Carried",
    "Int",
    "Part",
    "RecertifyRecord",
    "RetestRecord",
    "RetestSource",
    "RunInfo",
    "Str",
    "parse_record",
    "read_recertify_record",
    "read_retest_record",
    "read_run_info",
]

RETEST_SCHEMA = "gpucert.io/retest/v1"
RECERTIFY_SCHEMA = "gpucert.io/recertify/v1"

Int = Annotated[int, Strict()]
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
P = TypeVar("P", bound="Part")


class Part(BaseModel):
    """A record or a part of one: frozen, camelCase on disk; the fields in `OMITTED_WHEN_NONE` are absent, not
    null, when they are None (the dict writers added those keys only when they had them)."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, alias_generator=to_camel, allow_inf_nan=False
    )
    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in self.OMITTED_WHEN_NONE:
            if getattr(self, name) is None:
                field = type(self).model_fields[name]
                out.pop(field.alias or name, None)
                out.pop(name, None)
        return out

    def to_json(self) -> dict[str, Any]:
        """As the file holds it (key order included)."""
        return self.model_dump(mode="json", by_alias=True)


def _key(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a key path of the document: `nodes.gpu-node-1.passed`, `findings[3].gpu`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part[:1].isupper() and "[" not in part:  # a union member's type name is no key of the file
            out += f".{part}" if out else part
    return out


def parse_record(model: type[P], data: Mapping[str, Any] | Any, path: Path | str, what: str) -> P:
    """The record `data` holds, or an EvidenceError naming the file, the first bad key and what is wrong."""
    if not isinstance(data, Mapping):
        raise EvidenceError(f"not {what}: expected a JSON object, got {type(data).__name__}", path=path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = _key(err["loc"]) or "(top level)"
        said = "is missing" if err["type"] == "missing" else f"{err['msg'].lower()} (got {repr(err.get('input'))[:60]})"
        raise EvidenceError(f"{key} {said}: not {what} gpucert writes", path=path) from None
    except RecursionError:
        raise EvidenceError(f"nested too deeply to be {what} gpucert writes", path=path) from None


class RunInfo(Part):
    """run.json: what the run is (its mode decides the suites that judge it), of which spec, whether it was
    prepared with waivers, and when it ran with which gpucert: its version, its checkout's commit and the digest of its
    code (resources.code_digest; absent in runs before it). `target` and `finished` come with the evaluation."""

    OMITTED_WHEN_NONE = frozenset({"target", "finished", "gpucert_code"})
    run: Str | None = None
    spec: Str | None = None
    mode: Str | None = None
    reevaluates: Str | None = None
    waivers: Bool = False
    started: Str | None = None
    gpucert_version: Str | None = Field(None, alias="gpucert_version")
    git_commit: Str | None = Field(None, alias="git_commit")
    gpucert_code: Str | None = Field(None, alias="gpucert_code")
    target: Str | None = None
    finished: Str | None = None


class RecordFolder(Protocol):
    """What the readers below need of a run folder (RunFolder is one; named structurally, so that the run folder
    can read its own records typed without an import circle)."""

    @property
    def run_info_path(self) -> Path: ...

    @property
    def recertify_path(self) -> Path: ...

    @property
    def retest_record_path(self) -> Path: ...

    def read_run_info(self) -> dict[str, Any]: ...

    def read_recertify(self) -> dict[str, Any] | None: ...

    def read_retest(self) -> dict[str, Any] | None: ...


def read_run_info(folder: RecordFolder) -> RunInfo:
    """The folder's run.json, typed (every field unset where there is none yet); EvidenceError naming the file and
    the key when it is not one gpucert writes."""
    return parse_record(RunInfo, folder.read_run_info(), folder.run_info_path, "a run.json")


def read_recertify_record(folder: RecordFolder) -> RecertifyRecord | None:
    """The folder's recertify.json, typed; None for a run that is no recertification. EvidenceError naming the file
    and the key when it is not one gpucert writes."""
    raw = folder.read_recertify()
    return None if raw is None else parse_record(RecertifyRecord, raw, folder.recertify_path, "a recertify record")


class Carried(Part):
    """Where a re-test's carried node's evidence comes from: the run it was carried from (and first measured in),
    the file and its digest there, and when it was measured."""

    run: Str
    measured_in: Str
    file: Str
    sha256: Str
    measured: Str | None = None
    age_seconds: Int | None = None


class RetestSource(Part):
    run: Str
    certificate: Str | None = None
    result: Str | None = None
    signer: Str | None = None


class RetestRecord(Part):
    """retest/record.json: the run re-tested, each node measured again and why, each carried and from where, and
    the source's nodes the re-test's inventory no longer has."""

    schema_: Str = Field(RETEST_SCHEMA, alias="schema")
    source: RetestSource
    at: Str | None = None
    max_evidence_age: Str | None = None
    measured: dict[str, Str] = Field(default_factory=dict)
    carried: dict[str, Carried] = Field(default_factory=dict)
    absent: tuple[Str, ...] = ()


def read_retest_record(folder: RecordFolder) -> RetestRecord | None:
    """The folder's re-test record (retest/record.json), typed; None for a run that is no re-test. EvidenceError
    naming the file and the key when it is not one gpucert writes."""
    raw = folder.read_retest()
    return None if raw is None else parse_record(RetestRecord, raw, folder.retest_record_path, "a re-test record")


class RecertifyRecord(Part):
    """recertify.json as far as a reader needs it: the node recertified, its handover baseline (None: recertified
    without one), the fleet peers it was compared with (node -> the run their evidence comes from), and when it is
    done, its result. The command adds cordon, wait and mark steps as it goes (kept on disk, not read here)."""

    schema_: Str = Field(RECERTIFY_SCHEMA, alias="schema")
    node: Str
    holder: Str | None = None
    started: Str | None = None
    handover: dict[str, Any] | None = None
    fleet_peers: dict[str, Str] = Field(default_factory=dict)
    result: Str | None = None
    failing: tuple[Str, ...] = ()
    finished: Str | None = None
    marks: dict[str, Any] | None = None
