"""compact(): what repeats in every node's document is held once, and nothing it shares changes what a document says
(issue 28); SampleArray reads as the list of samples it replaces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucert.measure.evidence import NodeEvidence, SampleArray
from gpucert.measure.evidence_base import compact


def _doc(node: str, params: dict[str, object]) -> NodeEvidence:
    data = {
        "schema": "gpucert.io/evidence/v1",
        "node": node,
        "target": "simulated",
        "probe_version": "1",
        "started": "2026-12-05T00:00:00+00:00",
        "finished": "2026-12-05T00:01:00+00:00",
        "gpus": [
            {"index": 0, "measurements": {"memory.bandwidth": {"unit": "GB/s", "samples": [1.0, 2], "params": params}}}
        ],
    }
    return compact(NodeEvidence.model_validate(json.loads(json.dumps(data)), strict=True))


def test_equal_counter_sets_are_shared_but_one_true_and_one_point_zero_are_not_the_same_reading() -> None:
    docs = [_doc(f"n{i}", p) for i, p in enumerate([{"x": 1}, {"x": 1}, {"x": 1.0}, {"x": True}])]
    params = [d.gpus[0].measurements["memory.bandwidth"].params for d in docs]
    assert params[0] is params[1]  # the same counters, held once
    assert params[2] is not params[0]
    assert params[3] is not params[0]
    dumped = [json.loads(d.model_dump_json())["gpus"][0]["measurements"]["memory.bandwidth"]["params"] for d in docs]
    assert [json.dumps(p) for p in dumped] == ['{"x": 1}', '{"x": 1}', '{"x": 1.0}', '{"x": true}']


def test_samples_read_as_the_list_they_replace() -> None:
    samples = _doc("n0", {}).gpus[0].measurements["memory.bandwidth"].samples
    assert isinstance(samples, SampleArray)
    assert samples == [1.0, 2.0]
    assert samples != [1.0, 3.0]
    assert len(samples) == 2
    assert bool(samples)
    assert not SampleArray()
    assert samples[1] == 2.0
    assert type(samples[1]) is float
    assert samples[:1] == [1.0]
    assert sorted(samples, reverse=True) == [2.0, 1.0]
    assert float(np.median(samples)) == 1.5
    with pytest.raises(ValueError, match="read-only"):
        samples.array[0] = 5.0
