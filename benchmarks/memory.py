"""Where the controller's memory goes: one evaluation of a run folder under tracemalloc, grouped by the line that
allocated what is still live (issue 28).

Two studies over a run folder that `fleet_scale.py` (or `gpucert certify`) wrote:
- `--evidence`: every node's evidence read as the evaluation reads it (read_evidence), live KiB per node and the lines
  that hold it;
- the default: the certify suites run in this process over the run folder (as `gpucert certify` runs them), with a
  snapshot after collection and one at the end of the run loop (before the reports are written), each grouped by
  line: what is kept per item, per node and per GPU.

    PYTHONPATH=src python benchmarks/memory.py RUN_DIR [--top 25] [--evidence]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from gpucert.measure import evidence as evidence_module
from gpucert.measure.evidence import read_evidence
from gpucert.plan.runfolder import RunFolder

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20


def _top(snapshot: tracemalloc.Snapshot, top: int, per: int, unit: str) -> None:
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    print(f"  live {total / MiB:.1f} MiB, {total / per / 1024:.2f} KiB per {unit}")
    for s in stats[:top]:
        frame = s.traceback[0]
        where = f"{frame.filename.split('/site-packages/')[-1].split('/src/')[-1]}:{frame.lineno}"
        print(f"  {s.size / MiB:8.2f} MiB {s.count:>9,} blocks {s.size / per:8.0f} B/{unit}  {where}")


def evidence_study(run_dir: Path, top: int) -> None:
    files = sorted((run_dir / "evidence").glob("*.json"))
    gc.collect()
    tracemalloc.start(1)
    t0 = time.perf_counter()
    held = [read_evidence(p) for p in files]
    seconds = time.perf_counter() - t0
    gc.collect()
    print(f"evidence of {len(held)} nodes read in {seconds:.1f} s (under tracemalloc)")
    _top(tracemalloc.take_snapshot(), top, len(held), "node")
    tracemalloc.stop()


class Snapshots:
    """A pytest plugin that snapshots the live memory after collection and when the run loop has ended."""

    def __init__(self) -> None:
        self.taken: dict[str, tracemalloc.Snapshot] = {}
        self.items = 0

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = len(session.items)
        gc.collect()
        self.taken["collected"] = tracemalloc.take_snapshot()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        out = yield
        gc.collect()
        self.taken["decided"] = tracemalloc.take_snapshot()
        return out


def _count_validations() -> list[int]:
    """How many node documents the run validates (a reading of the bytes that finds them already held is none)."""
    count = [0]
    validate = evidence_module._validate

    def counted(path: Path, data: Any, model: Any) -> Any:
        count[0] += model is evidence_module.NodeEvidence
        return validate(path, data, model)

    evidence_module._validate = counted
    return count


def run_study(run_dir: Path, top: int) -> None:
    nodes = len(json.loads((run_dir / "inventory.json").read_text())["nodes"])
    suites = RunFolder(run_dir).suites
    plugin = Snapshots()
    validated = _count_validations()
    args = [
        *(str(ROOT / "suites" / s) for s in suites),
        "--run-dir",
        str(run_dir),
        "--rootdir",
        str(ROOT),
        "-c",
        str(ROOT / "pyproject.toml"),
        "-p",
        "no:cacheprovider",
        "-qq",
        "--tb=no",
    ]
    tracemalloc.start(1)
    t0 = time.perf_counter()
    pytest.main(args, plugins=[plugin])
    print(f"\n{nodes} nodes, {plugin.items:,} items, {time.perf_counter() - t0:.0f} s under tracemalloc")
    print(f"node documents validated: {validated[0]} for {nodes} nodes (read once per node: one each)")
    for name, snap in plugin.taken.items():
        print(f"\n{name}:")
        _top(snap, top, nodes, "node")
    if len(plugin.taken) == 2:
        print("\ngrown from collection to the end of the run loop (per item):")
        diff = plugin.taken["decided"].compare_to(plugin.taken["collected"], "lineno")
        for d in diff[:top]:
            frame = d.traceback[0]
            where = f"{frame.filename.split('/site-packages/')[-1].split('/src/')[-1]}:{frame.lineno}"
            print(f"  {d.size_diff / MiB:+8.2f} MiB {d.size_diff / max(plugin.items, 1):+8.0f} B/item  {where}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--evidence", action="store_true", help="only read every node's evidence")
    args = ap.parse_args()
    if args.evidence:
        evidence_study(args.run_dir, args.top)
    else:
        run_study(args.run_dir, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
