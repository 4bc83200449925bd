"""compact(): what repeats in every node's document is held once, and nothing it shares changes what a document says
(issue 28); SampleArray reads as the list of samples it replaces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucert.measure.evidence import NodeEvidence, SampleArray
from gpucert.measure.evidence_compact import compact


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


def _node(gpu: dict[str, object], **more: object) -> NodeEvidence:
    data = {
        "schema": "gpucert.io/evidence/v1",
        "node": "n",
        "target": "simulated",
        "probe_version": "1",
        "started": "2026-12-05T00:00:00+00:00",
        "finished": "2026-12-05T00:01:00+00:00",
        "gpus": [{"index": 0, **gpu}],
        **more,
    }
    return compact(NodeEvidence.model_validate_json(json.dumps(data), strict=True))


def test_empty_lists_and_equal_counter_sets_are_held_once_across_documents() -> None:
    """Most lists of a document are empty (no XID event, no DCGM warning, no error) and most counters are zeros:
    one of each is kept, whatever field or document holds it (issue 28: each list the collector tracks is walked
    again at each full collection)."""
    health = {"xid": [], "not_supported": [], "throttle_under_load": [{"probe": "p", "seconds": 1.5}]}
    dcgm = {"level": 2, "results": {"memory": {"gpus": {"0": {"status": "Pass"}}}}}
    a, b = (
        _node({"health": {**health, "nvlink_errors": {"seconds": 1, "links": {"0": {"replay": 0}}}}}, dcgm=dcgm)
        for _ in range(2)
    )
    ha, hb = a.gpus[0].health, b.gpus[0].health
    assert ha is not None
    assert hb is not None
    assert a.dcgm is not None
    assert ha.xid is hb.xid is ha.not_supported is a.errors is a.dcgm.results["memory"].gpus[0].errors
    assert ha.throttle_under_load[0].reasons_ns is hb.throttle_under_load[0].reasons_ns
    assert ha.nvlink_errors is not None
    assert hb.nvlink_errors is not None
    assert ha.nvlink_errors.links[0] is hb.nvlink_errors.links[0]
    assert a.model_dump_json() == b.model_dump_json()


def test_a_counter_of_one_and_a_flag_of_true_are_never_the_same_dict() -> None:
    """Fields whose schema makes every value an int (counters) or a bool (flags) are shared by their items and
    that type: {"mlx5_0": 1} as counters and {"mlx5_0": true} as flags are equal in Python, not on disk."""
    fabric = {"gdr": {"dmabuf_nic": {"mlx5_0": True}}}
    window = {"probe": "p", "seconds": 1.5, "reasons_ns": {"mlx5_0": 1}}
    doc = _node({"health": {"throttle_under_load": [window]}}, fabric=fabric)
    health, gdr = doc.gpus[0].health, doc.fabric.gdr if doc.fabric else None
    assert health is not None
    assert gdr is not None
    assert health.throttle_under_load[0].reasons_ns is not gdr.dmabuf_nic
    dumped = json.loads(doc.model_dump_json())
    assert dumped["fabric"]["gdr"]["dmabuf_nic"] == {"mlx5_0": True}
    assert dumped["gpus"][0]["health"]["throttle_under_load"][0]["reasons_ns"] == {"mlx5_0": 1}
    assert json.dumps(dumped["fabric"]["gdr"]["dmabuf_nic"]) == '{"mlx5_0": true}'


def test_a_reading_of_minus_zero_is_not_held_as_zero() -> None:
    """0.0 and -0.0 are equal in Python, not on disk: dicts of floats are kept as read."""
    docs = [_doc(f"n{i}", {"offset": x}) for i, x in enumerate([0.0, -0.0])]
    dumped = [json.loads(d.model_dump_json())["gpus"][0]["measurements"]["memory.bandwidth"]["params"] for d in docs]
    assert [json.dumps(p) for p in dumped] == ['{"offset": 0.0}', '{"offset": -0.0}']


def test_equal_counters_in_another_order_keep_their_order() -> None:
    """Counters equal as dicts but written in another order are not the same reading on disk: each document writes
    back its own order, though a dict of the first order was just shared (issue 28: the shared one is found by
    comparing to the last one; the comparison must see the order)."""
    windows = [
        {"probe": "p", "seconds": 1.5, "reasons_ns": {"thermal": 0, "sw_power_cap": 0}},
        {"probe": "p", "seconds": 1.5, "reasons_ns": {"thermal": 0, "sw_power_cap": 0}},
        {"probe": "p", "seconds": 1.5, "reasons_ns": {"sw_power_cap": 0, "thermal": 0}},
    ]
    docs = [_node({"health": {"throttle_under_load": windows}}) for _ in range(2)]
    for doc in docs:
        health = doc.gpus[0].health
        assert health is not None
        first, second, third = (w.reasons_ns for w in health.throttle_under_load)
        assert first is second
        assert third is not first
        dumped = json.loads(doc.model_dump_json())["gpus"][0]["health"]["throttle_under_load"]
        assert [list(w["reasons_ns"]) for w in dumped] == [["thermal", "sw_power_cap"]] * 2 + [
            ["sw_power_cap", "thermal"]
        ]


def test_parameters_equal_in_python_but_not_on_disk_are_never_taken_for_the_last_ones() -> None:
    """A measurement's parameters (any JSON) equal to the last ones shared in Python but not on disk (1, 1.0, true)
    are kept as read, in a document as across documents."""
    gpu = {
        "index": 0,
        "measurements": {
            m: {"unit": "GB/s", "samples": [1.0], "params": {"x": x}}
            for m, x in (("a", 1), ("b", 1), ("c", True), ("d", 1), ("e", 1.0), ("f", "1"))
        },
    }
    doc = _node(gpu)
    params = {m: v.params for m, v in doc.gpus[0].measurements.items()}
    assert params["a"] is params["b"] is params["d"]
    assert params["c"] is not params["a"]
    dumped = json.loads(doc.model_dump_json())["gpus"][0]["measurements"]
    assert [json.dumps(dumped[m]["params"]) for m in "abcdef"] == [
        '{"x": 1}',
        '{"x": 1}',
        '{"x": true}',
        '{"x": 1}',
        '{"x": 1.0}',
        '{"x": "1"}',
    ]


def test_a_map_of_quiet_links_is_held_once_and_a_link_that_counted_is_its_own() -> None:
    """NVLink's counters per link: most links of most GPUs count nothing, and the map of them all is held once across
    documents; a map where one link counted keeps that link's counters, and the others' are still shared."""
    quiet = {str(link): {"replay": 0, "recovery": 0} for link in range(4)}
    loud = {**quiet, "2": {"replay": 7, "recovery": 0}}
    docs = [
        _node({"health": {"nvlink_errors": {"seconds": 1, "links": links}}}) for links in (quiet, quiet, quiet, loud)
    ]
    maps = [d.gpus[0].health.nvlink_errors.links for d in docs]  # type: ignore[union-attr]
    assert maps[1] is maps[2]  # the first one's counters were new: its map is kept from the second on
    assert maps[3] is not maps[1]
    assert maps[3][0] is maps[1][0]
    assert maps[3][2] == {"replay": 7, "recovery": 0}
    assert json.loads(docs[3].model_dump_json())["gpus"][0]["health"]["nvlink_errors"]["links"]["2"] == {
        "replay": 7,
        "recovery": 0,
    }
