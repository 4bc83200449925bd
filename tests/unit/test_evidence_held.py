"""A node's evidence held by its head (measure/evidence_held.py) answers as the whole document's NodeEvidence does:
its head's fields at once, any other field by reading the document, and every pydantic method that reads the fields
wholesale only after reading it (pydantic 2.x BaseModel: model_dump, model_dump_json, __eq__, __repr_args__,
__iter__, __copy__, __deepcopy__, __getstate__ and the pickle hooks read `__dict__` directly, pydantic/main.py)."""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import pickle
from pathlib import Path

import pytest
from pydantic import BaseModel

from gpucert.errors import EvidenceError
from gpucert.measure.evidence import NodeEvidence, evidence_target, read_evidence, write_document
from gpucert.measure.evidence_held import (
    HEAVY_GPU,
    HEAVY_NODE,
    WHOLE,
    HeldEvidence,
    head_of,
    held,
    is_held,
)
from gpucert.measure.targets.base import MeasurePlan
from gpucert.spec.cluster import Probe
from tests.unit.test_simulated_fabric import target

# BaseModel's methods that read no field, or read fields one by one by name (so a held model's __getattr__ loads):
# anything else BaseModel defines must be in WHOLE (or be __eq__, which a held model defines itself)
BY_NAME = {
    "__init__", "__new__", "__setattr__", "__delattr__", "__getattr__", "__class_getitem__", "__init_subclass__",
    "__get_pydantic_core_schema__", "__get_pydantic_json_schema__", "__pydantic_init_subclass__", "__setstate__",
    "__pretty__", "__repr__", "__str__", "__repr_name__", "__repr_str__", "__rich_repr__", "__repr_recursion__",
    "__fields__", "__fields_set__", "__replace__", "__pydantic_on_complete__",
    "model_construct", "model_validate", "model_validate_json", "model_validate_strings", "model_json_schema",
    "model_parametrized_name", "model_post_init", "model_rebuild", "model_fields", "model_computed_fields",
    "model_extra", "model_fields_set", "copy", "dict", "json", "parse_obj", "parse_raw", "parse_file", "from_orm",
    "construct", "schema", "schema_json", "validate", "update_forward_refs", "_iter", "_copy_and_set_values",
    "_get_value", "_calculate_keys", "_setattr_handler", "__sizeof__", "__dir__", "__format__",
    "__ge__", "__gt__", "__le__", "__lt__", "__ne__", "__subclasshook__", "__getattribute__",
}  # fmt: skip


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NodeEvidence]:
    """One simulated node's whole document (every probe: health, samples, P2P, DCGM), written as a run writes it."""
    work = tmp_path_factory.mktemp("held")
    ev = target(work).measure_node("gpu-node-1", MeasurePlan("r", tuple(Probe), 2))
    path = write_document(work / "gpu-node-1.json", ev)
    return path, read_evidence(path)


def _held(path: Path, whole: NodeEvidence, load: object = None) -> HeldEvidence:
    head = HeldEvidence.model_validate_json(json.dumps(head_of(whole)))
    digest = hashlib.sha256(path.read_bytes()).digest()
    return held(head, load if load is not None else (lambda: read_evidence(path)), digest)  # type: ignore[arg-type]


def test_every_wholesale_reader_of_pydantic_loads_first() -> None:
    kinds = (classmethod, staticmethod, property)
    defined = {n for n, v in vars(BaseModel).items() if inspect.isroutine(v) or isinstance(v, kinds)}
    unknown = sorted(n for n in defined if n not in BY_NAME and n not in (*WHOLE, "__eq__"))
    assert unknown == [], f"pydantic's BaseModel has methods this module does not know to be safe: {unknown}"
    assert not BY_NAME & set(WHOLE)
    for name in (*WHOLE, "__eq__"):
        assert getattr(HeldEvidence, name) is not getattr(NodeEvidence, name), name


