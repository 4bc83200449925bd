"""A node document's target as RunFolder.check asks it of a document the process does not hold validated: read by a
model of the one field (measure/evidence.py `_Target`, issue 28: 0.18 ms of a 74 KB document, json.loads 1.2 ms),
and what json.loads would say of it in every case: the last of a key given twice, a document that is JSON but no
object (no target), one that is not JSON (its error), a string json.loads takes and pydantic's parser refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucert.errors import EvidenceError
from gpucert.measure import evidence


@pytest.mark.parametrize(
    "text",
    [
        '{"schema": "gpucert.io/evidence/v1", "target": "simulated", "gpus": [{"index": 0}]}',
        '{"target": "kubernetes", "node": "n", "target": "simulated"}',
        '{"node": "n"}',
        '{"target": {"kind": ["a", 1]}}',
        '{"target": 1e400, "x": NaN}',
        '{"target": "\\ud800"}',
        "[1, 2]",
        '"simulated"',
    ],
)
def test_the_target_is_what_json_loads_reads(tmp_path: Path, text: str) -> None:
    path = tmp_path / "gpu-node-1.json"
    path.write_text(text)
    doc = json.loads(text)
    assert evidence.evidence_target(path) == (doc.get("target") if isinstance(doc, dict) else None)


def test_a_document_is_not_built_to_find_its_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gpu-node-1.json"
    gpus = [{"index": i, "samples": [1.0] * 50} for i in range(8)]
    path.write_text(json.dumps({"target": "simulated", "gpus": gpus}))
    monkeypatch.setattr(evidence, "parse_json", lambda *a: pytest.fail("the whole document was built"))
    assert evidence.evidence_target(path) == "simulated"


def test_a_document_that_is_not_json_is_said_so(tmp_path: Path) -> None:
    path = tmp_path / "gpu-node-1.json"
    path.write_text('{"target": "simulated", ')
    with pytest.raises(EvidenceError, match=r"not JSON \(line 1"):
        evidence.evidence_target(path)
