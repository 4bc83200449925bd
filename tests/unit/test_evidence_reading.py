"""Evidence read from disk is validated strictly: a JSON `true` or "5" is never a number, while the keys JSON can
only write as strings (a GPU's or a link's index) still read as the ints they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.measure.evidence import (
    DcgmEvidence,
    DcgmGpuResult,
    DcgmTestResult,
    GpuEvidence,
    Health,
    Measurement,
    NodeEvidence,
    NvlinkErrors,
    read_evidence,
    write_document,
)


def _node() -> NodeEvidence:
    health = Health(nvlink_errors=NvlinkErrors(seconds=2.0, links={0: {"replay": 0}, 17: {"crc_flit": 1}}))
    gpu = GpuEvidence(
        index=0,
        uuid="GPU-1",
        serial="1",
        health=health,
        measurements={"memory.bandwidth": Measurement(unit="GB/s", samples=[1.0] * 5)},
    )
    dcgm = DcgmEvidence(
        level=2,
        results={
            "memory": DcgmTestResult(gpus={0: DcgmGpuResult(status="Pass")}, untied={3: DcgmGpuResult(status="Pass")})
        },
    )
    return NodeEvidence(
        node="n1",
        target="simulated",
        probe_version="1",
        started="2026-01-01T00:00:00Z",
        finished="2026-01-01T00:01:00Z",
        gpus=[gpu],
        dcgm=dcgm,
    )


def test_every_integer_keyed_map_reads_back(tmp_path: Path) -> None:
    ev = _node()
    path = write_document(tmp_path / "n1.json", ev)
    assert read_evidence(path) == ev


@pytest.mark.parametrize(
    ("where", "value", "key"),
    [
        (("gpus", 0, "index"), True, "gpus.0.index"),
        (
            ("gpus", 0, "health", "nvlink_errors", "links", "0", "replay"),
            False,
            "gpus.0.health.nvlink_errors.links.0.replay",
        ),
        (("gpus", 0, "health", "nvlink_errors", "seconds"), "2", "gpus.0.health.nvlink_errors.seconds"),
    ],
)
def test_a_bool_or_string_where_a_number_belongs_is_refused(
    tmp_path: Path, where: tuple, value: object, key: str
) -> None:
    doc = json.loads(_node().model_dump_json(by_alias=True))
    node = doc
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=key.replace(".", r"\.")):
        read_evidence(path)


def test_the_same_bytes_are_validated_once_while_a_reader_holds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-test reads a carried node's document as the source's, as its copy and in the evaluation (issue 28):
    the same bytes, validated once. A changed byte is another document, validated afresh (fail closed), and a
    document no reader holds any more is not kept (the exporter reads a fleet node by node)."""
    import gc

    from gpucert.measure import evidence

    validated: list[Path] = []
    real = evidence.validate

    def counting(path: Path, data: object, model: type) -> object:
        validated.append(path)
        return real(path, data, model)

    monkeypatch.setattr(evidence, "validate", counting)
    source = write_document(tmp_path / "source" / "n1.json", _node())
    copy = tmp_path / "copy" / "n1.json"
    copy.parent.mkdir()
    copy.write_bytes(source.read_bytes())
    held = read_evidence(source)
    assert read_evidence(copy) is held
    assert validated == [source]
    doc = json.loads(source.read_text())
    doc["gpus"][0]["index"] = True  # one value changed: refused, though the original was validated
    copy.write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"gpus\.0\.index"):
        read_evidence(copy)
    del held
    gc.collect()
    read_evidence(source)
    assert validated == [source, copy, source]


def test_a_good_document_is_validated_in_one_pass_from_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: a re-test reads every carried node's document; pydantic's JSON mode validates the bytes in one pass
    (half the cost of json.loads and validating the objects it gives). A good document is never parsed by json."""
    from gpucert import files
    from gpucert.measure import evidence

    path = write_document(tmp_path / "n1.json", _node())

    def no_parse(*args: object) -> None:
        raise AssertionError("parsed with json.loads")

    monkeypatch.setattr(files, "parse_json", no_parse)
    monkeypatch.setattr(evidence, "parse_json", no_parse)
    assert read_evidence(path) == _node()


def _variant(change: str) -> bytes:
    doc = json.loads(_node().model_dump_json(by_alias=True))
    if change == "python name of schema":
        doc["schema_"] = doc.pop("schema")
    elif change == "no schema":
        del doc["schema"]
    elif change == "other schema, bad key":
        doc["schema"], doc["gpus"][0]["index"] = "gpucert.io/evidence/v0", "1"
    elif change == "a list":
        return b"[1]"
    elif change == "cut off":
        return json.dumps(doc).encode()[:-9]
    elif change == "a key twice, the last bad":
        return json.dumps(doc).encode()[:-1] + b', "collected": 1}'
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("python name of schema", "schema is None, expected 'gpucert.io/evidence/v1'"),
        ("no schema", "schema is None, expected 'gpucert.io/evidence/v1'"),
        ("other schema, bad key", "schema is 'gpucert.io/evidence/v0', expected 'gpucert.io/evidence/v1'"),
        ("a list", "expected a JSON object, got list"),
        ("cut off", "not JSON (line 1, column"),
        ("a key twice, the last bad", "collected: Input should be a valid boolean"),
    ],
)
def test_a_refused_document_is_refused_as_the_two_step_read_refused_it(tmp_path: Path, change: str, said: str) -> None:
    """What is wrong before any key is said first (not JSON, not an object, another schema), then the first bad key,
    in the words json.loads and the strict Python validation gave: the one-pass read falls back to them."""
    path = tmp_path / "n1.json"
    path.write_bytes(_variant(change))
    with pytest.raises(EvidenceError) as exc:
        read_evidence(path)
    assert said in str(exc.value)
    assert str(path) in str(exc.value)


def test_a_document_only_json_loads_reads_still_reads(tmp_path: Path) -> None:
    """JSON in UTF-16 (json.loads detects it; pydantic's JSON mode reads UTF-8 only) reads as it always did."""
    path = tmp_path / "n1.json"
    path.write_bytes(_node().model_dump_json(by_alias=True).encode("utf-16"))
    assert read_evidence(path) == _node()
