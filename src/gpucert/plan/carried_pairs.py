"""A re-test's fabric pairs carried from its source run (issue 28: a re-test pays for what it re-measures).

A re-test measures only the pairs with a node measured again (plan/pairs.py `retest_rounds`; for pools without a
fabric section, whose pairs are the neighbours on each ring, `carried_neighbours`); a pair of two carried nodes
keeps its evidence from the source run. The source's pairs documents (one a round, or a run's older one
`pairs.json`: plan/pairs_files.py) are copied byte for byte, one by one, into `evidence/multinode/carried-<i>.json`
(their digests stay the ones the source signed: `verify` checks each, acceptance/retest_pairs.py), and
`evidence/multinode/carried.json` names them and the carried nodes. The run's pairs are then its own round
documents and, of the carried documents, each pair of two carried nodes: a pair with a node measured again is never
carried, whatever the files hold. Both lie under evidence/, so the same evidence
re-evaluated elsewhere (`--evidence`) reads the same pairs and holds them to the same schedule.

carried.json is not believed alone: a node it names is carried only where the run's re-test record
(retest/record.json) names it carried, neither measured again nor measured after the pairs were (`carried_nodes`);
any other node is held to the pairs its re-test measured, whatever carried.json says, and `verify` names it. A
carried.json without a re-test record is an error.

Reads and writes through RunFolder's paths; nothing else.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from gpucert.errors import EvidenceError
from gpucert.files import read_json_object, validate, write_json
from gpucert.measure.evidence import FabricPairs, read_fabric_pairs
from gpucert.plan import layout
from gpucert.plan.layout import run_id_time
from gpucert.plan.records import Carried, Part, RetestRecord, Str, parse_record, read_retest_record
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.names import NameError_, inside

__all__ = [
    "CARRIED_PAIRS_SCHEMA",
    "CarriedPairs",
    "CarriedPairsFile",
    "carried_neighbours",
    "carried_nodes",
    "carry_files",
    "iter_carried",
    "measured_since",
    "read_carried",
    "read_pairs",
    "trusted",
]

CARRIED_PAIRS_SCHEMA = "gpucert.io/carried-pairs/v1"


class CarriedPairsFile(Part):
    """One pairs document carried: its name in this run's evidence/multinode/, its name in the source run (what
    the source signed) and its sha256 there."""

    file: Str
    source: Str
    sha256: Str


class CarriedPairs(Part):
    """evidence/multinode/carried.json: the source run and the run that measured the pairs, the nodes whose pairs
    with each other are carried (carried nodes whose pairs the source holds whole; every other node's pairs are
    measured again), and the pairs documents copied from the source."""

    schema_: Str = Field(CARRIED_PAIRS_SCHEMA, alias="schema")
    run: Str
    measured_in: Str  # the run whose fabric stage measured them (the source, or the run the source carried them from)
    nodes: tuple[Str, ...] = ()
    files: tuple[CarriedPairsFile, ...] = ()


def _index(folder: RunFolder) -> Path:
    return folder.pairs_path.parent / layout.CARRIED_PAIRS


def read_carried(folder: RunFolder) -> CarriedPairs | None:
    """The run's carried pairs index; None when it carried none. EvidenceError naming the file and the key when it
    is not one gpucert writes."""
    path = _index(folder)
    if not folder.measured or not path.exists():
        return None
    doc = parse_record(CarriedPairs, read_json_object(path), path, "a carried pairs index")
    if doc.schema_ != CARRIED_PAIRS_SCHEMA:
        raise EvidenceError(f"schema is {doc.schema_!r}, expected {CARRIED_PAIRS_SCHEMA!r}", path=path)
    if not folder.retest_record_path.exists():
        raise EvidenceError(
            "carried pairs belong to a re-test, and this run has no re-test record (retest/record.json) to bear "
            "them out: pass the re-test's whole run folder, retest/ with it",
            path=path,
        )
    return doc


def measured_since(index: CarriedPairs, carried: Carried) -> bool:
    """Whether a carried node was measured after the carried pairs were, or when either was cannot be told (a run
    id without its time, or two runs' ids of the same second): its pairs there are from before a repair, or against
    RETEST_PEERS peers only."""
    pairs_at, at = run_id_time(index.measured_in), run_id_time(carried.measured_in)
    if pairs_at is None or at is None:
        return True
    return at > pairs_at or (at == pairs_at and carried.measured_in != index.measured_in)


def trusted(index: CarriedPairs, record: RetestRecord) -> frozenset[str]:
    """The nodes of `index` whose carried pairs stand: those the re-test `record` carried, did not measure again,
    and that were not measured since the pairs were."""
    return frozenset(
        n
        for n in index.nodes
        if (c := record.carried.get(n)) is not None and n not in record.measured and not measured_since(index, c)
    )


def carried_nodes(folder: RunFolder) -> frozenset[str]:
    """The nodes whose pairs with each other the run carried, as far as its re-test record bears carried.json out
    (`trusted`); none for a run that carried none. EvidenceError naming the file when either cannot be read."""
    index = read_carried(folder)
    if index is None:
        return frozenset()
    record = read_retest_record(folder)
    if record is None:  # gone between the two reads
        raise EvidenceError("the re-test record of these carried pairs is missing", path=_index(folder))
    return trusted(index, record)


def carried_file(folder: RunFolder, entry: CarriedPairsFile) -> Path:
    """Where a carried pairs document lies: in evidence/multinode/ and nowhere else (EvidenceError otherwise)."""
    base = folder.pairs_path.parent
    try:
        path = inside(base, entry.file)
    except NameError_ as exc:
        raise EvidenceError(str(exc), path=_index(folder)) from None
    if path.parent != base.resolve():
        raise EvidenceError(f"{entry.file!r} is not a file of evidence/multinode/", path=_index(folder))
    return path


def iter_carried(folder: RunFolder) -> Iterator[FabricPairs]:
    """Each carried document, read one at a time, holding only its pairs of two carried nodes (`carried_nodes`; none
    for a run that carried none). A carried document that is missing or not gpucert's is an EvidenceError."""
    carried = read_carried(folder)
    if carried is None:
        return
    keep = carried_nodes(folder)
    for entry in carried.files:
        path = carried_file(folder, entry)
        doc = read_fabric_pairs(path)
        if doc is None:
            raise EvidenceError("a carried pairs document named by carried.json is missing", path=path)
        yield doc.model_copy(update={"pairs": [p for p in doc.pairs if keep.issuperset(p.nodes)]})


class _Nodes(BaseModel):
    nodes: tuple[str, ...]


class _PairNodes(BaseModel):
    """Of a pairs document, each pair's nodes alone (what a schedule needs: the evaluation reads it whole)."""

    pairs: tuple[_Nodes, ...] = ()


def _pair_nodes(path: Path) -> _PairNodes:
    if not path.is_file():
        raise EvidenceError("a carried pairs document named by carried.json is missing", path=path)
    return validate(path, path.read_bytes(), _PairNodes)


def carried_neighbours(
    folder: RunFolder, wanted: Collection[frozenset[str]], keep: frozenset[str], ringed: Collection[str]
) -> frozenset[frozenset[str]]:
    """A re-test of pools without a fabric section, whose pairs are the neighbours on each pool's ring (`wanted`:
    the re-test's rings'; `keep`: the run's `carried_nodes`; `ringed`: those pools' nodes; where other pools have a
    fabric section, the carried pairs of their tournament are left alone): the carried pairs that stand, each a
    pair of neighbours there. A node of a carried pair that is no neighbour pair now (a node joined the ring between the
    two) is carried no longer (carried.json rewritten without it): its pairs are measured again, as a pair with a
    node measured again is. The fabric stage measures the wanted pairs not returned; none for a run that carried
    none. Reads each carried document's pairs' nodes alone (the evaluation validates them whole)."""
    index = read_carried(folder)
    if index is None:
        return frozenset()
    every = (frozenset(p.nodes) for entry in index.files for p in _pair_nodes(carried_file(folder, entry)).pairs)
    pairs = {p for p in every if keep.issuperset(p) and not p.isdisjoint(ringed)}
    gone = {n for p in pairs if p not in wanted for n in p}
    if gone:
        still = tuple(n for n in index.nodes if n not in gone)
        write_json(_index(folder), index.model_copy(update={"nodes": still}).to_json())
        pairs = {p for p in pairs if gone.isdisjoint(p)}
    return frozenset(pairs)


def read_pairs(folder: RunFolder) -> FabricPairs | None:
    """Every pair of the run: those it measured (its round documents, or an older run's pairs.json) and, for a
    re-test, each carried pair of two carried nodes. None when it has neither."""
    carried = [p for doc in iter_carried(folder) for p in doc.pairs]
    own = folder.read_fabric_pairs()
    if own is None and read_carried(folder) is None:
        return None
    return FabricPairs(pairs=[*carried, *(own.pairs if own is not None else [])])


def carry_files(
    folder: RunFolder, run: str, measured_in: str, nodes: list[str], files: list[tuple[Path, CarriedPairsFile]]
) -> CarriedPairs:
    """Copy the source's pairs documents (each its path there and its entry, `file` still to be named) byte for
    byte into the run and write the index naming them and the carried `nodes`."""
    base = folder.pairs_path.parent
    base.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, (path, entry) in enumerate(files):
        target = base / layout.CARRIED_PAIRS_FILE.format(i)
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(path, partial)  # streamed: a fleet's pairs run to gigabytes
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        partial.replace(target)
        entries.append(entry.model_copy(update={"file": target.name}))
    index = CarriedPairs(run=run, measured_in=measured_in, nodes=tuple(nodes), files=tuple(entries))
    write_json(_index(folder), index.to_json())
    return index
