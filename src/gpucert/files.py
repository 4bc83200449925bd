"""The one writer and the one JSON reader of the files gpucert writes (run folders, records, schedule rounds).

Writing is atomic: the content goes to a temporary file in the same folder, is flushed to the disk (fsync), and only
then takes the file's name (os.replace, atomic on POSIX within one file system), so a reader, an interrupt or a crash
finds the old file or the new one, never half of one. Reading translates every way a file can be unusable (missing,
a FIFO, unreadable, not JSON, not an object, not the model) into one EvidenceError line naming the file, the key or
line, and the fix. Imports nothing of gpucert but its errors.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpucert.errors import ConfigError, EvidenceError

__all__ = [
    "make_folder",
    "parse_json",
    "process_alive",
    "read_bytes",
    "read_json",
    "read_json_object",
    "sync",
    "validate",
    "write_atomic",
    "write_json",
]

M = TypeVar("M", bound=BaseModel)
_WRITTEN_AGAIN = "write it again with gpucert, or pass a folder gpucert wrote"


def _temporary(path: Path) -> tuple[Path, int]:
    """A new file beside `path`, hidden, of a name no other writer holds (`.<name>.<random>.tmp`, within the 255
    bytes a file name may have), opened for writing with the mode a plain open would give it (the umask's)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")  # pragma: no cover - 2^32 names, 100 tries


def write_atomic(path: Path, content: str | bytes, *, durable: bool = True) -> Path:
    """Write `content` to `path` so that no reader, interrupt or crash ever finds half of it: the old file or the
    new one. The temporary file is removed if the write fails (a crash may leave it: it is hidden, named `.*.tmp`).

    `durable=False` leaves out the two fsyncs (the bytes, then the name in its folder), for one of a batch of files
    that `sync()` makes durable together once the batch is written: still never half a file to a reader or after an
    interrupt (Ctrl-C, a kill: what the rename published is in the system's cache and reaches the disk), but a crash
    of the machine before that `sync()` may lose the file or leave it empty. Only for what can be written again."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        tmp, fd = _temporary(path)
    except FileNotFoundError:  # its folder is not there yet: made once, not asked after on every write
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp, fd = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())  # the bytes are on the disk before the name points at them
        os.replace(tmp, path)
    except BaseException:  # once the replace ran, the temporary's name is the file's: nothing left to remove
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _sync_folder(path.parent)
    return path


def sync() -> None:
    """Everything written so far on the disk (os.sync, sync(2)): the one flush of a batch of files written with
    `write_atomic(..., durable=False)`, before the document that names them is written (durably)."""
    os.sync()


def make_folder(path: Path, *, not_a_folder: str, cannot: str, key: str | None = None) -> Path:
    """`path` as a folder the user named, made with its parents where missing; ConfigError naming it otherwise:
    `is not a folder: <not_a_folder>` where a file stands in the way, `<cannot>: <why>` where it cannot be made."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"is not a folder: {not_a_folder}", path=path, key=key) from None
    except OSError as exc:
        raise ConfigError(f"{cannot}: {exc.strerror or exc}", path=path, key=key) from None
    return path


def _sync_folder(folder: Path) -> None:
    """Make the new name itself durable (the rename lives in the folder); best effort where a folder cannot be
    opened (not POSIX)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json(path: Path, data: Any) -> Path:
    """`data` as indented JSON, written atomically."""
    return write_atomic(path, json.dumps(data, indent=1) + "\n")


def read_bytes(path: Path, *, missing: str = "pass a run folder written by gpucert") -> bytes:
    """The bytes of the document at `path`; EvidenceError naming the file and the fix (`missing` is the fix when
    there is no file). For a reader that knows a document by its bytes before parsing them (evidence.read_evidence)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read forever; a folder is no document
            raise EvidenceError(
                "is not a regular file (a folder, a FIFO or a device): not what gpucert wrote", path=path
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise EvidenceError(f"missing: {missing}", path=path) from None
    except OSError as exc:
        fix = "check its permissions" if exc.errno in (errno.EACCES, errno.EPERM) else _WRITTEN_AGAIN
        raise EvidenceError(f"cannot read ({exc.strerror or exc}): {fix}", path=path) from None


def parse_json(path: Path, data: bytes) -> Any:
    """`data`, read from `path`, as JSON; EvidenceError naming the file and the line where it is not JSON."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise EvidenceError(
            f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): cut off or corrupted; {_WRITTEN_AGAIN}",
            path=path,
        ) from None
    except UnicodeDecodeError as exc:
        raise EvidenceError(
            f"not JSON (no text at byte {exc.start}): cut off or corrupted; {_WRITTEN_AGAIN}", path=path
        ) from None
    except RecursionError:
        raise EvidenceError(f"not JSON gpucert wrote (nested too deeply); {_WRITTEN_AGAIN}", path=path) from None


def read_json(path: Path, *, missing: str = "pass a run folder written by gpucert") -> Any:
    """The JSON document at `path`; EvidenceError naming the file, the line where it is not JSON, and the fix
    (`missing` is the fix when there is no file)."""
    return parse_json(path, read_bytes(path, missing=missing))


def read_json_object(path: Path, *, missing: str = "pass a run folder written by gpucert") -> dict[str, Any]:
    """`read_json`, for a document that must be a JSON object."""
    data = read_json(path, missing=missing)
    if not isinstance(data, dict):
        raise EvidenceError(f"expected a JSON object, got {type(data).__name__}: {_WRITTEN_AGAIN}", path=path)
    return data


def validate(path: Path, data: Any, model: type[M], *, strict: bool = True) -> M:
    """`data` read from `path` as `model` (strict: JSON's `true` or "3" is never a number); EvidenceError naming the
    file and the key of the first problem.

    `data` is parsed JSON, or the document's bytes: those are validated in one pass (pydantic's JSON mode, parsed in
    Rust without a Python object for every value: half the cost of json.loads and validating what it gives, most of
    reading a fleet's evidence). Bytes it refuses are parsed and validated again in two steps, so a bad document is
    refused with the words and the key it always was (the JSON's line and column, the first problem's key), and a
    document only the two steps accept (JSON's other encodings) still reads. A document's keys are its fields'
    aliases, never their Python names, in both."""
    by_alias, by_name = None, None  # the model's own (parsed JSON of the callers that give it)
    if isinstance(data, bytes):
        by_alias, by_name = True, False
        try:
            return model.model_validate_json(data, strict=strict, by_alias=True, by_name=False)
        except (ValidationError, ValueError, RecursionError):
            data = parse_json(path, data)
    try:
        return model.model_validate(data, strict=strict, by_alias=by_alias, by_name=by_name)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(the document)"
        raise EvidenceError(f"{key}: {err['msg']}", path=path) from None
    except RecursionError:
        raise EvidenceError("nested too deeply to be a document gpucert wrote", path=path) from None


def process_alive(pid: int) -> bool:
    """Whether the process that wrote a lock file on this host still runs (a lock of a dead holder may be taken
    over). A process of another user answers EPERM: it runs."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
