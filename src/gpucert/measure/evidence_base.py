"""What every evidence model shares: strict frozen models, samples kept as one read-only float64 array (a sample
that is not a number is never coerced into one), and a GPU or link index as a JSON object key. Imported by
evidence.py and evidence_fabric.py only."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, overload

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, BeforeValidator, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler, PlainSerializer
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

M = TypeVar("M", bound=BaseModel)

__all__ = ["GpuKey", "Model", "SampleArray", "Samples", "compact"]


def _sample(value: Any) -> float:
    """A sample that is not a number (`true`, a string, null) is kept as NaN, so that the check it belongs to
    errors on that GPU ("not numbers") rather than the sample passing as 1.0 (a bool is an int to pydantic)."""
    if type(value) is float:  # what JSON and the probes give: no ABC check for each of a fleet's million samples
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an integer past float64's range: infinite, as JSON's reader makes it (not a traceback)
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]


class SampleArray(Sequence[float]):
    """The repetitions of one measurement as one read-only float64 array: 8 bytes a sample where a list of floats
    holds a pointer and a float object (32 bytes; a 1,024 x 8 fleet keeps some five million samples while it is
    judged). Reads as the list it replaces (length, truth, indexing and iteration give Python floats, equality
    with a list), so the rules and reports read it unchanged; `array` (or np.asarray) is the array itself."""

    __slots__ = ("array",)
    array: npt.NDArray[np.float64]

    def __init__(self, values: Sequence[float] | npt.NDArray[np.float64] = ()) -> None:
        array = np.array(values, dtype=np.float64)  # a copy: nothing else holds a writable view of it
        array.flags.writeable = False
        self.array = array

    def __len__(self) -> int:
        return self.array.size  # asked of every pair and figure by every check: the quickest of numpy's answers

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        found = self.array[index]
        return found.tolist() if isinstance(index, slice) else float(found)

    def __iter__(self) -> Iterator[float]:
        return iter(self.array.tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        return self.array if dtype is None else self.array.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleArray):
            return bool(np.array_equal(self.array, other.array))
        if isinstance(other, list):
            return bool(self.array.tolist() == other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.array.tobytes())

    def __repr__(self) -> str:
        return repr(self.array.tolist())

    def __reduce__(self) -> tuple[type[SampleArray], tuple[npt.NDArray[np.float64]]]:
        return SampleArray, (self.array,)


def _samples(value: Any) -> SampleArray:
    """Samples that are not all numbers (kept as NaN, sample by sample), or given as a tuple or an array by a probe,
    or already read. Anything else is refused as the list's own validation refused it."""
    if isinstance(value, SampleArray):
        return value
    if isinstance(value, list | tuple):
        return SampleArray([v if type(v) is float else _sample(v) for v in value])
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "fiu":
        return SampleArray(value)
    raise ValueError(_NOT_SAMPLES)


_NOT_SAMPLES = "Input should be a valid list of numbers"


def _numbers(value: list[float]) -> SampleArray:
    return SampleArray(value)


class _SamplesSchema:
    """How a list of samples is read: a list of numbers (what every document and probe gives) is validated by
    pydantic-core in Rust, a strict float each (JSON's `true` or "5" is not one), and handed to numpy whole; anything
    else goes to `_samples`, which keeps a sample that is not a number as NaN. The JSON schema says a list of
    numbers, as the contract always has."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        numbers_only = core_schema.list_schema(core_schema.float_schema(strict=True), strict=True)
        return core_schema.union_schema(
            [
                core_schema.no_info_after_validator_function(_numbers, numbers_only),
                core_schema.no_info_plain_validator_function(_samples),
            ],
            mode="left_to_right",
            custom_error_type="samples_type",
            custom_error_message=f"Value error, {_NOT_SAMPLES}",
        )

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(core_schema.list_schema(core_schema.float_schema()))


def _json_key(value: Any) -> Any:
    """A GPU index as a JSON object key: the digits of an int (read strictly, "1" is no int otherwise)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


def _dump(samples: Sequence[float]) -> list[float]:
    """Samples as the list of numbers the evidence contract writes (a list: what model_construct was given)."""
    return samples.array.tolist() if isinstance(samples, SampleArray) else list(samples)


# the repetitions of a measurement: judged by analysis.performance.sample_problem, never coerced into a figure; on
# disk and in model_dump a list of numbers as before (the evidence contract does not change), in memory an array
Samples = Annotated[
    SampleArray,
    _SamplesSchema(),
    PlainSerializer(_dump, return_type=list[float]),
]
GpuKey = Annotated[int, BeforeValidator(_json_key)]  # an index (a GPU's, a link's) as a JSON object key


class Model(BaseModel):
    # documents read from disk are validated strictly (_validate): a reading or counter given as `true` or "5" is
    # not a number, and the document is refused naming it; a probe builds them from NVML's and NumPy's numbers
    model_config = ConfigDict(extra="forbid", frozen=True)


# what compact() shares among the documents it is given: one set per distinct record of the fields a document gave,
# one dict or list per distinct flat one of numbers or words (NVML's counters, mostly zeros, repeat on every GPU and
# link; most lists of words are empty)
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
_FLAT: dict[tuple[Any, ...], Any] = {}
_FLAT_MOST = 4096  # distinct counter sets kept for sharing (a few MiB): most repeat (zeros); the rest are kept as read
_SCALARS = frozenset((int, float, str, bool, type(None)))


