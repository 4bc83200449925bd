"""The peer copy bandwidth matrix: every ordered pair of GPUs, with peer access enabled where possible."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from gpucert.evidence import P2pEvidence, P2pPair
from gpucert.probes.device import Device
from gpucert.probes.timing import Budget, time_region

__all__ = ["DEFAULT_BYTES", "peer_matrix"]

DEFAULT_BYTES = 1 << 30


def peer_matrix(devices: Sequence[Device], budget: Budget, nbytes: int = DEFAULT_BYTES) -> P2pEvidence:
    bufs = [d.empty(nbytes) for d in devices]
    pairs = []
    for i, src in enumerate(devices):
        for j, dst in enumerate(devices):
            if i == j:
                continue
            peer = src.can_access_peer(dst)  # without it the driver stages the copy through host memory
            seconds = time_region(src, partial(src.peer_copy, dst, bufs[j], bufs[i]), budget, flush=False)
            pairs.append(P2pPair(src=i, dst=j, peer_access=peer, samples=[nbytes / t / 1e9 for t in seconds]))
    return P2pEvidence(unit="GB/s", pairs=pairs, params={"bytes": nbytes, "direction": "unidirectional"})
