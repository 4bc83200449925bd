"""The fabric stage's pairs evidence at fleet scale (`benchmarks/fabric_scale.py --evidence`): bytes written per
round and in all, one document per round (now) against one pairs.json rewritten after every round (before), and the
peak RSS of the evaluation's reading of them in a child process: now every round document read one at a time into
the rules' index (evaluate/pairs_index.py), before the one pairs.json read whole as models, then in both the
schedule check of every rail (evaluate/rules/fabric_schedule.py) over what was read.

The pair is a real one: the simulator's pair of two nodes with 8 rails (RDMA per rail, the all-reduce sweep, NCCL's
transport lines), its node names replaced for each pair of the round-robin schedule (plan/pairs.py). Round
documents are written for real (write_atomic, as measure does); the old layout's rewrites are counted, not written
(round k rewrote every pair of rounds 1..k: 70 GB at 256 nodes). Reading the old layout is measured where its one
document fits this machine (`--read-old`)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from gpucert.files import write_atomic
from gpucert.measure.evidence import EVIDENCE_SCHEMA
from gpucert.plan import layout
from gpucert.plan.layout import Mode
from gpucert.plan.pairs import rounds
from gpucert.plan.pairs_files import pairs_files, read_all_pairs, round_path
from gpucert.plan.run import prepare
from gpucert.spec.cluster import load_spec

ROOT = Path(__file__).resolve().parents[1]
A, B = "gpu-node-1", "gpu-node-2"


def template(tmp: Path) -> tuple[str, int]:
    """One pair of the simulator's 8-rail fabric as a round document holds it (nodes gpu-node-1 and gpu-node-2),
    and the bytes the same pair took in the one pairs.json before (every field written, node names of 13 letters)."""
    fleet = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-16x8-fabric.yaml").read_text())
    fleet.update(faults=[], nodes=dict(fleet["nodes"], count=2))
    fleet["fabric"]["racks"]["size"] = 2
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    doc = yaml.safe_load((ROOT / "examples" / "fabric.yaml").read_text())
    doc["target"]["fleet"] = str(tmp / "fleet.yaml")
    pool = doc["pools"][0]
    pool["baseline"] = str(ROOT / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    pool["expect"]["nodes"] = 2
    doc["certify"] = {"probes": ["health"], "multinode": {}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(doc))
    folder = prepare(load_spec(tmp / "spec.yaml"), tmp / "reports", Mode.MEASURE)
    [path] = pairs_files(folder.pairs_path.parent)
    [pair] = json.loads(path.read_text())["pairs"]
    [model] = read_all_pairs(folder.pairs_path.parent).pairs  # type: ignore[union-attr]
    full = model.model_dump_json(by_alias=True)
    return json.dumps(pair, separators=(",", ":")), len(full) + 3 * (full.count(A) + full.count(B))


def write_rounds(n: int, pair: str, multinode: Path) -> tuple[list[int], float]:
    """Every round of n nodes written as measure writes it; the bytes of each round and the seconds it took."""
    nodes = [f"gpu-node-{i:04d}" for i in range(n)]
    schedule = rounds(nodes)
    sizes = []
    t0 = time.perf_counter()
    for number, rnd in enumerate(schedule, 1):
        docs = ",".join(pair.replace(A, "\0a").replace(B, b).replace("\0a", a) for a, b in rnd)
        text = f'{{"schema":"{EVIDENCE_SCHEMA}","pairs":[{docs}],"round":{number},"rounds":{len(schedule)}}}'
        write_atomic(round_path(multinode, number), text)
        sizes.append(len(text.encode()))
    return sizes, time.perf_counter() - t0


def old_layout(multinode: Path, into: Path) -> None:
    """The same pairs in one pairs.json, as a run written before kept them."""
    into.mkdir(parents=True)
    with open(into / layout.PAIRS, "w") as f:
        f.write(f'{{"schema":"{EVIDENCE_SCHEMA}","pairs":[')
        for i, path in enumerate(pairs_files(multinode)):
            text = path.read_text()
            body = text[text.index("[") + 1 : text.rindex("]")]
            f.write(("," if i else "") + body)
        f.write("]}")


READ = """
import resource, sys, time
from pathlib import Path
from gpucert.evaluate.pairs_index import index_pairs
from gpucert.evaluate.rules.fabric_schedule import check_schedule
from gpucert.measure.evidence import read_fabric_pairs
from gpucert.plan.pairs_files import iter_pairs
multinode, how = Path(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
if how == "index":  # the evaluation now: every document read one at a time into the rules' index
    index = index_pairs(iter_pairs(multinode))
    pairs, records = len(index.pairs), [(r.doc, r) for r in index.rdma]
else:  # before: the one pairs.json read whole, the rules reading its models
    doc = read_fabric_pairs(multinode / "pairs.json")
    pairs, records = len(doc.pairs), [(p.nodes, r) for p in doc.pairs for r in p.rdma]
nodes = sorted({n for doc, _ in records for n in doc})
found = check_schedule(records, "train", nodes, set(nodes), 8, lambda n, r: f"mlx5_{r}/1")
assert not found.problems, list(found.problems.items())[:3]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(pairs, f"{time.perf_counter() - t0:.0f}", rss)
"""


def read_rss(multinode: Path, how: str) -> tuple[int, str, int]:
    """Read the pairs as the evaluation does (`index`: now; `models`: before) and hold them to the schedule on
    every rail, in a child process: its pairs, seconds and peak RSS (MiB)."""
    out = subprocess.run([sys.executable, "-c", READ, str(multinode), how], capture_output=True, text=True, check=True)
    count, seconds, rss = out.stdout.split()
    return int(count), seconds, int(rss)


def _size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n / 2**10:.1f} KiB"


def _read(found: tuple[int, str, int] | None) -> str:
    return f"{found[0]:,}, {found[1]} s, {found[2]:,} MiB" if found else "not read"


def main(sizes: list[int], read_old: bool, read_new: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="gpucert-pairs-") as tmp:
        pair, full = template(Path(tmp))
        print(f"one pair of 8 rails: {len(pair):,} bytes in a round document (now), {full:,} in pairs.json (before)")
        print(
            "\n| nodes | rounds | pairs | a round's document | written, one a round (now) | write time "
            "| written, pairs.json rewritten each round (before) | read: pairs, s, peak RSS (now) "
            "| read: pairs, s, peak RSS (before) |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in sizes:
            multinode = Path(tmp) / f"n{n}" / "multinode"
            multinode.mkdir(parents=True)
            per_round, seconds = write_rounds(n, pair, multinode)
            cumulative, before, head = 0, 0, len(f'{{"schema":"{EVIDENCE_SCHEMA}","pairs":[]}}')
            for _ in per_round:  # round k rewrote every pair of rounds 1..k, each written whole
                cumulative += (n // 2) * (full + 1)
                before += head + cumulative - 1
            now = read_rss(multinode, "index") if read_new else None
            old = None
            if read_old:
                old_layout(multinode, Path(tmp) / f"o{n}")
                for p in pairs_files(multinode):
                    p.unlink()
                old = read_rss(Path(tmp) / f"o{n}", "models")
            for p in multinode.iterdir():
                p.unlink()
            print(
                f"| {n} | {len(per_round)} | {n * (n - 1) // 2:,} | {_size(per_round[0])} "
                f"| {_size(sum(per_round))} | {seconds:.0f} s | {_size(before)} "
                f"| {_read(now)} | {_read(old)} |"
            )
    print(f"\nthis process's peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")
