"""What the soak's controller reports: its progress after each round and the soak's result. Value types only, so
the metrics and the seal read them without importing the controller that makes them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Progress", "SoakResult", "fabric_progress"]


@dataclass(frozen=True, slots=True)
class Progress:
    round: int  # rounds done
    rounds: int
    nodes: dict[str, dict[str, Any]]
    wall_s: float  # wall time of the rounds this controller ran
    controller_s: float  # of which between rounds: judging, committing, progress (every node waits)
    ingest_s: float  # of which taking each node's round in as it came (writing it, summarising it)
    controller_cpu_s: float  # the CPU time of the controller between rounds


@dataclass(frozen=True, slots=True)
class SoakResult:
    run: Path
    result: str  # pass | fail | incomplete
    nodes: dict[str, dict[str, Any]]
    wall_s: float
    controller_s: float
    ingest_s: float
    controller_cpu_s: float
    fabric: dict[str, Any] | None = None  # the all-reduce across nodes (FabricSoak.result)


def fabric_progress(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """The all-reduce across nodes in `soak/progress.json`: FabricSoak.result's row without its findings (they
    are the result's), `running` until the round it left at (and each pool's the same, where each has one)."""
    if row is None:
        return None
    out: dict[str, Any] = {
        "status": "running" if row["leftRound"] is None else "left",
        "rounds": row["rounds"],
        "leftRound": row["leftRound"],
    }
    if "pools" in row:
        out["pools"] = {pool: fabric_progress(r) for pool, r in row["pools"].items()}
    return out
