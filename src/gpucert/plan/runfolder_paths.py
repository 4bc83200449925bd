"""How a run folder names and fills a node's file: `<folder>/<node>.json` for a node name only, to read (each name
looked at: a symlink that leads out is refused) or to write anew (the folder resolved once), and a file carried in
from another run byte for byte (a hard link, else an atomic copy). RunFolder's helpers (plan/runfolder.py); touches
the file system only.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpucert.errors import EvidenceError
from gpucert.files import write_atomic
from gpucert.spec.names import NameError_, check_node_name, inside, resolved

__all__ = ["copy_file", "link_or_copy", "new_node_file", "node_file"]


def copy_file(source: Path, target: Path, *, durable: bool = True) -> None:
    """A file copied into the run folder byte for byte (a carried document's digest stays the one signed where it
    was measured), through the one atomic writer: a crash mid-copy leaves no torn copy."""
    write_atomic(target, source.read_bytes(), durable=durable)


def node_file(folder: Path, node: str, blame: Path | None = None) -> Path:
    """`<folder>/<node>.json`, for a node name only: EvidenceError naming `blame` (the folder) otherwise."""
    try:
        return inside(folder, f"{check_node_name(node)}.json")
    except NameError_ as exc:
        raise EvidenceError(str(exc), path=blame or folder) from None


def new_node_file(folder: Path, node: str, blame: Path | None = None) -> Path:
    """`<folder>/<node>.json` to write a new document to, for a node name only (EvidenceError naming `blame`
    otherwise): the folder resolved once (spec/names.resolved), the name itself not looked at. A node name is one
    plain file name, so the path is in the folder; and the writers (an atomic replace, a hard link) take the name
    over, never write through what it points at, so what stands under it (a symlink leading out) is replaced, not
    followed: `node_file`'s look at each name (an lstat a file) asks what cannot change the answer."""
    try:
        return resolved(folder) / f"{check_node_name(node)}.json"
    except NameError_ as exc:
        raise EvidenceError(str(exc), path=blame or folder) from None


def link_or_copy(source: Path, target: Path) -> None:
    """`source`'s bytes under the new name `target`: a hard link where the file system makes one (one operation,
    no bytes read or written: a carried document is a signed file that is never written again in place, every writer
    of a run folder replaces a name), else a copy (another file system, one without hard links, a name already
    there: `copy_file`, atomic, made durable by the caller's sync). A `source` that is itself a symlink is copied
    (its bytes read through it, as before hard links): os.link would link the symlink, not the file it leads to
    (CPython before 3.14 calls link(2) on Linux, which does not follow it: python/cpython gh-81793)."""
    if source.is_symlink():
        copy_file(source, target, durable=False)
        return
    for _ in range(2):
        try:
            os.link(source, target)
            return
        except FileNotFoundError:
            if target.parent.is_dir():
                break  # the source is missing: the copy says so
            target.parent.mkdir(parents=True, exist_ok=True)  # the first of a folder: made once, then linked
        except OSError:
            break
    copy_file(source, target, durable=False)
