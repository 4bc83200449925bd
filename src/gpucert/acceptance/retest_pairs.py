"""A re-test's fabric pairs: which of the source run's pairs documents it carries, and the check `verify` makes of
them (plan/carried_pairs.py reads them; plan/pairs.py `retest_rounds` says which pairs are measured again, and
plan/carried_pairs.py `carried_neighbours` which pairs of neighbours, for pools without a fabric section).

Pairs are carried only where they still answer what the spec asks: the source signed them, every pool's fabric
declaration (rails, link layer, rated speed, ...) is the one the source was measured under, and, for a spec with a
pool without a fabric section (its pairs are the neighbours on its ring), the rings are drawn as they were
(certify.multinode, target.gang.topologyKey); otherwise the re-test measures every pair again.
Touches the run folders through RunFolder and plan/carried_pairs.py.
"""

from __future__ import annotations

from pathlib import Path

from gpucert.errors import EvidenceError
from gpucert.plan.carried_pairs import (
    CarriedPairs,
    CarriedPairsFile,
    carried_file,
    carried_nodes,
    carry_files,
    measured_since,
    read_carried,
)
from gpucert.plan.pairs_files import pairs_files
from gpucert.plan.records import RetestRecord
from gpucert.plan.runfolder import RunFolder
from gpucert.report.attest import sha256_file
from gpucert.spec.cluster import ClusterSpec, load_spec
from gpucert.spec.kubernetes import topology_key

__all__ = ["carried_pairs_problems", "carry_pairs"]


def _name(folder: RunFolder, path: Path) -> str:
    return path.resolve().relative_to(folder.path.resolve()).as_posix()


def _same_pairs(source: RunFolder, spec: ClusterSpec) -> bool:
    """Whether the source's pairs answer the re-test's spec: every pool's fabric declaration as it was, and, where
    a pool has no fabric section (its pairs are the neighbours on its ring), the rings drawn as they were
    (the same certify.multinode: pairs, maxNodes, ...; the same topology key)."""
    then = load_spec(source.spec_copy)
    if {p.name: p.fabric for p in then.pools} != {p.name: p.fabric for p in spec.pools}:
        return False
    if all(p.fabric is not None for p in spec.pools):
        return True  # no pool's pairs are its ring's neighbours
    return then.certify.multinode == spec.certify.multinode and topology_key(then.target) == topology_key(spec.target)


def carry_pairs(
    source: RunFolder, run: str, signed: dict[str, str], spec: ClusterSpec, folder: RunFolder, nodes: list[str]
) -> CarriedPairs | None:
    """Carry the source run's pairs documents byte for byte, for those of the carried `nodes` whose pairs with each
    other the source holds whole: a full run's every node (its round documents, one by one, or an older run's one
    pairs.json), a re-test's nodes whose pairs it carried (the documents it carried; a node it measured again met
    only RETEST_PEERS peers there, so its pairs are measured again now, even where its own evidence is carried).
    A spec without a fabric section carries its pairs of neighbours the same way (the fabric stage then measures
    the neighbours' pairs the carried ones do not hold: plan/carried_pairs.py `carried_neighbours`). None (every
    pair measured again) when a pool's fabric declaration changed since the source, a spec without a fabric
    section draws its rings otherwise than the source did, or the source did not sign the documents."""
    if not nodes:
        return None
    before = read_carried(source)
    if before is None:
        paths, measured_in = pairs_files(source.pairs_path.parent), run
    else:
        held = carried_nodes(source)  # as far as the source's re-test record bears its carried.json out
        nodes = [n for n in nodes if n in held]
        paths, measured_in = [carried_file(source, entry) for entry in before.files], before.measured_in
    names = [_name(source, path) for path in paths]
    if not paths or not nodes or any(name not in signed for name in names) or not _same_pairs(source, spec):
        return None
    entries = [CarriedPairsFile(file="", source=name, sha256=signed[name]) for name in names]
    return carry_files(folder, run, measured_in, nodes, list(zip(paths, entries, strict=True)))


def _stale(index: CarriedPairs, record: RetestRecord) -> list[str]:
    """Nodes whose pairs are carried though the re-test did not carry the node (or measured it again), or though
    the node was measured again after the carried pairs were (its pairs there were against RETEST_PEERS peers, or
    from before a repair): the evaluation holds each to the pairs the re-test measured (carried_pairs `trusted`)."""
    odd = sorted(n for n in index.nodes if n not in record.carried or n in record.measured)
    problems = (
        [f"carried: the pairs of {', '.join(odd)} are carried, yet the re-test did not carry the node"] if odd else []
    )
    later = [
        f"{n} (measured in {c.measured_in})"
        for n in index.nodes
        if (c := record.carried.get(n)) is not None and measured_since(index, c)
    ]
    if later:
        problems.append(
            f"carried: the pairs measured in {index.measured_in} are carried for nodes measured again after them: "
            + ", ".join(later)
        )
    return problems


def carried_pairs_problems(folder: RunFolder, record: RetestRecord, signed: dict[str, str]) -> list[str]:
    """Problems with a re-test's carried pairs: each document is, byte for byte, what the source run signed under
    its name there, and the pairs are carried only for nodes the re-test carried and that were not measured again
    after the pairs were. [] for none carried."""
    try:
        index = read_carried(folder)
    except EvidenceError as exc:
        return [f"carried: {exc}"]
    if index is None:
        return []
    problems = []
    if index.run != record.source.run:
        problems.append(f"carried: the pairs are carried from {index.run}, the re-test's source is {record.source.run}")
    problems += _stale(index, record)
    for entry in index.files:
        try:
            path = carried_file(folder, entry)
        except EvidenceError as exc:
            problems.append(f"carried: {exc}")
            continue
        actual = sha256_file(path) if path.is_file() and not path.is_symlink() else None
        if actual is None or actual != signed.get(entry.source) or actual != entry.sha256:
            problems.append(
                f"carried: evidence/multinode/{entry.file} is not the pairs document run {index.run} signed as "
                f"{entry.source} (sha256 {(actual or 'missing')[:16]}..., signed "
                f"{str(signed.get(entry.source))[:16]}...): swapped or altered"
            )
    return problems
