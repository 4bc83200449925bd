"""Evidence kept compact in memory (issue 28): samples as read-only float64 arrays, what repeats in every document
shared. The same evidence decides every check exactly as when its samples were lists of floats, and reads back to
the bytes on disk (the contract `gpucert.io/evidence/v1` does not change)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import BaseModel

from gpucert.evaluate.evaluation import Evaluation
from gpucert.measure import evidence as evidence_module
from gpucert.measure.evidence import NodeEvidence, read_evidence
from gpucert.measure.evidence_base import SampleArray
from gpucert.plan import run as runner
from gpucert.plan.checks import CheckStatus, Finding
from gpucert.plan.layout import Mode
from gpucert.plan.runfolder import RunFolder

from .conftest import fleet_doc, spec_doc

FAULTS = [
    {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.93},
    {"kind": "slow", "node": "gpu-node-1", "gpu": 6, "metric": "p2p.bandwidth", "factor": 0.7},
    {"kind": "slow", "node": "gpu-node-3", "metric": "nccl.all_reduce", "factor": 0.8},
    {
        "kind": "intermittent",
        "node": "gpu-node-4",
        "gpu": 6,
        "metric": "memory.bandwidth",
        "factor": 0.7,
        "fraction": 0.3,
    },
    {"kind": "ecc", "node": "gpu-node-1", "gpu": 5, "uncorrected": 2},
    {"kind": "unreachable", "node": "gpu-node-6"},
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    project = tmp_path_factory.mktemp("compact")
    (project / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(FAULTS, nodes=6)))
    doc = spec_doc()
    doc["expect"]["nodes"] = 6
    (project / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec, _ = runner.load_inputs(project / "spec.yaml")
    return runner.prepare(spec, project / "reports", Mode.MEASURE)


def _as_lists(item: Any) -> Any:
    """The document as evidence was held before (issue 28): every sample list a list of floats, nothing shared."""
    if isinstance(item, BaseModel):
        for key, value in item.__dict__.items():
            item.__dict__[key] = _as_lists(value)
        object.__setattr__(item, "__pydantic_fields_set__", set(item.__pydantic_fields_set__))
        return item
    if isinstance(item, SampleArray):
        return item.array.tolist()
    if isinstance(item, list):
        return [_as_lists(v) for v in item]
    if isinstance(item, dict):
        return {k: _as_lists(v) for k, v in item.items()}
    return item


def _decide_all(run: RunFolder) -> list[Finding]:
    ev = Evaluation.from_run(run)
    return [ev.decide(key) for key in ev.plan.required]


def test_the_same_evidence_decides_every_check_as_with_lists_of_floats(
    run: RunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence_module._VALIDATED.clear()
    compact = _decide_all(run)
    evidence_module._VALIDATED.clear()
    monkeypatch.setattr(evidence_module, "compact", _as_lists)
    before = _decide_all(run)
    evidence_module._VALIDATED.clear()
    assert compact == before
    failed = {(f.check, f.node, f.gpu) for f in compact if f.status is CheckStatus.FAIL}
    # the comparison is over a fleet that fails: a straggler among its peers, an unstable GPU, figures off baseline
    assert failed == {
        ("straggler.memory.bandwidth", "gpu-node-2", 3),
        ("p2p.bandwidth", "gpu-node-1", 6),
        ("nccl.all_reduce", "gpu-node-3", None),
        ("stability.memory.bandwidth", "gpu-node-4", 6),
        ("health.ecc", "gpu-node-1", 5),
        ("node.reachable", "gpu-node-6", None),
    }


def test_evidence_reads_back_to_its_bytes_with_samples_as_read_only_arrays(run: RunFolder) -> None:
    files = [p for p in run.evidence_files() if p.stem != "gpu-node-6"]
    docs = [read_evidence(p) for p in files]
    for path, doc in zip(files, docs, strict=True):
        assert doc.model_dump_json(by_alias=True) == path.read_text()  # the contract on disk, byte for byte
    samples = docs[0].gpus[0].measurements["memory.bandwidth"].samples
    assert isinstance(samples, SampleArray)
    assert samples.array.dtype == np.float64
    with pytest.raises(ValueError, match="read-only"):
        samples.array[0] = 0.0
    assert docs[0].nccl is not None
    busbw = docs[0].nccl.points[-1].busbw
    assert isinstance(busbw, SampleArray)
    assert len(busbw) > 0
    # what repeats in every document is held once: the record of the fields each GPU's document gave
    assert docs[0].gpus[0].__pydantic_fields_set__ is docs[1].gpus[3].__pydantic_fields_set__


def test_a_node_of_evidence_is_held_in_under_half_the_memory_of_lists_of_floats(run: RunFolder) -> None:
    files = [p for p in run.evidence_files() if p.stem != "gpu-node-6"]

    def held(read: Any) -> float:
        evidence_module._VALIDATED.clear()
        gc.collect()
        tracemalloc.start()
        docs = [read(p) for p in files]
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(docs) == len(files)
        return size / len(files)

    compact = held(read_evidence)
    lists = held(lambda p: _as_lists(NodeEvidence.model_validate_json(p.read_bytes())))
    assert compact < lists / 2, (compact, lists)
