"""The peer copy bandwidth matrix: every ordered pair of GPUs, with peer access enabled where possible.

A pair that fails is that pair's error (`P2pPair.error`), not the matrix's: the other pairs are still measured.
A GPU that could not start, or hung in an earlier pair, is named as the reason of the pairs it would be part of.
Beside the unidirectional matrix (what `p2p.bandwidth` judges), each unordered pair copies both ways at once
(`bidirectional`, evidence): a link that holds one direction but not both shows there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

from gpucert.measure.evidence import P2pEvidence, P2pPair
from gpucert.measure.probes.device import Device
from gpucert.measure.probes.timing import Budget, time_region, time_together
from gpucert.measure.probes.watchdog import ProbeTimeout

__all__ = ["DEFAULT_BYTES", "peer_matrix"]

DEFAULT_BYTES = 1 << 30
T = TypeVar("T")


def _direct(fn: Callable[[], T], what: str) -> T:
    return fn()


def _pair(src: Device, dst: Device, src_buf: object, dst_buf: object, budget: Budget, nbytes: int) -> P2pPair:
    peer = src.can_access_peer(dst)  # without it the driver stages the copy through host memory
    seconds = time_region(src, partial(src.peer_copy, dst, dst_buf, src_buf), budget)
    return P2pPair(src=-1, dst=-1, peer_access=peer, samples=[nbytes / t / 1e9 for t in seconds])


def _both_ways(a: Device, b: Device, bufs: tuple[object, ...], budget: Budget, nbytes: int) -> P2pPair:
    """a -> b and b -> a at once, each from its own buffer into the other's inbox; GB/s of both together."""
    a_out, b_out, a_in, b_in = bufs
    peer = a.can_access_peer(b) and b.can_access_peer(a)
    ab, ba = time_together([a, b], [partial(a.peer_copy, b, b_in, a_out), partial(b.peer_copy, a, a_in, b_out)], budget)
    both = [(nbytes / s + nbytes / t) / 1e9 for s, t in zip(ab, ba, strict=True)]  # each byte crosses once
    return P2pPair(src=-1, dst=-1, peer_access=peer, samples=both)


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
    both = _bidirectional(devs, bad, indices, bufs, budget, nbytes, run)
    params = {"bytes": nbytes, "direction": "unidirectional", "bidirectional": "both ways at once, GB/s summed"}
    return P2pEvidence(unit="GB/s", pairs=pairs, params=params, bidirectional=both)


def _bidirectional(
    devs: Mapping[int, Device],
    bad: dict[int, str],
    indices: list[int],
    bufs: Mapping[int, object],
    budget: Budget,
    nbytes: int,
    run: Callable[[Callable[[], P2pPair], str], P2pPair],
) -> list[P2pPair]:
    inbox: dict[int, object] = {}
    out = []
    for i in indices:
        for j in (j for j in indices if j > i):
            why = next((f"GPU {g}: {bad[g]}" for g in (i, j) if g in bad), None)
            if why is None:
                try:
                    for g in (i, j):
                        inbox.setdefault(g, devs[g].empty(nbytes))
                    fn = partial(_both_ways, devs[i], devs[j], (bufs[i], bufs[j], inbox[i], inbox[j]), budget, nbytes)
                    out.append(run(fn, f"p2p {i}<->{j}").model_copy(update={"src": i, "dst": j}))
                    continue
                except ProbeTimeout as exc:
                    why = str(exc)
                    for g in (i, j):
                        bad.setdefault(g, f"hung in the copy {i}<->{j}")
                except Exception as exc:
                    why = f"{type(exc).__name__}: {exc}"
            out.append(P2pPair(src=i, dst=j, peer_access=False, samples=[], error=why))
    return out