def test_the_head_answers_without_reading_the_document(document: tuple[Path, NodeEvidence]) -> None:
    path, whole = document
    ev = _held(path, whole, load=lambda: pytest.fail("the document was read for a field of its head"))
    assert isinstance(ev, NodeEvidence)
    assert is_held(ev)
    assert (ev.node, ev.finished, ev.collected, ev.errors, ev.nccl) == (
        whole.node,
        whole.finished,
        whole.collected,
        whole.errors,
        whole.nccl,
    )
    assert [(g.index, g.serial, g.uuid, g.vbios, g.pci_bus_id) for g in ev.gpus] == [
        (g.index, g.serial, g.uuid, g.vbios, g.pci_bus_id) for g in whole.gpus
    ]
    assert head_of(ev) == head_of(whole)
    assert is_held(ev)
    assert evidence_target(path) == whole.target  # by its head, not the document's JSON


@pytest.mark.parametrize("field", [*HEAVY_NODE, *(f"gpu.{n}" for n in HEAVY_GPU)])
def test_a_heavy_field_reads_the_document(document: tuple[Path, NodeEvidence], field: str) -> None:
    path, whole = document
    ev = _held(path, whole)
    if field.startswith("gpu."):
        name = field.removeprefix("gpu.")
        assert getattr(ev.gpus[1], name) == getattr(whole.gpus[1], name)
    else:
        assert getattr(ev, field) == getattr(whole, field)
    assert not is_held(ev)
    assert all(
        g.health == w.health and g.measurements == w.measurements for g, w in zip(ev.gpus, whole.gpus, strict=True)
    )


@pytest.mark.parametrize(
    "use",
    [
        lambda ev: ev.model_dump(by_alias=True),
        lambda ev: ev.model_dump_json(by_alias=True),
        lambda ev: repr(ev),
        lambda ev: dict(ev),
        lambda ev: copy.deepcopy(ev).model_dump(),
        lambda ev: copy.copy(ev).model_dump(),
        lambda ev: pickle.loads(pickle.dumps(ev)).model_dump(),
        lambda ev: ev.model_copy().model_dump(),
        lambda ev: ev.gpus[0].model_dump(),
        lambda ev: repr(ev.gpus[0]),
    ],
    ids=["dump", "dump_json", "repr", "iter", "deepcopy", "copy", "pickle", "model_copy", "gpu_dump", "gpu_repr"],
)
def test_a_wholesale_reader_sees_the_document(document: tuple[Path, NodeEvidence], use: object) -> None:
    path, whole = document
    ev = _held(path, whole)
    said = use(ev)  # type: ignore[operator]
    plain = use(whole)  # type: ignore[operator]
    assert str(said).replace("HeldEvidence", "NodeEvidence").replace("HeldGpu", "GpuEvidence") == str(plain)
    assert not is_held(ev)


def test_equal_to_the_document_both_ways(document: tuple[Path, NodeEvidence]) -> None:
    path, whole = document
    assert _held(path, whole) == whole
    assert whole == _held(path, whole)
    assert _held(path, whole).gpus[0] == whole.gpus[0]
    assert _held(path, whole).gpus[0] != whole.gpus[1]
    assert _held(path, whole).model_dump_json(by_alias=True) == path.read_text()  # the fields in the file's order


def test_another_document_is_refused_when_read(document: tuple[Path, NodeEvidence]) -> None:
    path, whole = document
    other = whole.model_copy(update={"node": "gpu-node-2"})
    ev = _held(path, whole, load=lambda: other)
    assert ev.finished == whole.finished  # the head still answers
    with pytest.raises(EvidenceError, match="no longer the document"):
        _ = ev.p2p
    fewer = whole.model_copy(update={"gpus": whole.gpus[:1]})
    with pytest.raises(EvidenceError, match="no longer the document"):
        _ = _held(path, whole, load=lambda: fewer).gpus[0].measurements


def test_the_fields_set_are_the_documents(document: tuple[Path, NodeEvidence]) -> None:
    """pydantic's `model_fields_set` (BaseModel's property: `__pydantic_fields_set__`, pydantic/main.py) is what the
    document gave: its P2P, DCGM and GPUs' health and samples among them, which the head alone does not."""
    path, whole = document
    assert {"p2p", "dcgm"} <= whole.model_fields_set  # the document gives them: the held head does not
    ev = _held(path, whole)
    assert ev.model_fields_set == whole.model_fields_set
    assert not is_held(ev)
    gpu = _held(path, whole).gpus[1]
    assert gpu.model_fields_set == whole.gpus[1].model_fields_set
    assert ev.model_dump(exclude_unset=True) == whole.model_dump(exclude_unset=True)
