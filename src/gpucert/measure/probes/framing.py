"""The frames around evidence in a pod log: each with its length and sha256, so a cut or altered log is caught.

The probe writes one *part* frame per probe as it finishes (`gpucert-evidence-part key=... bytes=N sha256=H`)
and, at the end, the *document* frame (`gpucert-evidence-begin bytes=N sha256=H`) holding the whole evidence.
Both end with a `gpucert-evidence-end` line, and every body is one line of JSON.

What counts, when other text may sit in the log (a library's output, or text someone put there on purpose):
- the document is the LAST document frame, and it must be the last frame of the log: an earlier one (forged or
  not) never wins, a frame after it makes the log unusable, and a last document frame that is cut or does not
  match its sha256 makes the log unusable even when an earlier complete one exists;
- for each part key, the last complete frame counts (parts are only read when no document arrived).
The log is read frame by frame: a complete frame's body is consumed whole (a header inside it is not a frame),
and a broken frame is skipped from its header line on, so a forged header that claims more bytes than follow
cannot swallow the real frames behind it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["BEGIN", "END", "PART", "FramingError", "frame", "parts", "unframe"]

BEGIN = "gpucert-evidence-begin"
PART = "gpucert-evidence-part"
END = "gpucert-evidence-end"
_HEADER = re.compile(
    rf"^(?:{BEGIN}|{PART} key=([a-z0-9][a-z0-9._/-]*)) bytes=(\d+) sha256=([0-9a-f]{{64}})$".encode(), re.MULTILINE
)
_TAIL = b"\n" + END.encode()
# what is left of a header cut mid-line (an end line left behind by a broken frame is not one)
_FRAGMENT = re.compile(rb"^gpucert-evidence-(?!end$)", re.MULTILINE)


class FramingError(ValueError):
    pass


def frame(document: str, key: str | None = None) -> str:
    """`document` framed: the node's evidence document, or (with `key`) the part of it one probe produced."""
    body = document.encode()
    head = BEGIN if key is None else f"{PART} key={key}"
    return f"{head} bytes={len(body)} sha256={hashlib.sha256(body).hexdigest()}\n{document}\n{END}\n"


@dataclass(frozen=True, slots=True)
class _Frame:
    key: str | None  # None: the document
    body: str | None  # None: broken
    problem: str = ""


def _scan(log: str) -> tuple[list[_Frame], bool]:
    """The frames of `log` in order, and whether a cut header follows the last of them."""
    data = log.encode()
    frames: list[_Frame] = []
    pos = 0
    while (m := _HEADER.search(data, pos)) is not None:
        key = m.group(1).decode() if m.group(1) else None
        size, digest = int(m.group(2)), m.group(3).decode()
        start = m.end() + 1
        body = data[start : start + size]
        problem = ""
        if len(body) < size:
            problem = f"the log is truncated: {len(body)} of {size} evidence bytes arrived"
        elif hashlib.sha256(body).hexdigest() != digest:
            problem = "the evidence does not match its sha256: the log was altered or cut"
        elif not data[start + size :].startswith(_TAIL):
            problem = "the evidence frame has no end marker: the log is truncated"
        if problem:
            frames.append(_Frame(key, None, problem))
            pos = m.end()  # resync on the next header line, inside what this frame claimed or after it
        else:
            frames.append(_Frame(key, body.decode()))
            pos = start + size + len(_TAIL)
    return frames, _FRAGMENT.search(data, pos) is not None


def unframe(log: str) -> str:
    """The evidence document of `log`: its last document frame, which must be complete and the log's last frame."""
    frames, cut = _scan(log)
    last = max((i for i, f in enumerate(frames) if f.key is None), default=None)
    if cut:  # the probe was stopped while writing a header: whatever came before it is not the last word
        raise FramingError("the log ends inside a frame header: the log is truncated")
    if last is None and frames:
        raise FramingError(f"the log is truncated: {len(frames)} parts arrived, the evidence document did not")
    if last is None:
        raise FramingError("no evidence frame in the log (the probe did not finish writing its document)")
    if frames[last].body is None:
        raise FramingError(frames[last].problem)
    if last != len(frames) - 1:
        raise FramingError("a frame follows the evidence document: the log was altered")
    return frames[last].body  # type: ignore[return-value]


def parts(log: str) -> dict[str, str]:
    """Each part key's last complete frame: what a probe that never wrote its document had finished."""
    out: dict[str, str] = {}
    for f in _scan(log)[0]:
        if f.key is not None and f.body is not None:
            out[f.key] = f.body
    return out
