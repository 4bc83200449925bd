"""The pool's performance index at handover, for the acceptance report: each node as the run that covers it in the
record measured it (evaluate/index.py over fleet/index_metrics.node_index: each GPU's figure over its handover
figure where that run held it to one, else over the SKU's). A GPU the spec expects without a figure counts lost."""

from __future__ import annotations

from typing import Any

from gpucert.errors import GpucertError
from gpucert.evaluate.index import GpuIndex, IndexSummary, summarize
from gpucert.evaluate.view import RunView
from gpucert.fleet.index_metrics import node_index
from gpucert.plan.runfolder import RunFolder

__all__ = ["handover_index"]


def handover_index(folders: dict[str, RunFolder], record: dict[str, Any]) -> dict[str, IndexSummary]:
    """Per pool (sorted), the summary over the record's nodes; `folders` by run id."""
    views: dict[str, RunView] = {}
    pools: dict[str, tuple[list[GpuIndex], list[tuple[str, int]]]] = {}
    for node, entry in sorted(record["nodes"].items()):
        folder = folders[entry["run"]]
        view = views.get(folder.id) or views.setdefault(folder.id, RunView.from_run(folder))
        pool = view.pools.name_of(node) or "(no pool)"
        try:
            ev = view.measured_node(node)
            got = node_index(view, node, ev) if ev is not None else []
        except (GpucertError, OSError, ValueError):
            got = []  # its evidence cannot be read: its GPUs count lost
        finally:
            view.release(node)
        indices, expected = pools.setdefault(pool, ([], []))
        indices.extend(got)
        expected.extend((node, g) for g in range(view.pools.gpus_per_node(node)))
    return {pool: summarize(got, set(expected)) for pool, (got, expected) in sorted(pools.items())}
