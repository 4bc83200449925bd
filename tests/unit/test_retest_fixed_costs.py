"""What a re-test pays per carried node outside the rules (issue 28): each cut keeps its behaviour, and the work
it removed does not come back (a count that grew with the fleet grows no more)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpucert.acceptance.retest import Source, prepare_retest
from gpucert.plan.inventory import Inventory, Node
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.simulated_fleet import Nodes
from tests.unit.test_retest import SameNodes, evidence, source, stack
from tests.unit.test_simulated_fabric import NODES, PLAN, target


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


def _retest(tmp_path: Path, nodes: int, fsyncs: list[int]) -> tuple[RunFolder, Source]:
    names = [f"n{i}" for i in range(1, nodes + 1)]
    src = source(tmp_path / str(nodes), dict.fromkeys(names, "pass"))
    src.folder.envelope_path.write_text("{}")
    folder = RunFolder(tmp_path / str(nodes) / "run2")
    folder.path.mkdir()
    folder.write_stack(stack(dict.fromkeys(names, "570.124.06")))
    spec = SimpleNamespace(
        acceptance=SimpleNamespace(max_evidence_age_s=None, max_evidence_age=None),
        certify=SimpleNamespace(dcgm=SimpleNamespace(level=1)),
        pools=[],  # no fabric: no pairs to carry
    )
    inventory = Inventory("simulated", tuple(Node(n, 2, "H100", 2, True) for n in names))
    fsyncs.clear()  # those of the re-test's preparation alone
    assert prepare_retest(cast(Any, SameNodes()), inventory, cast(Any, spec), folder, src) == {}
    return folder, src


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
