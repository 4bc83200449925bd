"""Names that become file names: Kubernetes node names and SKU names, checked before they touch a path.

A node name from a fleet file, an inventory, an API answer or the command line ends up as `evidence/<node>.json`,
`baselines/nodes/<node>.yaml` or a lock file. Each is checked against what the name may be (a DNS-1123 subdomain
for a node), and every path built from one is resolved and refused if it leaves its folder. Pure but for
`Path.resolve`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

__all__ = ["NODE_NAME_MAX", "NameError_", "check_file_stem", "check_node_name", "inside", "resolved"]

# Kubernetes object names such as Nodes: a DNS-1123 subdomain (RFC 1123), at most 253 characters; matched whole
# (fullmatch: `$` alone also matches before a final newline, so "gpu-node-1\n" would pass)
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# a node's evidence is `<node>.json`, written through `.<node>.json.tmp`: a name past this would not fit the 255
# bytes a file name may have (real node names are far shorter; a DNS-1123 name may reach 253)
NODE_NAME_MAX = 240
_FILE_STEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# one path component: no separator, no NUL (os.fspath refuses it; resolve would too)
_PLAIN = re.compile(r"[^/\x00]+")


# node names found good, each checked once (bounded: a process checks a fleet's names, not an endless stream)
_GOOD_NODE_NAMES: set[str] = set()
_GOOD_NODE_NAMES_MAX = 65_536


class NameError_(ValueError):  # noqa: N801 - `NameError` is a builtin
    """A name that cannot be what it claims to be, or would leave its folder as a path."""


def check_node_name(name: str) -> str:
    """`name` if it is a Kubernetes node name (DNS-1123 subdomain); NameError_ saying why otherwise."""
    if isinstance(name, str) and name in _GOOD_NODE_NAMES:  # pure: a name found good once is good (asked ~6 times
        return name  # a node in a re-test)
    if not isinstance(name, str) or not name:
        raise NameError_("a node name must be a non-empty string")
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise NameError_(
            f"{name!r} is not a Kubernetes node name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters)"
        )
    if len(name) > NODE_NAME_MAX:
        raise NameError_(
            f"the node name {name[:40]}... has {len(name)} characters: gpucert writes a file per node and takes node "
            f"names up to {NODE_NAME_MAX} characters"
        )
    if len(_GOOD_NODE_NAMES) < _GOOD_NODE_NAMES_MAX:
        _GOOD_NODE_NAMES.add(name)
    return name


def check_file_stem(name: str, what: str = "name") -> str:
    """`name` if it can be a file name of its own (letters, digits, '.', '_', '-'; no separators, not '..')."""
    if not isinstance(name, str) or not _FILE_STEM.fullmatch(name) or name in (".", ".."):
        raise NameError_(
            f"{name!r} is not a valid {what}: use letters, digits, '.', '_' and '-' only (no '/' and no '..')"
        )
    return name


@lru_cache(maxsize=64)
def _resolved_root(root: Path) -> Path:
    """An absolute folder, resolved once per process: what it resolves to is never what `inside` refuses (a root
    that is itself a symlink is followed today as before), only a part below it that leads outside."""
    return root.resolve()


def resolved(root: Path) -> Path:
    """`root` resolved, once per process for the same folder: a relative one as the absolute folder it names from
    the working folder now (what `Path.resolve` resolves it from), so a run folder named relative to where gpucert
    was started is not resolved again for each file in it (4,094 times in a re-test of 1,024 nodes)."""
    return _resolved_root(root if root.is_absolute() else Path.cwd() / root)


def inside(root: Path, *parts: str) -> Path:
    """`root / parts...`, resolved, refused (NameError_) when it would lead outside `root`.

    One plain file name (no separator, not '.' or '..') that is no symlink is `root/name` as it stands: resolving it
    could lead nowhere else (a re-test asks ~6 times a node: 1 s of 12 at 1,024 nodes resolved every time)."""
    try:
        base = resolved(root)
        if len(parts) == 1 and _PLAIN.fullmatch(parts[0]) and parts[0] not in (".", ".."):
            path = base / parts[0]
            if not path.is_symlink():
                return path
        path = base.joinpath(*parts).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop: RuntimeError before Python 3.13, OSError since
        raise NameError_(f"{'/'.join(parts)!r} under {root} cannot be resolved: {exc}") from None
    if path != base and not path.is_relative_to(base):
        raise NameError_(f"{'/'.join(parts)!r} leads outside {root}")
    return path
