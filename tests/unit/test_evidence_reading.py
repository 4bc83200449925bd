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
