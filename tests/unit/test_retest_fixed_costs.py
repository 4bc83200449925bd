"""What a re-test pays per carried node outside the rules (issue 28): each cut keeps its behaviour, and the work
it removed does not come back (a count that grew with the fleet grows no more)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpucert.acceptance import retest
from gpucert.acceptance.retest import Source, prepare_retest, read_retest_record
from gpucert.plan import run as runner
from gpucert.plan.inventory import Inventory, Node
from gpucert.plan.runfolder import Mode, RunFolder
from gpucert.spec.cluster import load_spec
from gpucert.spec.simulated_fleet import Nodes
from gpucert.stack.observe import StackObservation
from tests.unit.test_retest import SameNodes, evidence, source, stack
from tests.unit.test_simulated_fabric import NODES, PLAN, ROOT, target


def test_the_simulated_fleet_lists_its_node_names_once_not_per_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = target(tmp_path)
    calls: list[int] = []
    names = Nodes.names
    monkeypatch.setattr(Nodes, "names", lambda self: calls.append(1) or names(self))
    for node in NODES:  # each node's measurement asks for its group (its fabric, its rack) several times
        t.measure_node(node, PLAN)
        assert t.fleet.fabric_of(node) is t.fleet.fabric
    assert calls == []  # the fleet's map of nodes to groups was built when it was loaded, once


def _prepare(tmp_path: Path, src: Source, names: list[str], fsyncs: list[int] | None = None) -> RunFolder:
    """A re-test of `src`'s nodes that all pass there and answer the identity read as they were measured."""
    src.folder.envelope_path.write_text("{}")
    folder = RunFolder(src.folder.path.parent / "run2")
    folder.path.mkdir()
    folder.write_stack(stack(dict.fromkeys(names, "570.124.06")))
    spec = SimpleNamespace(
        acceptance=SimpleNamespace(max_evidence_age_s=None, max_evidence_age=None),
        certify=SimpleNamespace(dcgm=SimpleNamespace(level=1)),
        pools=[],  # no fabric: no pairs to carry
    )
    inventory = Inventory("simulated", tuple(Node(n, 2, "H100", 2, True) for n in names))
    if fsyncs is not None:
        fsyncs.clear()  # those of the re-test's preparation alone
    assert prepare_retest(cast(Any, SameNodes()), inventory, cast(Any, spec), folder, src) == {}
    return folder


def _retest(tmp_path: Path, nodes: int, fsyncs: list[int]) -> tuple[RunFolder, Source]:
    names = [f"n{i}" for i in range(1, nodes + 1)]
    src = source(tmp_path / str(nodes), dict.fromkeys(names, "pass"))
    return _prepare(tmp_path, src, names, fsyncs), src


def test_a_retest_makes_its_carried_copies_and_identities_durable_with_one_sync_not_two_fsyncs_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The carried copies are signed files of the source (a crash loses nothing that cannot be copied again) and
    the identity documents are read again by a re-test run again: written atomically without an fsync each, then
    one sync before the record that names them (at 1,024 nodes, 4,116 fsyncs were 0.8 s of CPU and ~8 s of wall)."""
    fsyncs: list[int] = []
    syncs: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or fsync(fd))
    monkeypatch.setattr(os, "sync", lambda: syncs.append(1))
    counts = {}
    for nodes in (2, 6):
        folder, src = _retest(tmp_path, nodes, fsyncs)
        counts[nodes] = len(fsyncs)
        for n in (f"n{i}" for i in range(1, nodes + 1)):
            assert folder.evidence_path(n).read_bytes() == src.folder.evidence_path(n).read_bytes()
            assert folder.read_identity(n) == evidence(n)
    assert counts[2] == counts[6]  # the record's and the source's records' own fsyncs, none a carried node
    assert syncs == [1, 1]  # one sync a re-test
    assert not list(tmp_path.rglob(".*.tmp"))


def test_a_carried_nodes_digest_is_the_one_its_source_signed_not_a_second_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open_source found every signed file to match its digest moments before: the provenance names that digest
    instead of reading and hashing each carried file again (a file signed by no digest is still hashed)."""
    hashed: list[Path] = []
    digest = retest._sha256
    monkeypatch.setattr(retest, "_sha256", lambda path: hashed.append(path) or digest(path))
    src = source(tmp_path, {"n1": "pass", "n2": "pass"})
    signed = {"evidence/n1.json": digest(src.folder.evidence_path("n1"))}
    folder = _prepare(tmp_path, replace(src, signed=signed), ["n1", "n2"])
    record = read_retest_record(folder)
    assert record is not None
    assert record.carried["n1"].sha256 == signed["evidence/n1.json"]
    assert record.carried["n2"].sha256 == digest(src.folder.evidence_path("n2"))
    assert [p.name for p in hashed] == ["n2.json"]  # not n1's: its signed digest was taken
    assert folder.evidence_path("n1").read_bytes() == src.folder.evidence_path("n1").read_bytes()


