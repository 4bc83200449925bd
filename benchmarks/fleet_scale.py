"""Fleet-scale cost of the controller: certify a simulated 1,024-node x 8-GPU fleet on this machine.

Prints wall time, peak RSS, test items, report sizes, and the harness's time as a ratio to plain pytest runs of
trivial parametrized tests, all measured here in one run: (a) one trivial test per check (the workload: what the
ratio meant while every check was an item, and what issue 28's goals are judged on), (b) as many trivial tests as
the harness collected items (since issue 28 a per-GPU check is one item per check and node).

    .venv/bin/python benchmarks/fleet_scale.py [--nodes 1024] [--workers N]
    .venv/bin/python benchmarks/fleet_scale.py --nodes 128 --retest   # a re-test of the 3 failed nodes vs the full run
    .venv/bin/python benchmarks/fleet_scale.py --nodes 1024 --retest --bytecode   # gpucert compiled once, as installed

Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every command compiles gpucert's ~180 modules again
(about 0.2 s of CPU); `pip install` compiles them once. `--bytecode` runs the commands as an installed gpucert runs:
its modules (and the suites') compiled beforehand into a cache folder of the run's own (PYTHONPYCACHEPREFIX), so no
file is written into the tree.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


PEAK = "peak-rss-kib="
CPU = "cpu-seconds="
# by the id of the completed process: on a loaded machine, CPU time is the fair figure
CPU_SECONDS: dict[int, float] = {}


def run_child(cmd: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds and peak RSS (MiB, the largest process of the command's tree) of one command; its CPU seconds
    (user + system, of its whole tree) go into CPU_SECONDS."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--measure", *cmd], cwd=cwd, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith(PEAK)][-1]
    cpu = [ln for ln in proc.stderr.splitlines() if ln.startswith(CPU)][-1]
    CPU_SECONDS[id(proc)] = float(cpu.removeprefix(CPU))
    return wall, int(line.removeprefix(PEAK)) / 1024, proc


def measure_and_exit(cmd: list[str]) -> int:
    """Run `cmd` alone in this process's children, so RUSAGE_CHILDREN is its own peak."""
    code = subprocess.run(cmd, check=False).returncode
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{PEAK}{usage.ru_maxrss}", file=sys.stderr)
    print(f"{CPU}{usage.ru_utime + usage.ru_stime}", file=sys.stderr)
    return code


def size_mib(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def _rows(
    args: argparse.Namespace,
    verdict: dict[str, Any],
    run_dir: Path,
    harness: tuple[float, float, subprocess.CompletedProcess[str]],
    plain_runs: dict[str, tuple[float, float, subprocess.CompletedProcess[str]]],
    items: int,
) -> list[tuple[str, str]]:
    """The figures printed, one row each."""
    harness_wall, harness_rss, proc = harness
    findings = sorted({(f["check"], f["node"], f["gpu"]) for f in verdict["findings"]})
    plain_rows = []
    for what, (plain_wall, plain_rss, plain) in plain_runs.items():
        plain_rows += [
            (f"plain pytest, {what}", f"{plain_wall:.1f} s, peak RSS {plain_rss:.0f} MiB"),
            (
                f"  harness / plain ({what.split(':')[0]})",
                f"wall {harness_wall / plain_wall:.2f}, CPU {CPU_SECONDS[id(proc)]:.1f} / "
                f"{CPU_SECONDS[id(plain)]:.1f} = {CPU_SECONDS[id(proc)] / CPU_SECONDS[id(plain)]:.2f}, "
                f"peak RSS {harness_rss / plain_rss:.2f}",
            ),
        ]
    return [
        ("fleet", f"{args.nodes} nodes x 8 GPUs ({verdict['summary']['gpus']} GPUs measured)"),
        ("checks, test items", f"{verdict['summary']['checks']}, {items}"),
        (
            "harness wall time",
            f"{harness_wall:.1f} s (plan + measure + evaluate + reports"
            + (f", -n {args.workers})" if args.workers else ")"),
        ),
        ("harness peak RSS", f"{max(harness_rss, 0):.0f} MiB (largest process)"),
        ("harness CPU", f"{CPU_SECONDS[id(proc)]:.1f} s (the fair figure on a loaded machine)"),
        *plain_rows,
        ("report.html", f"{size_mib(run_dir / 'report.html'):.1f} MiB"),
        ("junit.xml", f"{size_mib(run_dir / 'junit.xml'):.1f} MiB"),
        (
            "allure-results",
            f"{size_mib(run_dir / 'allure-results'):.1f} MiB, "
            f"{sum(1 for _ in (run_dir / 'allure-results').iterdir())} files",
        ),
        ("evidence", f"{size_mib(run_dir / 'evidence'):.1f} MiB"),
        ("findings", "; ".join(f"{c} {n}{'' if g is None else f'/gpu{g}'}" for c, n, g in findings)),
    ]


def plain_pytest(folder: Path, n: int) -> tuple[float, float, subprocess.CompletedProcess[str]] | None:
    """Plain pytest over `n` trivial parametrized tests: wall seconds, peak RSS, the process."""
    folder.mkdir()
    (folder / "test_trivial.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({n}))\ndef test_item(i):\n    assert i >= 0\n"
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder), "test_trivial.py"]
    wall, rss, plain = run_child(cmd, folder)
    if plain.returncode != 0:
        print(plain.stdout[-2000:])
        return None
    return wall, rss, plain


