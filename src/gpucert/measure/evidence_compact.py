"""compact(): a document just read, with what repeats in every document held once. Imported by evidence.py only.

What repeats: pydantic's record of the fields a document gave (`__pydantic_fields_set__`, a set of at least 216 bytes
in each of a node's some 300 models: a third of its evidence in memory), flat counter dicts and lists of words (most
empty). Short words are shared already: pydantic's JSON reader keeps one string for each it has seen (cache_strings).

How: one pass over the document's models, each gone through as a plan made once per model class says (issue 28: the
pass was a third of reading a node's document, most of it asking again per model and per field what the types say
once). A field that holds only numbers, words or samples is not looked at."""

from __future__ import annotations

from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from gpucert.measure.evidence_base import SampleArray

M = TypeVar("M", bound=BaseModel)

__all__ = ["compact"]

# what compact() shares among the documents it is given: one set per distinct record of the fields a document gave,
# one dict or list per distinct flat one of numbers or words (NVML's counters, mostly zeros, repeat on every GPU and
# link; most lists of words are empty)
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
_FLAT: dict[tuple[Any, ...], Any] = {}
_FLAT_MOST = 4096  # distinct counter sets kept for sharing (a few MiB): most repeat (zeros); the rest are kept as read
_SCALARS = frozenset((int, float, str, bool, type(None)))
_EMPTY: dict[type, Any] = {}  # the one empty dict and the one empty list, once _shared has met them


def _shared(value: Any, kind: Any = None) -> Any:
    """The one dict or list kept for every flat one of ints, words, flags or None with these items; `value` itself
    when it holds more (models, lists; floats, which seldom repeat and whose 0.0 and -0.0 are equal) or the table is
    full. `kind`: the one type the field's schema lets its values be (validated: no true among a field's ints), else
    None and each value's type is part of the key (1 and true are equal in Python, not on disk)."""
    if len(value) > 64 or kind is float:
        return value
    if not value:  # one empty list (dict) for every field
        kind = ()
    elif kind is None:
        kind = tuple(map(type, value.values() if type(value) is dict else value))
        if float in kind or not _SCALARS.issuperset(kind):
            return value
    key = (type(value), kind, tuple(value.items() if type(value) is dict else value))
    one = _FLAT.get(key)
    if one is None:
        if len(_FLAT) >= _FLAT_MOST:
            return value
        _FLAT[key] = one = value
    if not one:
        _EMPTY[type(one)] = one
    return one


def _visit(value: Any, models: list[BaseModel]) -> Any:
    """`value` (a field's dict or list of any kind) with its flat dicts and lists shared, the models it holds queued."""
    kind = type(value)
    if kind is not dict and kind is not list:
        if isinstance(value, BaseModel):
            models.append(value)
        return value
    one = _shared(value)
    if one is not value or not value:
        return one
    for key, item in value.items() if kind is dict else enumerate(value):
        if type(item) not in _SCALARS and (found := _visit(item, models)) is not item:
            value[key] = found
    return value


# how a field is gone through (the steps of a plan): a model or None; a list, a map of models; a flat list or dict
# of numbers or words (`kind`: the one type its values have, or None); a map of those; anything else, value by value
_MODEL, _MODELS, _MODEL_MAP, _FLAT_ONE, _FLAT_MAP, _ANY = range(6)
_Step = tuple[str, int, Any, "_Last | None"]


class _Last:
    """The shared dict or list a flat field was last given (NVML's throttle reasons, a measurement's parameters: the
    same on every GPU of every node), so that the next equal one is known by comparing it to this one (its keys in
    the same order, its values of the same types) rather than by building its key into the table again. What it
    keeps is one tuple, set and read whole: a reader in another thread (the exporter's scrapes) never sees the keys
    or the types of one with another."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        # (the one kept, its keys in order (None: a list), its values' types (None: the schema says them))
        self.seen: tuple[Any, tuple[Any, ...] | None, tuple[type, ...] | None] = (None, None, None)

    def remember(self, one: Any, kind: Any) -> None:
        values = one.values() if type(one) is dict else one
        keys = tuple(one) if type(one) is dict else None
        self.seen = (one, keys, None if kind is not None else tuple(map(type, values)))


def _again(value: Any, kind: Any, seen: tuple[Any, tuple[Any, ...] | None, tuple[type, ...] | None]) -> bool:
    """Whether `value` (equal to the one kept, `seen[0]`) is that one: its keys in the same order, its values of the
    same types when the schema does not say them (1 and true are equal in Python, not on disk)."""
    if type(value) is dict:
        if tuple(value) != seen[1]:
            return False
        values: Any = value.values()
    else:
        values = value
    return kind is not None or tuple(map(type, values)) == seen[2]


def _is(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """Whether every type a field so typed may hold is one of `kinds` (None aside)."""
    if get_origin(annotation) in (Union, UnionType):
        return all(arg is type(None) or _is(arg, kinds) for arg in get_args(annotation))
    if get_origin(annotation) is Literal:
        return all(type(arg) in kinds for arg in get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, kinds)


def _step_of(annotation: Any) -> tuple[int, Any] | None:
    """How compact() goes through a field of this type: None for numbers, words and samples (nothing to share)."""
    scalars = (int, float, str, bool, type(None))
    origin, args = get_origin(annotation), get_args(annotation)
    if _is(annotation, (*scalars, SampleArray)):
        return None
    if _is(annotation, (BaseModel,)):
        return _MODEL, None
    if origin is list and _is(args[0], (BaseModel,)):
        return _MODELS, None
    if origin is dict and _is(args[1], (BaseModel,)):
        return _MODEL_MAP, None
    if origin in (list, dict) and _is(args[-1], scalars):
        return _FLAT_ONE, args[-1] if args[-1] in scalars else None
    if origin is dict and get_origin(args[1]) in (list, dict) and _is(inner := get_args(args[1])[-1], scalars):
        return _FLAT_MAP, inner if inner in scalars else None
    return _ANY, None  # anything (a dict of Any, a union of containers): looked at value by value


class _Plan:
    """A model class's steps, and the record of given fields last shared for it (most documents give one)."""

    __slots__ = ("given", "steps")

    def __init__(self, cls: type[BaseModel]) -> None:
        found = ((name, _step_of(f.annotation)) for name, f in cls.model_fields.items())
        # a flat field of floats is kept as read (_shared never shares one): no step
        self.steps: tuple[_Step, ...] = tuple(
            (name, how, kind, _Last() if how in (_FLAT_ONE, _ANY) else None)
            for name, (how, kind) in ((n, s) for n, s in found if s is not None)
            if kind is not float
        )
        self.given: set[str] | None = None


