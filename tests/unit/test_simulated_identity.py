"""The simulated target's identity read (issue 28: a re-test pays for what it re-measures): a re-test reads each node
it may carry for its identity alone, not a whole simulated node's health and figures. The identity is the one the
node's measurement shows (the fleet as it is NOW: a board swapped since the source is a change), and a node no probe
reaches answers as its measurement would."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpucert.acceptance.retest import IdentityTarget, identity_change, prepare_retest, read_retest_record
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets.base import EvidenceSink, MeasurePlan
from gpucert.measure.targets.simulated import SimulatedTarget, probes
from gpucert.plan.inventory import Inventory, Node
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.cluster import Probe
from tests.unit.test_retest import evidence, source, stack
from tests.unit.test_simulated_fabric import NODES, PLAN, target

FULL = MeasurePlan("r", tuple(Probe), 2)
FAULTS: list[dict[str, Any]] = [
    {"kind": "swapped-gpu", "node": "gpu-node-1", "gpu": 3},
    {"kind": "missing-gpu", "node": "gpu-node-2", "gpu": 5},
    {"kind": "version", "node": "gpu-node-3", "component": "driver", "version": "575.51.03"},
    {"kind": "unreachable", "node": "gpu-node-4"},
    {"kind": "preflight", "node": "gpu-node-5", "step": "nvml"},
    {"kind": "ecc", "node": "gpu-node-6", "gpu": 1, "uncorrected": 2},
    {"kind": "slow", "node": "gpu-node-7", "gpu": 0, "metric": "memory.bandwidth", "factor": 0.8},
]


def named(ev: NodeEvidence) -> dict[str, Any]:
    """What a node's identity is: whether it answered and why not, its driver, and each GPU as NVML names it."""
    fields = ("index", "uuid", "serial", "pci_bus_id", "product", "memory_mib", "vbios")
    return {
        "collected": ev.collected,
        "errors": [e.message for e in ev.errors],
        "driver": ev.system.driver_version,
        "cuda": ev.system.cuda_driver_version,
        "gpus": [{f: getattr(g, f) for f in fields} for g in ev.gpus],
    }


def test_the_identity_read_names_every_node_as_its_measurement_does(tmp_path: Path) -> None:
    t = target(tmp_path, FAULTS)
    for node in NODES:
        measured = t.measure_node(node, FULL)
        read = t.identity(node, PLAN)
        assert named(read) == named(measured), node
        if measured.collected:
            assert identity_change(measured, read) is None
        else:  # not Ready, or a failed preflight: not read now either, so measured again (fail closed)
            assert identity_change(measured, read) is not None
    assert len(t.identity("gpu-node-2", PLAN).gpus) == 7


def test_the_identity_read_is_the_identity_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No NVML readings, figures or fabric are drawn to be thrown away: the re-test compares the identity alone."""
    t = target(tmp_path, FAULTS)

    def drawn(*_: object) -> None:
        raise AssertionError("the identity read drew a GPU's health")

    monkeypatch.setattr(probes, "nvml_health", drawn)
    seen: list[NodeEvidence] = []
    assert isinstance(t, IdentityTarget)
    t.read_identities(["gpu-node-1", "gpu-node-6", "gpu-node-7"], PLAN, seen.append)
    assert [ev.node for ev in seen] == ["gpu-node-1", "gpu-node-6", "gpu-node-7"]
    for ev in seen:
        assert ev.collected
        assert (ev.fabric, ev.p2p, ev.nccl, ev.dcgm) == (None, None, None, None)
        assert all(g.health is None and not g.measurements for g in ev.gpus)


def test_a_board_swapped_since_the_source_is_a_change(tmp_path: Path) -> None:
    """The fleet file is the world: the identity is read from it now, not from what the source measured."""
    then = target(tmp_path).measure_node("gpu-node-1", FULL)
    now: SimulatedTarget = target(tmp_path, [{"kind": "swapped-gpu", "node": "gpu-node-1", "gpu": 3}])
    why = identity_change(then, now.identity("gpu-node-1", PLAN))
    assert why is not None
    assert why.startswith("changed: gpu3 serial ")
    assert "gpu3 UUID" in why
    assert identity_change(then, target(tmp_path).identity("gpu-node-1", PLAN)) is None
    upgraded = target(tmp_path, [{"kind": "version", "node": "gpu-node-1", "component": "driver", "version": "575.1"}])
    assert identity_change(then, upgraded.identity("gpu-node-1", PLAN)) == "changed: driver 570.124.06 -> 575.1"


class ReadsIdentities:
    """A target that reads identities alone (n2's board was swapped) and must not be measured for them."""

    def read_identities(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        assert plan.probes == (Probe.HEALTH,)
        for n in nodes:
            sink(evidence(n, serial="replacement") if n == "n2" else evidence(n))

    def measure(self, nodes: list[str], plan: MeasurePlan, sink: EvidenceSink) -> None:
        raise AssertionError("measured a whole node to read its identity")


def test_a_retest_reads_identities_alone_where_the_target_can(tmp_path: Path) -> None:
    names = ["n1", "n2", "n3"]
    src = source(tmp_path, dict.fromkeys(names, "pass"))
    src.folder.envelope_path.write_text("{}")
    folder = RunFolder(tmp_path / "run2")
    folder.path.mkdir()
    folder.write_stack(stack(dict.fromkeys(names, "570.124.06")))
    spec = SimpleNamespace(
        acceptance=SimpleNamespace(max_evidence_age_s=None, max_evidence_age=None),
        certify=SimpleNamespace(dcgm=SimpleNamespace(level=1)),
        pools=[],
    )
    inventory = Inventory("simulated", tuple(Node(n, 2, "H100", 2, True) for n in names))
    again = prepare_retest(cast(Any, ReadsIdentities()), inventory, cast(Any, spec), folder, src)
    assert again == {"n2": "changed: gpu1 serial n2-1 -> replacement"}
    record = read_retest_record(folder)
    assert record is not None
    assert sorted(record.carried) == ["n1", "n3"]
    assert folder.read_identity("n2") == evidence("n2", serial="replacement")


def test_a_boards_uuid_is_spelled_as_uuid_spells_it(tmp_path: Path) -> None:
    """The board's UUID is spelled from its digest by hand (a third of uuid.UUID's cost): the same canonical form,
    GPU-8-4-4-4-12 lower-case hex digits, as str(uuid.UUID(...)) gives, for a swapped board's too."""
    t = target(tmp_path, FAULTS)
    boards = [g.uuid for node in NODES for g in t.identity(node, PLAN).gpus]
    assert len(set(boards)) == len(boards) > 100
    for board in boards:
        assert board == f"GPU-{uuid.UUID(board.removeprefix('GPU-'))}"