def retest(work: Path, certify: list[str]) -> int:
    """A signed certification, then `--retest` of it (its 3 failed nodes measured again, the others carried): wall
    and CPU seconds of each, and whether the re-test's verdict counts every check."""
    subprocess.run([sys.executable, "-m", "gpucert.cli.main", "keygen", "keys"], cwd=work, check=True)
    signed = [sys.executable, *certify, "--sign-key", "keys/gpucert.key"]
    full_wall, full_rss, full = run_child([*signed, "--reports", "full"], work)
    (source,) = (p for p in (work / "full").iterdir() if not p.name.startswith("."))  # beside .history
    re_wall, re_rss, again = run_child([*signed, "--reports", "retest", "--retest", str(source)], work)
    if full.returncode not in (0, 1) or again.returncode not in (0, 1):
        print(full.stdout[-2000:], full.stderr[-2000:], again.stdout[-2000:], again.stderr[-2000:])
        return 3
    (run_dir,) = (p for p in (work / "retest").iterdir() if not p.name.startswith("."))
    v = json.loads((run_dir / "verdict.json").read_text())
    w = json.loads((source / "verdict.json").read_text())
    rows = [
        ("full run", f"{full_wall:.1f} s wall, {CPU_SECONDS[id(full)]:.1f} s CPU, peak RSS {full_rss:.0f} MiB"),
        ("re-test", f"{re_wall:.1f} s wall, {CPU_SECONDS[id(again)]:.1f} s CPU, peak RSS {re_rss:.0f} MiB"),
        (
            "re-test / full",
            f"{re_wall / full_wall:.2f} wall, {CPU_SECONDS[id(again)] / CPU_SECONDS[id(full)]:.2f} CPU",
        ),
        ("measured again, carried", f"{len(v['retest']['measured'])}, {len(v['retest']['carried'])}"),
        ("checks full, re-test", f"{w['summary']['checks']}, {v['summary']['checks']} ({v['result']})"),
    ]
    for k, val in rows:
        print(f"{k:<24}  {val}")
    print(f"(run folders {source}, {run_dir})")
    return 0


def compiled(cache: Path) -> None:
    """Compile gpucert, its suites and fixtures into `cache` and let every command of this run read them from there
    (the environment its children inherit): what an installed gpucert has, where PYTHONDONTWRITEBYTECODE would have
    each command compile them again."""
    import gpucert

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)
    sys.pycache_prefix = str(cache)
    for tree in (Path(gpucert.__file__).parent, ROOT / "suites", ROOT / "fixtures"):
        compileall.compile_dir(tree, quiet=1)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        return measure_and_exit(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=0, help="pytest-xdist workers for the harness (0: none)")
    ap.add_argument("--profile", metavar="FILE", help="also run the harness once under cProfile, stats into FILE")
    ap.add_argument("--retest", action="store_true", help="time a signed run, then a re-test of its 3 failed nodes")
    ap.add_argument("--bytecode", action="store_true", help="gpucert's modules compiled once first, as installed")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpucert-fleet-"))
    if args.bytecode:
        compiled(work / "pycache")
    spec = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    spec["metadata"]["name"] = "fleet-scale"
    spec["expect"]["nodes"] = args.nodes
    spec["target"]["fleet"] = "fleet.yaml"
    spec["certify"]["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    fleet = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "SimulatedFleet",
        "metadata": {"name": "fleet-scale"},
        "sku": "H100-SXM5-80GB",
        "nodes": {"count": args.nodes, "gpusPerNode": 8},
        "noise": {"cv": 0.01},
        "seed": 11,
        "faults": [
            {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.93},
            {"kind": "ecc", "node": f"gpu-node-{args.nodes // 2}", "gpu": 1, "uncorrected": 1},
            {"kind": "unreachable", "node": f"gpu-node-{args.nodes}"},
        ],
    }
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet))

    certify = ["-m", "gpucert.cli.main", "certify", "spec.yaml", "-q"]
    if args.retest:
        return retest(work, certify)
    cmd = [sys.executable, *certify, "--reports", "reports"]
    if args.workers:
        cmd += ["-n", str(args.workers)]
    if args.profile:  # a separate run: cProfile's overhead would distort the ratio
        profiled = [sys.executable, "-m", "cProfile", "-o", str(Path(args.profile).absolute()), *certify]
        subprocess.run([*profiled, "--reports", "profiled"], cwd=work, capture_output=True, check=False)
    harness_wall, harness_rss, proc = run_child(cmd, work)
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return 3
    (run_dir,) = (p for p in (work / "reports").iterdir() if not p.name.startswith("."))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    checks = verdict["summary"]["checks"]
    progress = re.findall(r"\[\s*\d+/(\d+)\]", proc.stdout)  # pytest's progress: [done/collected]
    items = int(progress[-1]) if progress else checks
    plain_runs = {}
    for what, n in ((f"a: one trivial test per check ({checks})", checks), (f"b: as many as items ({items})", items)):
        plain = plain_pytest(work / f"trivial-{n}", n)
        if plain is None:
            return 3
        plain_runs[what] = plain
    rows = _rows(args, verdict, run_dir, (harness_wall, harness_rss, proc), plain_runs, items)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print(f"(run folder {run_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
