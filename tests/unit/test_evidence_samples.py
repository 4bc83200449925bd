"""How a list of samples is read (issue 28: evidence read faster): a list of numbers is validated by pydantic-core and
handed to numpy whole, anything else as before, sample by sample. Whatever the input and the mode (a document's
bytes, its parsed JSON, a probe's constructor), the samples read are those the per-sample reading gave: a sample
that is not a number is NaN, never 1.0 or 5.0, and what is not a list of samples is refused in the same words."""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from gpucert.errors import EvidenceError
from gpucert.measure.evidence import Measurement, NodeEvidence, SampleArray, read_evidence, write_document
from gpucert.measure.evidence_base import at_once


def _as_written(value: Any) -> list[float] | str:
    """The per-sample reading the schema had before issue 28's cut (the contract): a list or tuple sample by sample
    (a number as its float, anything else NaN), a 1-D numeric array as it is, anything else refused."""
    if isinstance(value, SampleArray):
        return value.array.tolist()
    if isinstance(value, list | tuple):
        return [float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else math.nan for v in value]
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "fiu":
        return value.astype(np.float64).tolist()
    return "Input should be a valid list of numbers"


INPUTS: list[Any] = [
    [1.0, 2.5, 3.0],
    [],
    [1, 2, 3],  # JSON's integers are numbers
    [1.0, math.nan, math.inf, -math.inf],
    [True, 2.0],  # a bool is not a sample of 1.0
    [1.0, "2"],
    [None, 1.0],
    [[1.0], {"a": 1}],
    [np.float64(1.5), np.int64(3), np.float32(0.5)],  # a probe's numpy numbers
    (1.0, 2.0),
    np.array([1.0, 2.0]),
    np.array([1, 2], dtype=np.int32),
    SampleArray([4.0, 5.0]),
    "1.0, 2.0",
    {"0": 1.0},
    5.0,
    None,
    {1.0, 2.0},  # a set has no order: never samples
    np.array([[1.0]]),
]


def _document(value: Any, folder: Path) -> NodeEvidence:
    """A node document on disk whose one measurement's samples are `value`, read as a run reads it."""
    gpu = {"index": 0, "measurements": {"memory.bandwidth": {"unit": "GB/s", "samples": value}}}
    data = {**_EMPTY_NODE, "gpus": [gpu]}
    path = folder / f"n{len(list(folder.iterdir()))}.json"
    path.write_text(json.dumps(data))
    return read_evidence(path)


_EMPTY_NODE = {
    "schema": "gpucert.io/evidence/v1",
    "node": "n1",
    "target": "simulated",
    "probe_version": "1",
    "started": "2026-01-01T00:00:00Z",
    "finished": "2026-01-01T00:01:00Z",
}


def _read(value: Any, how: str, folder: Path | None = None) -> list[float] | str:
    if how == "document":
        assert folder is not None
        try:
            m = _document(value, folder).gpus[0].measurements["memory.bandwidth"]
        except EvidenceError as exc:
            return str(exc).split(".samples: ", 1)[1].removeprefix("Value error, ")
        assert isinstance(m.samples, SampleArray)
        assert m.samples.array.dtype == np.float64
        return m.samples.array.tolist()
    try:
        if how == "constructed":
            m = Measurement(unit="GB/s", samples=value)
        elif how == "parsed":
            m = Measurement.model_validate({"unit": "GB/s", "samples": value}, strict=True)
        else:
            m = Measurement.model_validate_json(json.dumps({"unit": "GB/s", "samples": value}), strict=True)
    except ValidationError as exc:
        (err,) = exc.errors()
        assert err["loc"] == ("samples",)
        return str(err["msg"]).removeprefix("Value error, ")
    assert isinstance(m.samples, SampleArray)
    assert m.samples.array.dtype == np.float64
    return m.samples.array.tolist()


