"""A re-test's fabric pairs: which of the source run's pairs documents it carries, and the check `verify` makes of
them (plan/carried_pairs.py reads them; plan/pairs.py `retest_rounds` says which pairs are measured again).

Pairs are carried only where they still answer what the spec asks: the source signed them, and every pool's
fabric declaration (rails, link layer, rated speed, ...) is the one the source was measured under; otherwise the
re-test measures every pair again. Touches the run folders through RunFolder and plan/carried_pairs.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from gpucert.errors import EvidenceError
from gpucert.plan.carried_pairs import CarriedPairs, CarriedPairsFile, carried_file, carry_files, read_carried
from gpucert.plan.records import RetestRecord
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import ClusterSpec, load_spec

__all__ = ["carried_pairs_problems", "carry_pairs"]


def _name(folder: RunFolder, path: Path) -> str:
    return path.resolve().relative_to(folder.path.resolve()).as_posix()


def _same_fabrics(source: RunFolder, spec: ClusterSpec) -> bool:
    then = load_spec(source.spec_copy)
    return {p.name: p.fabric for p in then.pools} == {p.name: p.fabric for p in spec.pools}


def carry_pairs(
    source: RunFolder, run: str, signed: dict[str, str], spec: ClusterSpec, folder: RunFolder, nodes: list[str]
) -> CarriedPairs | None:
    """Carry the source run's pairs documents (its own pairs.json and those it carried itself), byte for byte, for
    the carried `nodes`; None (every pair measured again) when the spec declares no fabric, the source has no
    signed pairs, or a pool's fabric declaration changed since the source."""
    if not nodes or not any(p.fabric is not None for p in spec.pools) or not _same_fabrics(source, spec):
        return None
    files: list[tuple[Path, CarriedPairsFile]] = []
    own = _name(source, source.pairs_path) if source.pairs_path.is_file() else None
    if own is not None and own in signed:
        files.append((source.pairs_path, CarriedPairsFile(file="", source=own, sha256=signed[own])))
    before = read_carried(source)  # a re-test of a re-test: what the source carried, for the nodes it held there
    if before is not None:
        for entry in before.files:
            path = carried_file(source, entry)
            name = _name(source, path)
            held = set(before.nodes) & set(entry.nodes if entry.nodes is not None else before.nodes)
            if name in signed:
                carried = CarriedPairsFile(file="", source=name, sha256=signed[name], nodes=tuple(sorted(held)))
                files.append((path, carried))
    if not files:
        return None
    return carry_files(folder, run, nodes, files)


def _sha256(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink():
        return None
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def carried_pairs_problems(folder: RunFolder, record: RetestRecord, signed: dict[str, str]) -> list[str]:
    """Problems with a re-test's carried pairs: each document is, byte for byte, what the source run signed under
    its name there, and the pairs are carried for exactly the nodes the re-test carried. [] for none carried."""
    try:
        index = read_carried(folder)
    except EvidenceError as exc:
        return [f"carried: {exc}"]
    if index is None:
        return []
    problems = []
    if index.run != record.source.run:
        problems.append(f"carried: the pairs are carried from {index.run}, the re-test's source is {record.source.run}")
    if set(index.nodes) != set(record.carried):
        odd = sorted(set(index.nodes) ^ set(record.carried))
        problems.append(f"carried: the pairs are carried for other nodes than the re-test carried ({', '.join(odd)})")
    for entry in index.files:
        try:
            path = carried_file(folder, entry)
        except EvidenceError as exc:
            problems.append(f"carried: {exc}")
            continue
        actual = _sha256(path)
        if actual is None or actual != signed.get(entry.source) or actual != entry.sha256:
            problems.append(
                f"carried: evidence/multinode/{entry.file} is not the pairs document run {index.run} signed as "
                f"{entry.source} (sha256 {(actual or 'missing')[:16]}..., signed "
                f"{str(signed.get(entry.source))[:16]}...): swapped or altered"
            )
    return problems
