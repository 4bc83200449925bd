"""A node's evidence held by its head (issue 28: a re-test pays for what it re-measures).

A re-test compares every carried node with its pool, so every carried node's evidence used to be read and validated
(about 1.5 ms a node at 1,024 x 8: most of a re-test's preparation). Most of each document is its GPUs' health and
samples and its DCGM and P2P results, which a carried node's kept checks never ask again and whose figures its
source run signed (evaluate/held.py). `held` makes a node's NodeEvidence of its head alone: the identity, times,
errors, preflight, NCCL curve and fabric, validated by the same model as the whole document. The heavy fields
(`HEAVY_NODE`, `HEAVY_GPU`) are not there until something reads one: then the whole document is read (by `load`,
validated as any other) and every field of the node and its GPUs is the document's. A reader never sees a heavy
field's default in place of the document's value: a field absent from a model's __dict__ is read through
`__getattr__`, which loads; every pydantic method that reads the fields wholesale (dump, copy, equality, repr,
iteration, pickling) loads first (`WHOLE`), and so does `model_fields_set` (the head was given fewer fields). Not
caught: pydantic-core serialising a held model as a field of another model, or by a TypeAdapter, reads its __dict__
without a call here (dump_python raises KeyError, dump_json leaves the heavy fields out): dump the held model itself.

The head must be the head of the document `load` reads (the caller binds both to one sha256) and validated by this
code: then the head's fields are the document's, and a held node answers as the document's NodeEvidence would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pydantic import Field

from gpucert.errors import EvidenceError
from gpucert.measure.evidence import HEADS, GpuEvidence, NodeEvidence

__all__ = ["HEAD_EXCLUDE", "HEAVY_GPU", "HEAVY_NODE", "WHOLE", "HeldEvidence", "HeldGpu", "head_of", "held", "is_held"]

HEAVY_NODE = ("p2p", "dcgm")
HEAVY_GPU = ("health", "measurements")
HEAD_EXCLUDE: dict[str, Any] = {**dict.fromkeys(HEAVY_NODE, True), "gpus": {"__all__": set(HEAVY_GPU)}}
# pydantic's methods that read a model's __dict__ whole rather than a field by name: a held model loads first
WHOLE = (
    "model_dump",
    "model_dump_json",
    "model_copy",
    "__copy__",
    "__deepcopy__",
    "__hash__",
    "__iter__",
    "__repr_args__",
    "__getstate__",
    "__reduce__",
    "__reduce_ex__",
)
_LOAD = "_held_load"  # a held node's loader, in its __dict__ until it is loaded
_NODE = "_held_node"  # a held GPU's node, in its __dict__ until its node is loaded


def head_of(ev: NodeEvidence) -> dict[str, Any]:
    """The node document's head as JSON: every field but the heavy ones (what `held` is made of); of a held node,
    without reading its document (the fields left out are the ones it does not hold)."""
    return NodeEvidence.model_dump(ev, mode="json", by_alias=True, exclude=HEAD_EXCLUDE)


def _fill(node: NodeEvidence) -> None:
    """Read the held node's whole document and give it and its GPUs every field of it (nothing when done already)."""
    state = node.__dict__
    load: Callable[[], NodeEvidence | None] | None = state.get(_LOAD)
    if load is None:
        return
    full = load()
    gpus: list[GpuEvidence] = state["gpus"]
    if full is None or full.node != node.node or len(full.gpus) != len(gpus):
        raise EvidenceError(f"the evidence of {node.node} is no longer the document its head was read from")
    for light, whole in zip(gpus, full.gpus, strict=True):
        _take(light, whole.__dict__)
        object.__setattr__(light, "__pydantic_fields_set__", whole.__pydantic_fields_set__)
    _take(node, {**full.__dict__, "gpus": gpus})  # its GPUs the held ones: a reader may hold one
    object.__setattr__(node, "__pydantic_fields_set__", full.__pydantic_fields_set__)


