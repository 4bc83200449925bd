"""Version strings as the GPU stack writes them: `570.124.06`, `v1.31.4`, `4.1.1-4.0.4`, `containerd://1.7.24`."""

from __future__ import annotations

import re

__all__ = ["VersionError", "at_least", "checked_version", "normalize", "parse_version"]

_NUMERIC = re.compile(r"^v?(\d+(?:\.\d+)*)")


class VersionError(ValueError):
    pass


def normalize(version: str) -> str:
    """The version without a runtime scheme (`containerd://`) or a leading `v`."""
    v = version.strip()
    if "://" in v:
        v = v.split("://", 1)[1]
    return v[1:] if v[:1] in "vV" and v[1:2].isdigit() else v


def parse_version(version: str) -> tuple[int, ...]:
    """The leading numeric release of `version` as a tuple (`v1.31.4-eks` -> (1, 31, 4))."""
    m = _NUMERIC.match(normalize(version))
    if not m:
        raise VersionError(f"{version!r} is not a version (expected digits and dots, like 570.124.06)")
    return tuple(int(p) for p in m.group(1).split("."))


def checked_version(version: str) -> str:
    """`version` as written, once it reads as one (VersionError, a ValueError, otherwise): a field validator."""
    parse_version(version)
    return version


def at_least(version: str, minimum: str) -> bool:
    """True when `version` >= `minimum`, comparing as many fields as `minimum` gives."""
    have, want = parse_version(version), parse_version(minimum)
    return have[: len(want)] + (0,) * max(0, len(want) - len(have)) >= want
