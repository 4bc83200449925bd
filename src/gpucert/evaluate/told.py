"""What a run view holds of a re-test's held node in place of its document (evaluate/held.py reads it from the
source's signed figures.json; evaluate/view.py and view_figures.py answer from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.rules.stability import SlowSamples

__all__ = ["Told"]


@dataclass(frozen=True, slots=True)
class Told:
    """One held node's derived figures: the sha256 of its document, its pool, per metric its slots' (GPU, figure or
    why not, slow samples, whether a refused figure had samples) in its pool index's order, and its P2P unit and each
    GPU's matrix problem (None: no P2P evidence)."""

    evidence: str
    pool: str
    figures: dict[str, list[tuple[int | None, Sampled | str, SlowSamples | None, bool]]]
    p2p: tuple[str, dict[int, str | None]] | None
    entry: Any = field(default=None, compare=False, repr=False)  # its entry in figures.json, as read (held.HeldNode)
