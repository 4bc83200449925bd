"""The evidence in a pod log, version 2: numbered, checksummed, compressed frames of bounded size.

The probe writes each *record* (one probe's part as it finishes, then the node's document last) as frame lines:

    gpucert-frame/2 rec=R key=K part=I/N sha256=H data=B64

R numbers the records of the log from 0, K is the part key (`document` for the node's evidence document), the
record's bytes are zlib-compressed and cut into N frames, H is the sha256 of frame I's compressed bytes and B64
those bytes in base64. Why these bounds:
- a frame line is at most LINE_MAX = 4,096 bytes with its newline: PIPE_BUF on Linux (pipe(7)), so each frame is
  one atomic write(2) to the container's stdout, and well under containerd's max_container_log_line_size (16 KiB
  by default: containerd v2 internal/cri/config/config_unix.go, DefaultRuntimeConfig, at 01cca8cc), so no
  runtime splits a frame into partial lines. The kubelet serves stdout and stderr in one stream and joins partial
  lines without a newline (kubernetes pkg/kubelet/kuberuntime/logs/logs.go at 04791b49, parseCRILog and
  ReadLogs), so a line a runtime split could have another stream's text inside it;
- a probe writes at most LOG_BUDGET = 8 MiB of frames (parts at most half of it, the document the rest), under the
  kubelet's containerLogMaxSize (10Mi by default, checked every containerLogMonitorInterval, 10 s: kubernetes
  pkg/kubelet/apis/config/v1beta1/defaults.go, SetDefaults_KubeletConfiguration, 1.30 and later) with room for what
  else the pod prints: a larger log is rotated and the kubelet serves only its current file (logs.go: "It will
  not retrieve logs in rotated log file"). Evidence that would pass the budget is not cut: an `overflow` record
  says so, and the document is refused with that reason.

The reader (`FrameReader`) takes the log in chunks as the API streams it and keeps only the frames' payloads and
the last lines of other output. Other whole lines (stderr, a library's output) may sit between frames. It refuses
(FramingError, naming the record, key and frame): a frame line that does not parse or is longer than LINE_MAX,
bytes before a frame on its line, a frame whose payload does not match its sha256, a frame twice with different
payloads, frames of one record that disagree on key or count, a count more than the read limit can hold, a
record or frame missing (a log rotated or cut), anything after the document, and a record that does not
decompress whole within MAX_RECORD_BYTES.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "DOCUMENT",
    "LINE_MAX",
    "LOG_BUDGET",
    "OVERFLOW",
    "READ_LIMIT",
    "VERSION",
    "FrameReader",
    "FramedLog",
    "Framer",
    "FramingError",
    "frame",
    "parts",
    "read_log",
    "unframe",
]

VERSION = 2
TAG = f"gpucert-frame/{VERSION}"
PREFIX = b"gpucert-frame/"
LEGACY = b"gpucert-evidence-"  # version 1: one frame per record, the whole body on one line
DOCUMENT = "document"
OVERFLOW = "overflow"
LINE_MAX = 4096
LOG_BUDGET = 8 << 20
READ_LIMIT = 16 << 20  # what the controller reads of one pod log (limitBytes): the budget and other output
MAX_RECORD_BYTES = 64 << 20  # what one record may decompress to
_KEY_MAX = 128
_HEADER_MAX = len(f"{TAG} rec= key= part=/ sha256= data=") + 3 * 9 + _KEY_MAX + 64
_CHUNK = (LINE_MAX - 1 - _HEADER_MAX) // 4 * 3  # compressed bytes per frame: base64 makes 4 of every 3
MAX_FRAMES = READ_LIMIT // (LINE_MAX - _CHUNK // 3 * 4)  # no log we read can hold more frames than this
_HEAD = re.compile(  # the payload after `data=` is checked by base64's own validation, not by the pattern
    rb"gpucert-frame/(\d+) rec=(\d{1,12}) key=([a-z0-9][a-z0-9._/-]{0,127}) part=(\d{1,12})/(\d{1,12}) "
    rb"sha256=([0-9a-f]{64}) data="
)


class FramingError(ValueError):
    pass


# ---- writing ------------------------------------------------------------------------------------------------------


def _lines(rec: int, key: str, text: str) -> list[str]:
    if not re.fullmatch(r"[a-z0-9][a-z0-9._/-]{0,127}", key):
        raise ValueError(f"not a frame key: {key!r}")
    packed = zlib.compress(text.encode(), 6)
    chunks = [packed[i : i + _CHUNK] for i in range(0, len(packed), _CHUNK)]
    n = len(chunks)
    return [
        f"{TAG} rec={rec} key={key} part={i}/{n} sha256={hashlib.sha256(c).hexdigest()} "
        f"data={base64.b64encode(c).decode()}\n"
        for i, c in enumerate(chunks)
    ]


@dataclass
class Framer:
    """Writes records as frames, one line per write and flush, within `budget` bytes for the whole log."""

    write: Callable[[str], object]
    flush: Callable[[], object] | None = None
    budget: int = LOG_BUDGET
    rec: int = 0
    used: int = 0
    overflowed: bool = False

    def emit(self, key: str, text: str, *, final: bool = False) -> bool:
        """Frame `text` as record `key` (the document when `final`); False, with an `overflow` record written once,
        when it would pass the parts' half of the budget (the whole budget for the document)."""
        lines = _lines(self.rec, key, text)
        size = sum(len(line) for line in lines)
        room = (self.budget if final else self.budget // 2) - self.used
        if size > room:
            if not self.overflowed or final:
                note = f'{{"key": "{key}", "bytes": {size}, "room": {max(room, 0)}, "budget": {self.budget}}}'
                self._put(_lines(self.rec, OVERFLOW, note))
                self.overflowed = True
            return False
        self._put(lines)
        return True

    def _put(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)
            if self.flush is not None:
                self.flush()
            self.used += len(line)
        self.rec += 1


def frame(document: str, key: str | None = None, rec: int = 0) -> str:
    """`document` framed as record `rec`: the node's evidence document, or (with `key`) one probe's part."""
    return "".join(_lines(rec, key or DOCUMENT, document))


# ---- reading ------------------------------------------------------------------------------------------------------


@dataclass
class _Record:
    key: str
    total: int
    chunks: dict[int, bytes] = field(default_factory=dict)

    def missing(self) -> list[int]:
        return [i for i in range(self.total) if i not in self.chunks][:5] if len(self.chunks) < self.total else []


def _where(rec: int, key: str, part: int | None = None, total: int | None = None) -> str:
    at = f"frame {part + 1} of {total} of " if part is not None else ""
    return f"{at}record {rec} ({key})"


class FrameReader:
    """A pod log read in chunks: the frames' payloads, the last lines of other output, and what is wrong."""

    def __init__(self, limit: int = READ_LIMIT) -> None:
        self.limit = limit
        self.read = 0
        self._buf = b""
        self._long = False  # inside a line of LINE_MAX bytes or more: dropped up to its newline
        self._records: dict[int, _Record] = {}
        self._tail: deque[bytes] = deque(maxlen=5)
        self._problems: list[str] = []
        self._legacy = False
        self._frames = 0

    def feed(self, chunk: bytes) -> None:
        self.read += len(chunk)
        buf = self._buf + chunk if self._buf else chunk
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            if self._long:
                self._long = False
            else:
                self._line(buf[start:end])
            start = end + 1
        self._buf = buf[start:]
        if len(self._buf) >= LINE_MAX:  # no frame is this long: keep none of it
            if not self._long:
                self._too_long(self._buf)
            self._long = True
            self._buf = b""

    def close(self) -> FramedLog:
        cut = not self._long and self._buf.startswith(PREFIX)
        if self._buf and not cut and not self._long:
            self._other(self._buf)
        self._buf = b""
        tail = [line.decode(errors="replace").rstrip("\r") for line in self._tail]
        return FramedLog(self._records, tail, self._problems, self._legacy, cut, self.read >= self.limit)

    def _problem(self, what: str) -> None:
        if len(self._problems) < 20:
            self._problems.append(what)

    def _too_long(self, line: bytes) -> None:
        if line.startswith(PREFIX):
            self._problem(f"a frame line is longer than {LINE_MAX} bytes (the log has bytes that are not frames)")
        else:
            self._other(line[:200] + b"...")

    def _other(self, line: bytes) -> None:
        at = line.find(PREFIX)
        if at > 0:
            self._problem(f"bytes that are not a frame precede a frame on its line: {line[:at][-60:]!r}")
            return
        self._legacy = self._legacy or line.startswith(LEGACY)
        self._tail.append(line)  # decoded once, at the end

    def _line(self, line: bytes) -> None:
        if len(line) >= LINE_MAX:
            self._too_long(line)
            return
        if not line.startswith(PREFIX):
            self._other(line)
            return
        m = _HEAD.match(line)
        if m is None:
            self._problem(f"a frame line does not parse (the log has bytes that are not frames): {line[:80]!r}...")
            return
        version, rec, key, part, total = int(m[1]), int(m[2]), m[3].decode(), int(m[4]), int(m[5])
        if version != VERSION:
            self._problem(f"a frame of version {version}: this gpucert reads probe output version {VERSION}")
            return
        if total > MAX_FRAMES or not 0 <= part < total:
            can = f"more than a {self.limit >> 20} MiB log can hold"
            self._problem(f"{_where(rec, key, part, total)} claims {total} frames, {can}")
            return
        try:
            chunk = base64.b64decode(line[m.end() :], validate=True)
        except binascii.Error:
            self._problem(f"{_where(rec, key, part, total)} is not base64 (the log has bytes that are not frames)")
            return
        if hashlib.sha256(chunk).hexdigest() != m[6].decode():
            self._problem(f"{_where(rec, key, part, total)} does not match its sha256: the log was altered or cut")
            return
        self._add(rec, key, part, total, chunk)

    def _add(self, rec: int, key: str, part: int, total: int, chunk: bytes) -> None:
        record = self._records.get(rec)
        if record is None:
            if self._frames >= MAX_FRAMES:
                self._problem(f"more than {MAX_FRAMES} frames: more than a {self.limit >> 20} MiB log can hold")
                return
            record = self._records[rec] = _Record(key, total)
        if (record.key, record.total) != (key, total):
            self._problem(
                f"{_where(rec, key, part, total)} disagrees with the record's first frame "
                f"({record.key}, {record.total} frames): two records share a number"
            )
        elif record.chunks.setdefault(part, chunk) != chunk:
            self._problem(f"{_where(rec, key, part, total)} appears twice with different payloads")
        else:
            self._frames += 1


@dataclass
class FramedLog:
    """What a FrameReader found in a log; `document()` and `parts()` judge it."""

    records: dict[int, _Record]
    tail: list[str]
    problems: list[str]
    legacy: bool = False
    cut: bool = False  # the log ends inside a frame line
    limited: bool = False  # the read stopped at its limit: the log may be longer

    def _refuse(self) -> None:
        """Refuse what no reading of this log can mend: problems, a read that hit its limit, skipped records."""
        if self.problems:
            more = f" (and {len(self.problems) - 1} more problems)" if len(self.problems) > 1 else ""
            raise FramingError(self.problems[0] + more)
        if self.limited:
            raise FramingError(
                f"the log is longer than the {READ_LIMIT >> 20} MiB read (limitBytes): not all of it was read"
            )
        for expected, rec in enumerate(sorted(self.records)):
            if rec == expected:
                continue
            if expected == 0:
                raise FramingError(
                    f"records 0 to {rec - 1} are missing: the log begins at record {rec} (the kubelet rotated "
                    "the container log, containerLogMaxSize, and serves only its current file)"
                )
            raise FramingError(f"record {expected} is missing (the log jumps to record {rec})")

    def _missing(self, rec: int) -> None:
        record = self.records[rec]
        if missing := record.missing():
            said = ", ".join(str(i + 1) for i in missing)
            raise FramingError(
                f"the log is truncated or was cut: {_where(rec, record.key)} lacks frame {said} of {record.total}"
            )

    def _whole(self, rec: int) -> str:
        self._missing(rec)
        record = self.records[rec]
        d = zlib.decompressobj()
        try:
            out = d.decompress(b"".join(record.chunks[i] for i in range(record.total)), MAX_RECORD_BYTES + 1)
        except zlib.error as exc:
            raise FramingError(f"{_where(rec, record.key)} does not decompress: {exc}") from None
        if len(out) > MAX_RECORD_BYTES:
            raise FramingError(f"{_where(rec, record.key)} decompresses past {MAX_RECORD_BYTES >> 20} MiB")
        if not d.eof or d.unused_data:
            raise FramingError(f"{_where(rec, record.key)} is not one whole compressed record")
        try:
            return out.decode()
        except UnicodeDecodeError:
            raise FramingError(f"{_where(rec, record.key)} is not UTF-8") from None

    def document(self) -> str:
        """The node's evidence document: the log's last record, whole, with every record before it whole."""
        if not self.records and not self.problems:
            if self.legacy:
                raise FramingError(
                    "the log is in probe output version 1 (gpucert-evidence-begin): the probe image is older than "
                    f"this gpucert, which reads version {VERSION}; run the image built with this version"
                )
            raise FramingError("no evidence frame in the log (the probe did not finish writing its document)")
        self._refuse()
        last = max(self.records)
        key = self.records[last].key
        if key not in (DOCUMENT, OVERFLOW):
            if any(r.key == DOCUMENT for r in self.records.values()):
                raise FramingError("a frame follows the evidence document: the log was altered")
            cut = " (it ends inside a frame line)" if self.cut else ""
            raise FramingError(
                f"the log is truncated{cut}: {len(self.records)} parts arrived, the evidence document did not"
            )
        for rec in sorted(self.records):
            self._missing(rec)
        if self.cut:
            raise FramingError("the log is truncated inside a frame line after the evidence document's last frame")
        if key == OVERFLOW:
            raise FramingError(
                f"the probe's evidence did not fit one pod log, so it was not written: {self._whole(last)}"
            )
        return self._whole(last)

    def parts(self) -> dict[str, str]:
        """Each part key's last whole record: what a probe that never wrote its document had finished (with the
        `overflow` note when parts passed the budget). Only the log's last record may be cut (the pod was stopped
        while writing it); anything else missing is refused."""
        self._refuse()
        last = max(self.records, default=-1)
        out: dict[str, str] = {}
        for rec in sorted(self.records):
            record = self.records[rec]
            if rec == last and record.missing():
                break
            body = self._whole(rec)
            if record.key != DOCUMENT:
                out[record.key] = body  # an `overflow` record too: the parts after it were not written
        return out


def read_log(log: str | bytes) -> FramedLog:
    reader = FrameReader()
    reader.feed(log.encode() if isinstance(log, str) else log)
    return reader.close()


def unframe(log: str | bytes) -> str:
    """The evidence document of a whole log (see FramedLog.document)."""
    return read_log(log).document()


def parts(log: str | bytes) -> dict[str, str]:
    """The parts of a whole log (see FramedLog.parts)."""
    return read_log(log).parts()
