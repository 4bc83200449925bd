"""The peer copy bandwidth matrix: every ordered pair of GPUs, with peer access enabled where possible.

A pair that fails is that pair's error (`P2pPair.error`), not the matrix's: the other pairs are still measured.
A GPU that could not start, or hung in an earlier pair, is named as the reason of the pairs it would be part of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

from gpucert.evidence import P2pEvidence, P2pPair
from gpucert.probes.device import Device
from gpucert.probes.timing import Budget, time_region
from gpucert.probes.watchdog import ProbeTimeout

__all__ = ["DEFAULT_BYTES", "peer_matrix"]

DEFAULT_BYTES = 1 << 30
T = TypeVar("T")


def _direct(fn: Callable[[], T], what: str) -> T:
    return fn()


def _pair(src: Device, dst: Device, src_buf: object, dst_buf: object, budget: Budget, nbytes: int) -> P2pPair:
    peer = src.can_access_peer(dst)  # without it the driver stages the copy through host memory
    seconds = time_region(src, partial(src.peer_copy, dst, dst_buf, src_buf), budget)
    return P2pPair(src=-1, dst=-1, peer_access=peer, samples=[nbytes / t / 1e9 for t in seconds])


def peer_matrix(
    devices: Sequence[Device] | Mapping[int, Device],
    budget: Budget,
    nbytes: int = DEFAULT_BYTES,
    *,
    unusable: Mapping[int, str] | None = None,
    run: Callable[[Callable[[], P2pPair], str], P2pPair] = _direct,
) -> P2pEvidence:
    """Every ordered pair of `devices` (keyed by GPU index); `run(fn, what)` runs one pair (under a watchdog)."""
    devs = dict(devices) if isinstance(devices, Mapping) else dict(enumerate(devices))
    bad = dict(unusable or {})
    bufs = {i: d.empty(nbytes) for i, d in devs.items()}
    indices = sorted(set(devs) | set(bad))
    pairs = []
    for i in indices:
        for j in indices:
            if i == j:
                continue
            why = next((f"GPU {g}: {bad[g]}" for g in (i, j) if g in bad), None)
            if why is None:
                try:
                    got = run(partial(_pair, devs[i], devs[j], bufs[i], bufs[j], budget, nbytes), f"p2p {i}->{j}")
                    pairs.append(got.model_copy(update={"src": i, "dst": j}))
                    continue
                except ProbeTimeout as exc:
                    why = str(exc)
                    for g in (i, j):  # either end may be wedged: the pairs still to come leave both out
                        bad.setdefault(g, f"hung in the copy {i}->{j}")
                except Exception as exc:
                    why = f"{type(exc).__name__}: {exc}"
            pairs.append(P2pPair(src=i, dst=j, peer_access=False, samples=[], error=why))
    return P2pEvidence(unit="GB/s", pairs=pairs, params={"bytes": nbytes, "direction": "unidirectional"})
