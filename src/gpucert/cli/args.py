"""Command-line values checked where argparse reads them: counts, seconds, shares and texts that say what is wrong
in one line (exit 2), so no NaN timeout, negative worker count or empty release reaches the code behind them."""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from gpucert.errors import ConfigError
from gpucert.spec.cluster import POOL_NAME, SPEC_NAME
from gpucert.spec.names import NameError_, check_node_name

_Action = TypeVar("_Action", bound=argparse.Action)

__all__ = [
    "PATH_ERRNOS",
    "Parser",
    "count",
    "existing_file",
    "existing_folder",
    "file_to_write",
    "folder_to_write",
    "handover_args",
    "node_name",
    "non_empty",
    "os_error",
    "output_file",
    "pool_name",
    "seconds",
    "share",
    "spec_name",
    "write_output",
]


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (usage goes to --help), as every other gpucert error is."""

    def _add_action(self, action: _Action) -> _Action:
        # every option that takes text takes some: an empty --reports or --operator-release is refused, not read as
        # "." or as "not given"
        if isinstance(action, argparse._StoreAction | argparse._AppendAction) and action.type is None:
            action.type = non_empty
        return super()._add_action(action)

    def error(self, message: str) -> NoReturn:
        if message.endswith("expected one argument"):  # argparse takes `--duration -1h` for two options
            message += " (a value that starts with '-' is written --option=VALUE)"
        sys.stderr.write(f"{self.prog}: error: {message}; see `{self.prog} --help`\n")
        raise SystemExit(2)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give a number, e.g. 600") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number: give a number, e.g. 600")
    return value


def count(minimum: int) -> Callable[[str], int]:
    """A whole number of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give {minimum} or more") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}: give {minimum} or more")
        return value

    return parse


def seconds(text: str) -> float:
    """A finite, non-negative number (of seconds or hours)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative; give 0 or more")
    return value


def share(text: str) -> float:
    """A fraction from 0 to 1."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share from 0 to 1: give a fraction, e.g. 0.25")
    return value


def existing_file(text: str) -> str:
    """A file to read: there, and a file (a folder or a path through a file is refused with the fix)."""
    path = _path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name the file")
    return text


def existing_folder(text: str) -> str:
    """A folder to read (a run folder, a folder of handover baselines): there, and a folder."""
    path = _path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder: name the folder")
    return text


def folder_to_write(text: str) -> str:
    """A folder gpucert writes into (made when missing): no file in its place or on the way to it."""
    path = _writable_path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file: name a folder (a new one is made)")
    return text


def file_to_write(text: str) -> str:
    """A file gpucert writes (made or replaced): no folder in its place, no file on the way to it."""
    path = _writable_path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name the file to write")
    return text


def _path(text: str) -> Path:
    """`text` as a path that is there; ArgumentTypeError saying why not and the fix."""
    path = Path(non_empty(text))
    try:
        path.stat()
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{text!r} does not exist: check the path") from None
    except NotADirectoryError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is under a file, not a folder: check the path") from None
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: {exc.strerror}; {_PATH_FIXES.get(exc.errno or 0)}") from None
    return path


def _writable_path(text: str) -> Path:
    """`text` as a path that can be made: no part of it too long for a file name, none under a regular file."""
    path = Path(non_empty(text))
    too_long = [part for part in path.parts if len(os.fsencode(part)) > 255]
    if too_long:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: {_PATH_FIXES[errno.ENAMETOOLONG]}")
    for above in path.absolute().parents:
        if above.exists():
            if not above.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{_shown(text)} is under a file ({above}): name a path under a folder"
                )
            break
    return path


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{text[:40]!r}...({len(text)} characters)"


# a spec's metadata.name and a pool's name as the spec takes them (spec/cluster.py Metadata, Pool)
_SPEC_NAME = re.compile(SPEC_NAME)
_POOL_NAME = re.compile(POOL_NAME)


def spec_name(text: str) -> str:
    """A spec's metadata.name: it names a folder of history and handover baselines, so nothing else is taken."""
    if not _SPEC_NAME.fullmatch(non_empty(text)):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a spec name: give the spec's metadata.name (lower-case letters, digits, '-' and "
            "'.', starting and ending with a letter or digit; no '/' or '..')"
        )
    return text