def test_the_one_sync_comes_before_the_record_that_names_the_carried_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copies, identities and the source's records are written without an fsync each: what makes them durable is
    that the sync runs before the re-test record is written (a crash then leaves either no record, or a record whose
    files are on the disk). A sync moved after the record, or dropped, would pass a count of syncs; not this."""
    seen: list[tuple[bool, list[str]]] = []
    names = ["n1", "n2"]
    src = source(tmp_path, dict.fromkeys(names, "pass"))
    folder = RunFolder(src.folder.path.parent / "run2")

    def sync() -> None:  # what is on the folder when the sync runs
        written = sorted(p.relative_to(folder.path).as_posix() for p in folder.path.rglob("*.json"))
        seen.append((folder.retest_record_path.exists(), written))

    monkeypatch.setattr(os, "sync", sync)
    assert _prepare(tmp_path, src, names).path == folder.path
    assert folder.retest_record_path.exists()
    ((record_then, written),) = seen  # one sync
    assert not record_then  # the record is written after it
    for node in names:  # its carried copy, already whole in the folder
        assert f"evidence/{node}.json" in written
    assert "retest/identity.json" in written  # the identities, one document


def test_a_retest_hands_the_stack_its_plan_wrote_on_instead_of_reading_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan writes stack.json and hands the stack it wrote to the re-test's choice and to the measurement: the
    new run's stack.json is read back by neither (at 1,024 nodes two reads of ~0.03 s each), and what they are
    handed is what a read would give."""
    handed: list[StackObservation | None] = []

    def prepare(*args: Any, stack: StackObservation | None = None) -> dict[str, str]:
        handed.append(stack)
        return {"gpu-node-1": "did not pass"}  # measured again: measure() places it by the stack's labels

    monkeypatch.setattr(retest, "prepare_retest", prepare)
    reads: list[Path] = []
    read_stack = RunFolder.read_stack
    monkeypatch.setattr(RunFolder, "read_stack", lambda self: reads.append(self.path) or read_stack(self))
    spec = load_spec(ROOT / "examples" / "clean.yaml")
    source = SimpleNamespace(evidence=lambda node: None)  # no carried node offers its GPUs to the rings
    folder = runner.prepare(spec, tmp_path / "reports", Mode.RETEST, source=cast(Any, source))
    assert reads == []
    assert handed == [folder.read_stack()]
    assert [p.stem for p in folder.evidence_files()] == ["gpu-node-1"]


def test_a_retest_writes_its_identity_reads_as_one_document_not_a_file_a_node(tmp_path: Path) -> None:
    """A new file is the file system's most costly write (at 1,024 nodes one identity file a node was 0.1 to 0.8 s
    of CPU as the machine was loaded): the identities read are one document whatever the fleet's size, each node's
    identity in it."""
    made = {}
    for nodes in (2, 6):
        folder, _ = _retest(tmp_path, nodes, [])
        made[nodes] = sorted(p.relative_to(folder.retest_dir).as_posix() for p in folder.retest_dir.rglob("*"))
        assert [ev.node for ev in folder.read_identities()] == [f"n{i}" for i in range(1, nodes + 1)]
    assert made[2] == made[6]
    assert "identity.json" in made[2]
