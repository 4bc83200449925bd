"""The static gate's tables, kept as data with their sources (stack/data/*.yaml) so they update without code: the
GPU Operator's component matrix per release, the oldest driver of each GPU product, and known-bad versions and
combinations. Pure but for reading those files; each is validated like a user's document (file, key, line).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gpucert.spec.documents import Document, Problem, load_document
from gpucert.spec.versions import checked_version, normalize, parse_version
from gpucert.stack.components import DEFAULT_SOURCES, version_from_image

__all__ = [
    "DATA",
    "DriverSupport",
    "KnownBad",
    "KnownBadEntry",
    "OperatorReleases",
    "Release",
    "Tables",
    "canonical",
    "in_range",
    "load_tables",
]

DATA = Path(__file__).resolve().parent / "data"
Source = Annotated[str, Field(min_length=10)]
_RANGE = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")


def _range(spec: str) -> str:
    for part in spec.split(","):
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"{part.strip()!r} is not a comparison (write <, <=, >, >=, == or != and a version)")
        checked_version(m.group(2))
    return spec


def canonical(version: str) -> str:
    """A version as gpucert compares it: what an image tag of it reads as (`v1.17.8-ubuntu20.04` and `1.17.8` are
    one; DCGM's package revision `3.3.7-1` is 3.3.7, as its image tag reads)."""
    return version_from_image(f"image:{version}") or normalize(version)


def _key(v: str) -> tuple[int, ...]:
    return parse_version(v) + (0,) * 4


def in_range(version: str, spec: str) -> bool:
    """Whether `version` is in the range `spec` (comparisons joined by commas, e.g. ">=1.17.4,<1.17.5")."""
    have = _key(version)
    ops = {"<": have.__lt__, "<=": have.__le__, ">": have.__gt__, ">=": have.__ge__, "==": have.__eq__}
    for part in spec.split(","):
        m = _RANGE.match(part)
        assert m is not None  # validated on load
        want = _key(m.group(2))
        ok = have != want if m.group(1) == "!=" else ops[m.group(1)](want)
        if not ok:
            return False
    return True


class Release(Document):
    release: str
    source: Source
    # per component, the versions the release ships; the first of each list is the release's default
    components: dict[str, Annotated[list[str], Field(min_length=1)]]

    @field_validator("release")
    @classmethod
    def _release(cls, v: str) -> str:
        return normalize(checked_version(v))

    @field_validator("components")
    @classmethod
    def _versions(cls, components: dict[str, list[str]]) -> dict[str, list[str]]:
        return {c: [canonical(checked_version(v)) for v in vs] for c, vs in components.items()}


class OperatorReleases(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["OperatorReleases"]
    releases: list[Release]

    def release(self, version: str) -> Release | None:
        return next((r for r in self.releases if r.release == normalize(version)), None)


class ProductSupport(Document):
    product: str
    minimum_driver: str = Field(alias="minimumDriver")
    source: Source

    _v = field_validator("minimum_driver")(checked_version)


class DriverSupport(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["DriverSupport"]
    products: list[ProductSupport]

    def minimum(self, product: str) -> ProductSupport | None:
        return next((p for p in self.products if p.product == product), None)


class KnownBadEntry(Document):
    id: Annotated[str, Field(min_length=1)]
    components: dict[str, str] = Field(default_factory=dict)  # component -> version range; all must match
    same_version: list[str] = Field(default_factory=list, alias="sameVersion")
    since: str | None = None
    reason: Source
    source: Source

    @field_validator("components")
    @classmethod
    def _ranges(cls, components: dict[str, str]) -> dict[str, str]:
        return {c: _range(r) for c, r in components.items()}

    @model_validator(mode="after")
    def _one_kind(self) -> KnownBadEntry:
        if bool(self.components) == bool(self.same_version):
            raise ValueError("give either `components` (version ranges) or `sameVersion` (components), not both")
        if self.same_version and len(self.same_version) < 2:
            raise ValueError("`sameVersion` names at least two components")
        if self.since is not None:
            checked_version(self.since)
        return self


class KnownBad(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["KnownBad"]
    entries: list[KnownBadEntry]


def _known_components(names: dict[tuple[str | int, ...], list[str]]) -> list[Problem]:
    known = ", ".join(DEFAULT_SOURCES)
    return [
        ((*key, c), f"{c!r} is not a component gpucert knows; components: {known}")
        for key, cs in names.items()
        for c in cs
        if c not in DEFAULT_SOURCES
    ]


def _check_releases(doc: OperatorReleases) -> list[Problem]:
    return _known_components({("releases", i, "components"): list(r.components) for i, r in enumerate(doc.releases)})


def _check_known_bad(doc: KnownBad) -> list[Problem]:
    return _known_components(
        {("entries", i, "components"): [*e.components, *e.same_version] for i, e in enumerate(doc.entries)}
    )


class Tables:
    """The three tables, as read from a data folder."""

    def __init__(self, folder: Path = DATA) -> None:
        self.folder = folder
        self.releases = load_document(folder / "operator-releases.yaml", OperatorReleases, check=_check_releases)
        self.drivers = load_document(folder / "driver-support.yaml", DriverSupport)
        self.known_bad = load_document(folder / "known-bad.yaml", KnownBad, check=_check_known_bad)

    def file(self, name: str) -> str:
        return str(self.folder / name)


@functools.cache
def load_tables(folder: Path = DATA) -> Tables:
    return Tables(folder)