def pool_name(text: str) -> str:
    """A pool's name as the spec declares it."""
    if not _POOL_NAME.fullmatch(non_empty(text)) or len(text) > 63:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a pool name: give a pool's name from the spec (lower-case letters, digits and "
            "'-', at most 63 characters)"
        )
    return text


def node_name(text: str) -> str:
    """A Kubernetes node name (it names files: evidence/<node>.json, baselines/nodes/<spec>/<node>.yaml)."""
    try:
        return check_node_name(text)
    except NameError_ as exc:
        raise argparse.ArgumentTypeError(f"{exc}; give the node's name as `kubectl get nodes` shows it") from None


def non_empty(text: str) -> str:
    """A value that says something: not empty, not blank, no line break (it names a file, a release or a node)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a value or leave the option out")
    if "\n" in text or "\r" in text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a line break or NUL")
    return text


# what a path the user named can be refused for, and the fix for each
_PATH_FIXES = {
    errno.ENAMETOOLONG: "a file or folder name may have at most 255 bytes: shorten it",
    errno.ENOTDIR: "a part of the path is a file, not a folder: name a path under a folder",
    errno.ENOENT: "check the path",
    errno.EISDIR: "name a file, not a folder",
    errno.EEXIST: "a file is in the way: name another path",
    errno.EACCES: "choose a path you may read and write",
    errno.EPERM: "choose a path you may read and write",
    errno.EROFS: "choose a path on a writable file system",
    errno.ELOOP: "the path loops through symbolic links: name the real path",
    errno.ENXIO: "it is a FIFO no process reads: start its reader first, or name a regular file",
}
PATH_ERRNOS = frozenset(_PATH_FIXES)


def os_error(exc: OSError) -> str:
    """One line for an OSError no code path translated: the file, the system's reason and the fix."""
    name = str(exc.filename) if exc.filename is not None else "(no file)"
    if len(name) > 120:
        name = f"{name[:60]}...{name[-40:]} ({len(name)} characters)"
    fix = _PATH_FIXES.get(exc.errno or 0, "the run could not complete")
    return f"{name}: {exc.strerror or exc}; {fix}"


def output_file(path: Path, key: str) -> Path:
    """`path` if a file can be written there, checked before the run: an output that fails at the end would leave
    a run whose verdict reads PASS behind an error (exit 2), so it is refused first."""
    try:
        if path.is_dir():
            raise ConfigError("is a folder: name the file to write", path=path, key=key)
        parent = path.parent
        parent.mkdir(parents=True, exist_ok=True)
        if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise ConfigError("cannot be written: choose a path you may write", path=path, key=key)
    except OSError as exc:
        raise ConfigError(os_error(exc), key=key) from None
    return path


def write_output(path: Path, text: str) -> None:
    """Write `text` to `path`, which may be a FIFO (`/dev/stdout` piped on): one that no process reads is refused
    at once (ENXIO) instead of blocking forever. Not checked earlier: an open and close would end its reader."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o644)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def handover_args(p: argparse.ArgumentParser) -> None:
    """The options of the commands that hold a node to its handover baseline (`recertify`, `schedule`)."""
    p.add_argument(
        "--handover",
        type=existing_folder,
        default=None,
        help="folder of handover baselines (<spec>/<node>.yaml); default baselines/nodes",
    )
    p.add_argument(
        "--without-handover",
        action="store_true",
        help="a node with no handover baseline (added after handover) is held to the SKU baseline and its peers only; "
        "without this, a missing handover baseline is an error",
    )
    p.add_argument(
        "--key",
        action="append",
        type=existing_file,
        help="a public key the handover run may be signed with (repeatable)",
    )


SKIP_HELP = "kubernetes: go ahead without `gpucert preflight`'s checks first (the verdict records it)"


def run_args(sp: argparse.ArgumentParser, workers: bool = True) -> None:
    """The options of every command that creates a run folder: where, how quietly, and how many pytest workers."""
    sp.add_argument(
        "--reports", type=folder_to_write, default="reports", help="where the run folder is created (default ./reports)"
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="print less of pytest's progress")
    if workers:
        sp.add_argument("-n", dest="workers", type=count(0), default=None, help="pytest-xdist workers for evaluation")