def _take(model: Any, fields: dict[str, Any]) -> None:
    """The model's fields `fields`, in their order (a dump writes them in its __dict__'s), its holding keys gone."""
    state = model.__dict__
    state.clear()
    state.update(fields)


def _loading(method: Callable[..., Any], node_of: Callable[[Any], NodeEvidence | None]) -> Callable[..., Any]:
    @functools.wraps(method)
    def whole(self: Any, *args: Any, **kwargs: Any) -> Any:
        node = node_of(self)
        if node is not None:
            _fill(node)
        return method(self, *args, **kwargs)

    return whole


class HeldGpu(GpuEvidence):
    """A held node's GPU: its heavy fields read from the document when first asked."""

    def __getattr__(self, name: str) -> Any:
        if name in HEAVY_GPU:
            node = self.__dict__.get(_NODE)
            if node is not None:
                _fill(node)
                return self.__dict__[name]
        return super().__getattr__(name)  # type: ignore[misc]

    @property
    def model_fields_set(self) -> set[str]:
        """The fields the document gave (its health and samples among them): read from it first."""
        node = self.__dict__.get(_NODE)
        if node is not None:
            _fill(node)
        return self.__pydantic_fields_set__


class HeldEvidence(NodeEvidence):
    """A node's evidence made of its head; its heavy fields read from the document when first asked."""

    gpus: list[HeldGpu] = Field(default_factory=list)  # type: ignore[assignment]  # the same fields: GpuEvidence's

    def __getattr__(self, name: str) -> Any:
        if name in HEAVY_NODE and _LOAD in self.__dict__:
            _fill(self)
            return self.__dict__[name]
        return super().__getattr__(name)  # type: ignore[misc]

    @property
    def model_fields_set(self) -> set[str]:
        """The fields the document gave (its P2P and DCGM among them, which the head does not): read from it first."""
        _fill(self)
        return self.__pydantic_fields_set__


def _equal(base: type[Any]) -> Callable[[Any, object], bool]:
    def __eq__(self: Any, other: object) -> bool:  # noqa: N807  # a held model equals its document's model
        for model in (self, other):
            node = (
                model
                if isinstance(model, HeldEvidence)
                else model.__dict__.get(_NODE)
                if isinstance(model, HeldGpu)
                else None
            )
            if node is not None:
                _fill(node)
        if not isinstance(other, base):
            return NotImplemented
        return bool(self.__dict__ == other.__dict__ and self.__pydantic_extra__ == other.__pydantic_extra__)

    return __eq__


for _name in WHOLE:
    setattr(HeldGpu, _name, _loading(getattr(GpuEvidence, _name), lambda g: g.__dict__.get(_NODE)))
    setattr(HeldEvidence, _name, _loading(getattr(NodeEvidence, _name), lambda n: n))
HeldGpu.__eq__ = _equal(GpuEvidence)  # type: ignore[method-assign]
HeldEvidence.__eq__ = _equal(NodeEvidence)  # type: ignore[method-assign]


def held(head: HeldEvidence, load: Callable[[], NodeEvidence | None], digest: bytes) -> HeldEvidence:
    """`head` (validated, just made: nobody else holds it) held: its heavy fields gone until read, then `load()`ed
    (the node's whole document: None or another node's, or other GPUs, is an EvidenceError when read). `digest`:
    the sha256 of the document's bytes, by which evidence.evidence_target finds its head."""
    state = head.__dict__
    for name in HEAVY_NODE:
        state.pop(name, None)
    for g in head.gpus:
        for name in HEAVY_GPU:
            g.__dict__.pop(name, None)
        g.__dict__[_NODE] = head
    state[_LOAD] = load
    HEADS[digest] = head
    return head


def is_held(ev: NodeEvidence) -> bool:
    """Whether `ev` is held by its head and its document not read yet."""
    return _LOAD in ev.__dict__