_PLANS: dict[type[BaseModel], _Plan] = {}
_set_given = BaseModel.__pydantic_fields_set__.__set__  # type: ignore[attr-defined]  # the slot's own setter


def _given(plan: _Plan, given: set[str]) -> set[str]:
    """The one set kept for this record of given fields (and the plan's, for the class's next model)."""
    plan.given = shared = _FIELDS_SETS.setdefault(frozenset(given), given)
    return shared


def _flat_map(value: dict[Any, Any], kind: Any) -> dict[Any, Any]:
    """A map of flat dicts (NVLink's counters per link, a port's per counter) with each one shared; the one map kept
    for every map of these keys and these shared dicts in this order, where its dicts all were (most links of most
    GPUs count nothing: 18 dicts looked up as one map)."""
    inner = tuple(value.values())
    key = None
    if kind is not None and all(type(item) is dict for item in inner):  # the schema's one type: no true among ints
        key = (_FLAT_MAP, kind, tuple(value), tuple(map(tuple, map(dict.items, inner))))
        if (one := _FLAT.get(key)) is not None:
            return one  # type: ignore[no-any-return]
    known = len(_FLAT)
    for name, item in value.items():
        if (one := _shared(item, kind)) is not item:
            value[name] = one
    if key is not None and len(_FLAT) == known < _FLAT_MOST and all(len(item) <= 64 for item in inner):
        _FLAT[key] = value  # only maps of dicts that repeat: a node's own port counters would fill the table
    return value


def _empty(value: Any) -> Any:
    """The one empty list (dict) for every field."""
    one = _EMPTY.get(type(value))
    return _shared(value) if one is None else one


def _flat(held: dict[str, Any], name: str, how: int, kind: Any, last: _Last, todo: list[BaseModel]) -> None:
    """A flat field (or one of Any) shared: as the one it last was when it is equal to it, else through the table."""
    value, seen = held[name], last.seen
    if value == seen[0] and _again(value, kind, seen):
        held[name] = seen[0]
    elif (one := _shared(value, kind) if how == _FLAT_ONE else _visit(value, todo)) is not value:
        held[name] = one
        last.remember(one, kind)


def _fields(held: dict[str, Any], plan: _Plan, todo: list[BaseModel]) -> None:
    """A model's fields (its __dict__) gone through as its plan says: models queued, the rest shared."""
    for name, how, kind, last in plan.steps:
        value = held[name]
        if how == _MODEL:
            if value is not None:
                todo.append(value)
        elif not value:  # most lists of errors and events, most maps of warnings: one empty one for them all
            if value is not None and how != _FLAT_MAP:
                held[name] = _empty(value)
        elif how == _MODELS:
            todo.extend(value)
        elif how == _MODEL_MAP:
            todo.extend(value.values())
        elif how == _FLAT_MAP:
            held[name] = _flat_map(value, kind)
        else:
            _flat(held, name, how, kind, last, todo)  # type: ignore[arg-type]  # a flat step has its _Last


def compact(model: M) -> M:
    """`model` (a document just validated, held by nobody else) with what repeats in every document shared rather
    than kept once per model. Safe for these frozen models, which nothing writes: pydantic only adds to the fields
    set on assignment, which a frozen model refuses, and model_copy copies it before it updates it; a shared dict or
    list is a reading like any other. Its output is unchanged (model_dump, model_dump_json, equality)."""
    todo: list[BaseModel] = [model]
    pop, plans = todo.pop, _PLANS
    while todo:
        item = pop()
        plan = plans.get(type(item))
        if plan is None:
            plan = plans[type(item)] = _Plan(type(item))
        given = item.__pydantic_fields_set__
        if (shared := plan.given) != given:
            shared = _given(plan, given)
        if shared is not given:
            _set_given(item, shared)
        _fields(item.__dict__, plan, todo)
    return model
