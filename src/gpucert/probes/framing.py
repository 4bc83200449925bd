"""The frame around an evidence document in a pod log: its length and sha256, so a cut log is detected."""

from __future__ import annotations

import hashlib
import re

__all__ = ["BEGIN", "END", "FramingError", "frame", "unframe"]

BEGIN = "gpucert-evidence-begin"
END = "gpucert-evidence-end"
_HEADER = re.compile(rf"^{BEGIN} bytes=(\d+) sha256=([0-9a-f]{{64}})$", re.MULTILINE)


class FramingError(ValueError):
    pass


def frame(document: str) -> str:
    body = document.encode()
    return f"{BEGIN} bytes={len(body)} sha256={hashlib.sha256(body).hexdigest()}\n{document}\n{END}\n"


def unframe(log: str) -> str:
    """The framed document in `log` (other lines may surround it); FramingError says what is wrong."""
    m = _HEADER.search(log)
    if m is None:
        raise FramingError("no evidence frame in the log (the probe did not finish writing its document)")
    size, digest = int(m.group(1)), m.group(2)
    body = log[m.end() + 1 :].encode()[:size]
    if len(body) < size:
        raise FramingError(f"the log is truncated: {len(body)} of {size} evidence bytes arrived")
    if hashlib.sha256(body).hexdigest() != digest:
        raise FramingError("the evidence does not match its sha256: the log was altered or cut")
    if not log[m.end() + 1 :].encode()[size:].lstrip(b"\n").startswith(END.encode()):
        raise FramingError("the evidence frame has no end marker: the log is truncated")
    return body.decode()
