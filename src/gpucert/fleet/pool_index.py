"""A pool's performance index over time, from its nodes' history (fleet/history.py): at each signed run that
measured some node of the pool, each node as its newest entry up to then stands, summarised by evaluate/index.py.

Each GPU is held to its handover figure (`baselines/nodes/<spec>/<node>.yaml`, when it was recorded under this spec
for this very board, by serial) and otherwise to the SKU baseline its run was judged against (the run folder's
inputs/ copy). A GPU with neither reference has no index and counts as lost (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpucert.errors import GpucertError
from gpucert.evaluate.index import IndexSummary, entry_indices, handover_figures, summarize
from gpucert.fleet.history import HISTORY_DIR, load_history
from gpucert.plan.history_records import HistoryEntry
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.baseline import load_baseline
from gpucert.spec.handover import NodeBaseline, load_node_baseline
from gpucert.spec.names import NameError_, inside

__all__ = ["PoolRow", "pool_history"]


@dataclass(frozen=True, slots=True)
class PoolRow:
    run: str
    time: str
    nodes: int  # nodes of the pool with an entry up to this run
    summary: IndexSummary


class _References:
    """Handover baselines per node and SKU figures per run, each read once."""

    def __init__(self, reports: Path, handover_dir: Path) -> None:
        self.reports, self.handover_dir = reports, handover_dir
        self._handover: dict[str, NodeBaseline | None] = {}
        self._sku: dict[tuple[str, str], dict[str, float]] = {}

    def handover(self, node: str) -> NodeBaseline | None:
        if node not in self._handover:
            path = self.handover_dir / f"{node}.yaml"
            self._handover[node] = load_node_baseline(path) if path.is_file() else None
        return self._handover[node]

    def handover_of(self, entry: HistoryEntry) -> dict[int, dict[str, float]]:
        handover = self.handover(entry.node)
        if handover is not None and handover.recorded.spec not in (None, entry.spec):
            return {}  # recorded under another spec: never compared
        return handover_figures(handover, entry.node, {g.index: g.serial for g in entry.gpus})

    def sku(self, run: str, pool: str) -> dict[str, float]:
        if (run, pool) not in self._sku:
            try:
                path = RunFolder(inside(self.reports, run)).baseline_copy_for(pool)
                base = load_baseline(path) if path.is_file() else None
            except (GpucertError, NameError_, OSError):
                base = None  # the run is gone or unreadable: no SKU figure, so no index (counted lost)
            self._sku[(run, pool)] = {m: b.expected for m, b in base.metrics.items()} if base else {}
        return self._sku[(run, pool)]


def pool_history(reports: Path, spec: str, pool: str, handover_dir: Path) -> list[PoolRow]:
    """One row per run that measured a node of the pool, oldest first."""
    folder = reports / HISTORY_DIR / spec
    entries = [
        e
        for path in (sorted(folder.glob("*.jsonl")) if folder.is_dir() else [])
        for e in load_history(path)
        if e.spec == spec and e.pool == pool
    ]
    refs = _References(reports, handover_dir)
    newest: dict[str, HistoryEntry] = {}
    rows: list[PoolRow] = []
    by_run: dict[tuple[str, str], list[HistoryEntry]] = {}
    for e in entries:
        by_run.setdefault((e.time, e.run), []).append(e)
    for (time, run), measured in sorted(by_run.items()):
        newest.update({e.node: e for e in measured})
        indices = [i for e in newest.values() for i in entry_indices(e, refs.handover_of(e), refs.sku(e.run, e.pool))]
        expected = [(e.node, g.index) for e in newest.values() for g in e.gpus]
        rows.append(PoolRow(run=run, time=time, nodes=len(newest), summary=summarize(indices, expected)))
    return rows
