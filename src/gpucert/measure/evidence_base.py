"""What every evidence model shares: strict frozen models, samples kept as one read-only float64 array (a sample
that is not a number is never coerced into one), and a GPU or link index as a JSON object key. Imported by the
evidence models (evidence.py, evidence_dcgm.py, evidence_fabric.py), evidence_compact.py and the batch rules that
read SampleArray's array (evaluate/rules/performance_batch.py)."""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from itertools import accumulate, chain
from typing import Annotated, Any, ParamSpec, TypeVar, overload

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, BeforeValidator, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler, PlainSerializer
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

__all__ = ["DocumentSamples", "GpuKey", "Model", "SampleArray", "Samples", "at_once"]


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
    with a list), so the rules and reports read it unchanged; `array` (or np.asarray) is the array itself. A series
    read from a node's document (at_once) is a view of its part of the document's one read-only array, which it
    keeps alive; pickled (xdist), it carries its own part only."""

    __slots__ = ("array",)
    array: npt.NDArray[np.float64]

    def __init__(self, values: Sequence[float] | npt.NDArray[np.float64] = ()) -> None:
        array = np.array(values, dtype=np.float64)  # a copy: nothing else holds a writable view of it
        array.setflags(write=False)  # as flags.writeable = False, without building a flags object (a tenth the time)
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


_new = object.__new__
_set_array = SampleArray.array.__set__  # type: ignore[attr-defined]  # the slot's own setter


class DocumentSamples:
    """The samples of one document being read: each list of numbers pydantic-core validated is kept as it is given,
    and `made` turns them all into arrays at once, one read-only float64 array for the document and each series a
    view of its part (issue 28: one numpy call a document instead of one a series, 141 in a node's document). The
    SampleArrays handed out hold no array until `made`: the document is not read before then (`at_once`)."""

    __slots__ = ("lists", "series")

    def __init__(self) -> None:
        self.series: list[SampleArray] = []
        self.lists: list[list[float]] = []

    def made(self) -> None:
        """Every series handed out, its array made: its samples in the order read, float64, read-only."""
        sizes = list(map(len, self.lists))
        # what the strict list schema gives is floats in both modes (an int made one, one past float64's range
        # refused to _samples): each is the float64 np.array made of it
        flat = np.fromiter(chain.from_iterable(self.lists), np.float64, sum(sizes))
        flat.setflags(write=False)  # its views are read-only, and none can be made writable again
        ends = list(accumulate(sizes))
        parts = map(flat.__getitem__, map(slice, [0, *ends[:-1]], ends))
        deque(map(_set_array, self.series, parts), maxlen=0)  # each series its part, in C: no Python frame a series
        self.series, self.lists = [], []


# the document whose samples are being read at once (per thread and task: a ContextVar), None: each series at once
_DOCUMENT: ContextVar[DocumentSamples | None] = ContextVar("gpucert_document_samples", default=None)
P = ParamSpec("P")
R = TypeVar("R")


def at_once(read: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """read(*args, **kwargs), a document's validation, with every series of samples it validates made into arrays
    in one go when it returns (DocumentSamples). Whatever it raises is raised as it was."""
    document = DocumentSamples()
    token = _DOCUMENT.set(document)
    try:
        found = read(*args, **kwargs)
    finally:
        _DOCUMENT.reset(token)
    document.made()
    return found


def _numbers(value: list[float]) -> SampleArray:
    document = _DOCUMENT.get()
    if document is None:
        return SampleArray(value)
    series = _new(SampleArray)  # its array made with the document's (DocumentSamples.made)
    document.series.append(series)
    document.lists.append(value)
    return series


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
