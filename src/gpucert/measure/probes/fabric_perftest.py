"""perftest's `ib_write_bw` output, read: the RDMA write bandwidth between two nodes on one rail, from GPU memory
with `--use_cuda=<gpu>`. Chosen over a hand-written verbs loop because it is what HCA vendors and operators
quote, it registers GPU memory the way NCCL does (nvidia-peermem or, with --use_cuda_dmabuf, DMA-BUF), and its
output is a stable, documented table.

The format is perftest 6.29's (linux-rdma/perftest tag 26.04.17, src/perftest_parameters.h): after a dashed
RESULT_LINE, the header RESULT_FMT (" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]
MsgRate[Mpps]") or, with --report_gbits, RESULT_FMT_G (the same in [Gb/sec]), then one REPORT_FMT row per message
size (" %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf"). With --use_cuda the banner says
"Picking device No. %d" (src/cuda_memory.c); the adapter's settings are " Mtu             : %lu[B]" and
" Link type       : %s" (ctx_print_test_info). MiB/sec is 2^20 bytes a second, Gb/sec 10^9 bits
(format_factor 0x100000 or 125000000 in print_report_bw); rows are converted to Gb/s here. Pure: text in, rows out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["PerftestResult", "PerftestRow", "parse_ib_write_bw"]

_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(MiB|Gb)/sec\]\s+BW average\[(MiB|Gb)/sec\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)")
_CUDA = re.compile(r"Picking device No\.\s*(\d+)")
_MTU = re.compile(r"^\s*Mtu\s*:\s*(\d+)\[B\]", re.MULTILINE)
_LINK = re.compile(r"^\s*Link type\s*:\s*(\S+)", re.MULTILINE)
_VERSION = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)
MIB_PER_S_IN_GBPS = 2**20 * 8 / 1e9


@dataclass(frozen=True, slots=True)
class PerftestRow:
    size_bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    msg_rate_mpps: float


@dataclass(frozen=True, slots=True)
class PerftestResult:
    rows: list[PerftestRow] = field(default_factory=list)
    cuda_device: int | None = None  # the GPU the buffer was in ("Picking device No."), None: host memory
    mtu: int | None = None
    link_type: str | None = None  # IB | Ethernet
    version: str | None = None  # from `ib_write_bw --version`, when given with the output
    error: str | None = None  # no result row: what the tool said last

    @property
    def largest(self) -> PerftestRow | None:
        """The row of the largest message (the bandwidth figure: small messages measure the message rate)."""
        return max(self.rows, key=lambda r: r.size_bytes, default=None)


def _why(lines: list[str]) -> str:
    """The tool's last words, for a run that printed no result (perftest writes its errors to stderr, one line
    each, e.g. " Unable to init the socket connection")."""
    said = [s.strip() for s in lines if s.strip() and not set(s.strip()) <= {"-", "*"}]
    return "; ".join(said[-3:]) if said else "ib_write_bw printed nothing"


def parse_ib_write_bw(text: str) -> PerftestResult:
    """The result rows of one `ib_write_bw` run (client or server side, stdout and stderr together)."""
    lines = text.splitlines()
    rows: list[PerftestRow] = []
    scale: float | None = None
    for line in lines:
        header = _HEADER.search(line)
        if header:
            scale = MIB_PER_S_IN_GBPS if header.group(2) == "MiB" else 1.0
            continue
        row = _ROW.match(line) if scale is not None else None
        if row and scale is not None:
            size, iters, peak, avg, rate = row.groups()
            rows.append(PerftestRow(int(size), int(iters), float(peak) * scale, float(avg) * scale, float(rate)))
    cuda, mtu, link, version = _CUDA.search(text), _MTU.search(text), _LINK.search(text), _VERSION.search(text)
    return PerftestResult(
        rows=rows,
        cuda_device=int(cuda.group(1)) if cuda else None,
        mtu=int(mtu.group(1)) if mtu else None,
        link_type=link.group(1) if link else None,
        version=version.group(1) if version else None,
        error=None if rows else _why(lines),
    )
