"""Recorded evidence: a run folder given to be re-evaluated (`--evidence DIR`), found, checked like any input, and
copied into the new run folder that judges it. Links and files gpucert did not write are refused: a re-evaluation
reads nothing from outside the recorded folder.
"""

from __future__ import annotations

import shutil
from itertools import chain
from pathlib import Path

from gpucert.errors import EvidenceError
from gpucert.plan.carried_pairs import iter_carried
from gpucert.plan.pairs_files import iter_pairs
from gpucert.plan.records import read_run_info
from gpucert.plan.rings import read_domain_rings, read_rings
from gpucert.plan.runfolder import Mode, RunFolder

__all__ = ["import_evidence", "recorded_mode", "recorded_run"]


def recorded_mode(recorded: RunFolder | None) -> Mode:
    """The mode of a recorded run, from its run.json; a run folder from before run.json named its mode is what its
    contents show (a recertification record, else a certification)."""
    assert recorded is not None
    try:
        return recorded.mode
    except EvidenceError:
        if read_run_info(recorded).mode is not None:
            raise
        return Mode.RECERTIFY if recorded.recertify_path.exists() else Mode.MEASURE


def recorded_run(source: Path) -> RunFolder:
    """The run folder holding recorded evidence given as the folder or its evidence/ folder."""
    try:
        src = source.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise EvidenceError(f"cannot open: {exc}", path=source) from None
    if not src.is_dir():
        raise EvidenceError("--evidence needs a run folder or its evidence/ folder, got a file", path=src)
    folder = RunFolder(src.parent if src == RunFolder(src.parent).evidence_dir else src)
    if not folder.measured or not folder.prepared:
        raise EvidenceError("not a gpucert run folder (expected inventory.json, stack.json and evidence/)", path=src)
    return folder


def _copy_regular(src: Path, dst: Path) -> None:
    """Copy a file or a folder of files; a link or anything else that is not a plain file or folder is refused,
    so recorded evidence cannot pull in a file from outside its folder."""
    if src.is_symlink() or not (src.is_file() or src.is_dir()):
        raise EvidenceError("not a plain file or folder (links are refused in recorded evidence)", path=src)
    if src.is_file():
        shutil.copy2(src, dst)
        return
    dst.mkdir()
    for child in sorted(src.iterdir()):
        _copy_regular(child, dst / child.name)


def _check_recorded(folder: RunFolder) -> None:
    """Recorded evidence is an input like a spec: every document must be one gpucert wrote, of the node it is
    named for, or the re-evaluation stops with the file named (EvidenceError, exit 2)."""
    folder.read_inventory()
    folder.read_stack()
    read_rings(folder)
    read_domain_rings(folder)
    for _ in chain(iter_carried(folder), iter_pairs(folder.pairs_path.parent)):
        pass  # every pairs document read and let go (a fleet's do not fit in memory); a re-test's carried ones
        # too (carried.json without a re-test record: an error)
    for path in sorted(folder.evidence_dir.iterdir()):
        if path == folder.pairs_path.parent:
            continue
        if path.suffix != ".json" or not path.is_file():
            raise EvidenceError("not an evidence document (evidence/ holds <node>.json and multinode/)", path=path)
        try:
            folder.read_evidence(path.stem)
        except EvidenceError as exc:
            raise EvidenceError(exc.message, path=path) from None  # the file named once


def import_evidence(source: Path, folder: RunFolder) -> None:
    """Copy recorded evidence (a run folder, or its evidence/ folder) into a new run folder for re-evaluation."""
    recorded = recorded_run(source)
    try:
        for src, dst in ((recorded.inventory_path, folder.inventory_path), (recorded.stack_path, folder.stack_path)):
            if not src.exists():
                raise EvidenceError(f"missing {src.name}; pass a complete run folder", path=recorded.path)
            _copy_regular(src, dst)
        _copy_regular(recorded.evidence_dir, folder.evidence_dir)
        if recorded.retest_dir.is_dir():  # a re-test's run: where its carried evidence came from comes along
            _copy_regular(recorded.retest_dir, folder.retest_dir)
        _check_recorded(folder)  # after retest/: carried pairs are believed only as far as its record bears out
        if recorded.history_copy.exists():  # the history its GPUs were held to (drift.<metric>) comes along
            folder.history_copy.parent.mkdir(parents=True, exist_ok=True)
            _copy_regular(recorded.history_copy, folder.history_copy)
        # a recertification's run: what the node was compared with comes along, so it re-evaluates the same
        if recorded.recertify_path.exists():
            _copy_regular(recorded.recertify_path, folder.recertify_path)
            if recorded.fleet_dir.is_dir():
                _copy_regular(recorded.fleet_dir, folder.fleet_dir)
            if recorded.handover_copy.exists():
                _copy_regular(recorded.handover_copy, folder.handover_copy)
        folder.check()
    except EvidenceError as exc:
        shutil.rmtree(folder.evidence_dir, ignore_errors=True)  # nothing was measured: the run folder goes
        shutil.rmtree(folder.retest_dir, ignore_errors=True)
        raise EvidenceError(str(exc).replace(str(folder.path), str(recorded.path))) from None  # the user's file
