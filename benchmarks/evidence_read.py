"""Reading a run's node evidence (issue 28): `read_evidence` of every node document of a run folder, each kept as a
re-test keeps them, in CPU milliseconds a document; with `--against REV` the same documents read by REV's source
in the same run, the two alternating, each in a fresh process.

    .venv/bin/python benchmarks/evidence_read.py RUN [--against REV] [--rounds 3]
    (RUN: a run folder with evidence/, e.g. one benchmarks/fleet_scale.py --retest printed; REV: a git revision)

Per side: the CPU time a document (median of the rounds), the part of it the cyclic garbage collector took (its
full collections walk every object alive, so each object a document leaves tracked costs again at each one), the
same read with the collector paused (the reading's own work), the same read with the collector at the thresholds a
`gpucert` command sets (cli.main.THRESHOLDS: what a certification or a re-test pays), and the objects the collector
tracks a document.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _read_all(files: list[Path], collector: bool, thresholds: tuple[int, int, int] | None = None) -> dict[str, float]:
    """Read every document once, keeping each; the CPU seconds taken, those of the collector, the objects left."""
    from gpucert.measure import evidence

    evidence._VALIDATED.clear()
    gc.collect()
    default = gc.get_threshold()
    if thresholds:
        gc.set_threshold(*thresholds)
    tracked = len(gc.get_objects())
    spent = [0.0, 0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent[1] = time.process_time()
        else:
            spent[0] += time.process_time() - spent[1]

    gc.callbacks.append(timed)
    if not collector:
        gc.disable()
    start = time.process_time()
    held = [evidence.read_evidence(p) for p in files]
    cpu = time.process_time() - start
    gc.enable()
    gc.set_threshold(*default)
    gc.callbacks.remove(timed)
    left = len(gc.get_objects()) - tracked
    del held
    return {"cpu": cpu, "collector": spent[0], "tracked": left}


def child(src: str, run: str) -> None:
    """One side's figures, as JSON on stdout (run in its own process, with `src` first on the path)."""
    sys.path.insert(0, src)
    files = sorted((Path(run) / "evidence").glob("*.json"))
    files = [p for p in files if p.stat().st_size > 2048]  # an unreachable node's document holds no readings
    on = _read_all(files, collector=True)
    off = _read_all(files, collector=False)
    from gpucert.cli.main import THRESHOLDS

    cli = _read_all(files, collector=True, thresholds=THRESHOLDS)
    n = len(files)
    print(
        json.dumps(
            {
                "docs": n,
                "ms": on["cpu"] / n * 1e3,
                "gc_ms": on["collector"] / n * 1e3,
                "paused_ms": off["cpu"] / n * 1e3,
                "cli_ms": cli["cpu"] / n * 1e3,
                "tracked": on["tracked"] / n,
            }
        )
    )


def _source(rev: str, into: Path) -> str:
    """REV's src/ unpacked into `into` (git archive: nothing of this worktree's state)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return str(into / "src")


def _side(src: str, run: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", src, str(run)], capture_output=True, text=True, check=True
    ).stdout
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder with evidence/")
    ap.add_argument("--against", metavar="REV", help="also read with this git revision's source, alternating")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="evidence-read-") as tmp:
        sides = {"this tree": str(ROOT / "src")}
        if args.against:
            sides = {args.against: _source(args.against, Path(tmp)), **sides}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, src in sides.items():
                runs[name].append(_side(src, args.run))
    docs = int(next(iter(runs.values()))[0]["docs"])
    print(f"{docs} node documents of {args.run}, CPU ms a document (median of {args.rounds} rounds)")
    print(f"{'source':<16} {'read':>7} {'collector':>10} {'paused':>7} {'cli gc':>7} {'tracked/doc':>12}")
    for name, figures in runs.items():
        med = {k: statistics.median(f[k] for f in figures) for k in ("ms", "gc_ms", "paused_ms", "cli_ms", "tracked")}
        print(
            f"{name:<16} {med['ms']:7.2f} {med['gc_ms']:10.2f} {med['paused_ms']:7.2f} {med['cli_ms']:7.2f} "
            f"{med['tracked']:12.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