def _same(got: list[float] | str, want: list[float] | str) -> bool:
    if isinstance(got, str) or isinstance(want, str):
        return got == want
    return len(got) == len(want) and all(
        a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("value", INPUTS, ids=[repr(v)[:30] for v in INPUTS])
@pytest.mark.parametrize("how", ["constructed", "parsed", "json", "document"])
def test_samples_read_as_the_per_sample_reading_read_them(value: Any, how: str, tmp_path: Path) -> None:
    if how in ("json", "document"):
        try:
            json.dumps(value)
        except TypeError:
            pytest.skip("not JSON")
    got = _read(value, how, tmp_path)
    assert _same(got, _as_written(value)), (got, _as_written(value))


def test_an_integer_sample_past_a_floats_range_is_infinite_not_a_traceback(tmp_path: Path) -> None:
    """A hostile document's sample of 400 digits: float() of it raised OverflowError, which no reader caught (a
    traceback). JSON's reader makes it infinite; so does the per-sample reading now, and the check says the samples
    are not numbers (sample_problem)."""
    huge = int("9" * 400)
    assert _read([huge, 1.0], "parsed") == [math.inf, 1.0]
    assert _read([-huge], "constructed") == [-math.inf]
    doc = NodeEvidence(
        node="n1",
        target="simulated",
        probe_version="1",
        started="2026-01-01T00:00:00Z",
        finished="2026-01-01T00:01:00Z",
    )
    data = json.loads(write_document(tmp_path / "n1.json", doc).read_text())
    data["gpus"] = [{"index": 0, "measurements": {"memory.bandwidth": {"unit": "GB/s", "samples": [huge, 1.0]}}}]
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(data))
    samples = read_evidence(path).gpus[0].measurements["memory.bandwidth"].samples
    assert samples == [math.inf, 1.0]


def test_a_documents_samples_are_views_of_one_read_only_array(tmp_path: Path) -> None:
    """Issue 28: a node document's some 141 sample series are made into arrays by one numpy call, each a view of its
    part of one float64 array: the samples each series read, in order, and none of them writable, not even by
    asking (a view of a read-only array cannot be made writable)."""
    gpus = [
        {
            "index": i,
            "measurements": {m: {"unit": "GB/s", "samples": [float(i), 1.5 * k, 2]} for k, m in enumerate("ab")},
        }
        for i in range(2)
    ]
    pair = {"src": 0, "dst": 1, "peer_access": True, "samples": []}
    path = tmp_path / "n1.json"
    path.write_text(json.dumps({**_EMPTY_NODE, "gpus": gpus, "p2p": {"pairs": [pair]}}))
    doc = read_evidence(path)
    series = [m.samples for g in doc.gpus for m in g.measurements.values()]
    assert [s.array.tolist() for s in series] == [[0.0, 0.0, 2.0], [0.0, 1.5, 2.0], [1.0, 0.0, 2.0], [1.0, 1.5, 2.0]]
    assert doc.p2p is not None
    empty = doc.p2p.pairs[0].samples
    assert empty.array.shape == (0,)
    assert empty.array.dtype == np.float64
    bases = {id(s.array.base) for s in [*series, empty]}
    assert len(bases) == 1
    for s in series:
        with pytest.raises(ValueError, match="read-only"):
            s.array[0] = 5.0
        with pytest.raises(ValueError, match="WRITEABLE"):
            s.array.setflags(write=True)


def test_after_a_document_refused_a_probes_samples_hold_their_own_array(tmp_path: Path) -> None:
    """The document being read is known to the sample reader only while it is read (at_once): after one refused
    (EvidenceError, not a traceback), a measurement a probe makes holds its own array at once, not a series waiting
    for a document that is gone."""
    gpu = {"index": "0", "measurements": {"memory.bandwidth": {"unit": "GB/s", "samples": [1.0]}}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**_EMPTY_NODE, "gpus": [gpu]}))
    with pytest.raises(EvidenceError, match=r"gpus\.0\.index: Input should be a valid integer"):
        read_evidence(path)

    def refused() -> Measurement:
        Measurement.model_validate_json('{"unit": "GB/s", "samples": [1.0]}', strict=True)
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        at_once(refused)
    m = Measurement(unit="GB/s", samples=[1.0, 2.0])
    assert m.samples.array.tolist() == [1.0, 2.0]
    assert m.samples.array.base is None
