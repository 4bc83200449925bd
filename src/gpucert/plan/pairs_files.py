"""The fabric stage's pairs documents in evidence/multinode/: one a round (`pairs-<round>.json`, written once, when
its round ends), or the one `pairs.json` of a run written before them (every pair in one document, rewritten as
each round ended; still read as it was). A fleet's pairs are gigabytes: the stage never holds them all to write
them, a re-test carries them document by document with their signed digests (plan/carried_pairs.py), and a reader
takes them one document at a time.

A round document says its round and how many the stage planned (`round`, `rounds`: evidence v1, additive). One
whose round is not the number in its name, rounds that disagree, a gap between rounds, or both layouts in one run
are an EvidenceError naming the file: the pairs cannot be believed, and every check that reads them errs. Rounds
missing at the end (a stage stopped early) leave pairs missing, which the schedule check names
(evaluate/rules/fabric_schedule.py; for pairs of neighbours, rules/multinode.py `_off_schedule`). Takes the
multinode folder's path; imports nothing of the run folder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from gpucert.errors import EvidenceError
from gpucert.files import write_atomic
from gpucert.measure.evidence import FabricEvidence, FabricPairs, read_fabric_pairs
from gpucert.plan import layout

__all__ = ["iter_pairs", "pairs_files", "read_all_pairs", "round_path", "write_round"]

_ROUND = re.compile(r"pairs-(\d{4,})\.json")


def round_path(multinode: Path, number: int) -> Path:
    """Where round `number` (1-based) of the fabric stage keeps its pairs."""
    return multinode / layout.PAIRS_ROUND.format(number)


def _network_only(pair: FabricEvidence) -> FabricEvidence:
    """The pair with NCCL's network channel lines (NET/IB, NET/Socket: what fabric.nccl_transport judges) and not
    its ranks' lines inside a node (P2P, SHM: 14 of every 16 hops of a ring of 2 x 8 GPUs), which the pool's own
    all-reduce document keeps."""
    t = pair.transport
    if t is None or all(ch.transport.startswith("NET/") for ch in t.channels):
        return pair
    channels = [ch for ch in t.channels if ch.transport.startswith("NET/")]
    return pair.model_copy(update={"transport": t.model_copy(update={"channels": channels})})


def write_round(multinode: Path, number: int, rounds: int, pairs: list[FabricEvidence]) -> Path:
    """The pairs of one round, written once when it ends (atomically, as every evidence document). Fields at their
    default (an empty error list, a null, `collected: true`) are left out: a reader reads them as the defaults they
    are, and at 1,024 x 8 they were a sixth of the stage's bytes. The schema is always written."""
    multinode.mkdir(parents=True, exist_ok=True)
    doc = FabricPairs(round=number, rounds=rounds, pairs=[_network_only(p) for p in pairs])
    text = doc.model_dump_json(by_alias=True, exclude_defaults=True)
    return write_atomic(round_path(multinode, number), f'{{"schema":{json.dumps(doc.schema_)},{text[1:]}')


def _numbered(multinode: Path) -> list[tuple[int, Path]]:
    if not multinode.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in multinode.iterdir() if (m := _ROUND.fullmatch(p.name))]
    return sorted(found)


def pairs_files(multinode: Path) -> list[Path]:
    """The run's pairs documents in order: each round's, or the one pairs.json of a run written before rounds had
    their own ([] for none). EvidenceError when the folder holds both layouts."""
    old = multinode / layout.PAIRS
    rounds = [p for _, p in _numbered(multinode)]
    if rounds and (old.exists() or old.is_symlink()):
        raise EvidenceError(
            f"beside {rounds[0].name} (a document per round): a run writes its pairs in one layout, not both",
            path=old,
        )
    return rounds or ([old] if old.exists() or old.is_symlink() else [])


def _round_problem(path: Path, doc: FabricPairs, number: int, rounds: int | None) -> str | None:
    if doc.round != number or doc.rounds is None or doc.rounds < number:
        return f"it says round {doc.round} of {doc.rounds}; its name says round {number}"
    if rounds is not None and doc.rounds != rounds:
        return f"it says the stage ran {doc.rounds} rounds, the first round's document {rounds}"
    return None


def iter_pairs(multinode: Path) -> Iterator[FabricPairs]:
    """Each pairs document, read and checked one at a time (EvidenceError for one that cannot be believed)."""
    old = pairs_files(multinode)
    if old == [multinode / layout.PAIRS]:
        doc = read_fabric_pairs(old[0])
        if doc is not None:
            yield doc
        return
    rounds: int | None = None
    for expected, (number, path) in enumerate(_numbered(multinode), 1):
        if number != expected:
            missing = round_path(multinode, expected).name
            raise EvidenceError(f"{missing} is missing: the rounds of the fabric stage have a gap", path=path)
        doc = read_fabric_pairs(path)
        if doc is None:
            raise EvidenceError("removed while the pairs were read", path=path)
        problem = _round_problem(path, doc, number, rounds)
        if problem is not None:
            raise EvidenceError(f"not the round document gpucert wrote: {problem}", path=path)
        rounds = doc.rounds
        yield doc


def read_all_pairs(multinode: Path) -> FabricPairs | None:
    """Every pair of the run's documents as one (None: the run holds none)."""
    if not pairs_files(multinode):
        return None
    return FabricPairs(pairs=[p for doc in iter_pairs(multinode) for p in doc.pairs])