def _shared(value: Any, kind: Any = None) -> Any:
    """The one dict or list kept for every flat one of ints, words, flags or None with these items; `value` itself
    when it holds more (models, lists; floats, which seldom repeat and whose 0.0 and -0.0 are equal) or the table is
    full. `kind`: the one type the field's schema lets its values be (validated: no true among a field's ints), else
    None and each value's type is part of the key (1 and true are equal in Python, not on disk)."""
    held = value.items() if type(value) is dict else value
    if len(value) > 64 or kind is float:
        return value
    if not value:  # one empty list (dict) for every field
        kind = ()
    elif kind is None:
        kind = tuple(map(type, value.values() if type(value) is dict else value))
        if float in kind or not _SCALARS.issuperset(kind):
            return value
    key = (type(value), kind, tuple(held))
    one = _FLAT.get(key)
    if one is None:
        if len(_FLAT) >= _FLAT_MOST:
            return value
        _FLAT[key] = one = value
    return one


_Walk = Callable[[Any, list[BaseModel]], Any]


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


def _models(value: Any, models: list[BaseModel]) -> Any:
    if not value:  # most lists of errors and events: one empty list for them all
        return _shared(value)
    models.extend(value)
    return value


def _model_map(value: Any, models: list[BaseModel]) -> Any:
    if not value:
        return _shared(value)
    models.extend(value.values())
    return value


def _model(value: Any, models: list[BaseModel]) -> Any:
    if value is not None:
        models.append(value)
    return value


def _flat(kind: type | None) -> _Walk:
    def walk(value: Any, models: list[BaseModel]) -> Any:
        return _shared(value, kind)

    return walk


def _flat_map(kind: type | None) -> _Walk:
    def walk(value: dict[Any, Any], models: list[BaseModel]) -> Any:
        for key, item in value.items():
            if (one := _shared(item, kind)) is not item:
                value[key] = one
        return value

    return walk


def _is(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """Whether every type a field so typed may hold is one of `kinds` (None aside)."""
    if get_origin(annotation) in (Union, UnionType):
        return all(arg is type(None) or _is(arg, kinds) for arg in get_args(annotation))
    if get_origin(annotation) is Literal:
        return all(type(arg) in kinds for arg in get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, kinds)


def _walk_of(annotation: Any) -> _Walk | None:
    """How compact() goes through a field of this type: None for numbers, words and samples (nothing to share)."""
    scalars = (int, float, str, bool, type(None))
    origin, args = get_origin(annotation), get_args(annotation)
    if _is(annotation, (*scalars, SampleArray)):
        return None
    if _is(annotation, (BaseModel,)):
        return _model
    if origin is list and _is(args[0], (BaseModel,)):
        return _models
    if origin is dict and _is(args[1], (BaseModel,)):
        return _model_map
    if origin in (list, dict) and _is(args[-1], scalars):
        return _flat(args[-1] if args[-1] in scalars else None)
    if origin is dict and get_origin(args[1]) in (list, dict) and _is(inner := get_args(args[1])[-1], scalars):
        return _flat_map(inner if inner in scalars else None)
    return _visit  # anything (a dict of Any, a union of containers): looked at value by value


_WALKS: dict[type[BaseModel], tuple[tuple[str, _Walk], ...]] = {}


def _walks(cls: type[BaseModel]) -> tuple[tuple[str, _Walk], ...]:
    walks = _WALKS.get(cls)
    if walks is None:
        found = ((name, _walk_of(f.annotation)) for name, f in cls.model_fields.items())
        walks = _WALKS[cls] = tuple((name, walk) for name, walk in found if walk is not None)
    return walks


_FIELDS_OF: dict[type[BaseModel], set[str]] = {}  # the set of a model's fields last shared (most documents give one)


def _share_fields(model: BaseModel) -> None:
    fields = model.__pydantic_fields_set__
    shared = _FIELDS_OF.get(type(model))
    if shared is None or shared != fields:
        shared = _FIELDS_OF[type(model)] = _FIELDS_SETS.setdefault(frozenset(fields), fields)
    if shared is not fields:
        object.__setattr__(model, "__pydantic_fields_set__", shared)


def compact(model: M) -> M:
    """`model` (a document just validated, held by nobody else) with what repeats in every document shared rather
    than kept once per model: pydantic's record of the fields a document gave (`__pydantic_fields_set__`, a set of
    at least 216 bytes in each of a node's some 300 models: a third of its evidence in memory), flat counter dicts
    and lists of words (most empty). Short words are shared already: pydantic's JSON reader keeps one string for
    each it has seen (cache_strings). Safe for these frozen models, which nothing writes: pydantic only adds to the
    fields set on assignment, which a frozen model refuses, and model_copy copies it before it updates it; a shared
    dict or list is a reading like any other. Its output is unchanged (model_dump, model_dump_json, equality).
    Each field is gone through as its type says (a model, a list or map of models, a flat dict); one holding only
    numbers, words or samples is not looked at."""
    models: list[BaseModel] = [model]
    while models:
        item = models.pop()
        _share_fields(item)
        held = item.__dict__
        for name, walk in _walks(type(item)):
            value = held[name]
            if (found := walk(value, models)) is not value:
                held[name] = found
    return model
