"""A GPU's figure told from its pool's index (locate.told_figures, issue 28) never stands in for a question `figure`
asks: a measurement in another unit than the baseline's, or a probe error on that GPU, is the same error with the
told path as without it, and every other memory and straggler check decides the same (fail closed: the told path
is only a shortcut to the answer `figure` gives)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucert.evaluate import locate
from gpucert.evaluate.evaluation import Evaluation, counted
from tests.in_process import gpucert_here

from .conftest import fleet_doc, spec_doc
from .test_handover_acceptance import ok, runs

OTHER_UNIT, PROBE_ERROR = "memory.bandwidth@gpu-node-2/gpu1", "memory.bandwidth@gpu-node-3/gpu0"


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean 6 x 4 run whose evidence is then edited: one GPU's bandwidth in MB/s, another's memory probe failed."""
    work = tmp_path_factory.mktemp("told")
    spec = spec_doc(probes=["health", "memory"])
    del spec["certify"]["multinode"]
    spec["expect"] |= {"nodes": 6, "gpusPerNode": 4}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc([], nodes=6, gpus=4)))
    ok(gpucert_here("certify", "spec.yaml", "-q", cwd=work))
    (run,) = runs(work / "reports")
    for node, edit in (("gpu-node-2", _other_unit), ("gpu-node-3", _probe_error)):
        path = run / "evidence" / f"{node}.json"
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return run


def _other_unit(doc: dict[str, object]) -> None:
    doc["gpus"][1]["measurements"]["memory.bandwidth"]["unit"] = "MB/s"  # type: ignore[index]


def _probe_error(doc: dict[str, object]) -> None:
    doc["errors"] = [{"probe": "memory", "gpu": 0, "message": "injected"}]


def _decided(run: Path) -> dict[str, tuple[str, str]]:
    ev = Evaluation.from_run(run)
    keys = sorted((k for k in ev.plan.required if k.check.startswith(("memory.", "straggler."))), key=str)
    return {str(k): ((f := counted(ev, k)).status.value, f.message) for k in keys}


def test_a_told_figure_never_hides_another_unit_or_a_probe_error(edited: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    told = _decided(edited)
    assert told[OTHER_UNIT] == (
        "error",
        "gpu-node-2/gpu1: memory.bandwidth was measured in MB/s, the baseline is in GB/s",
    )
    assert told[PROBE_ERROR] == ("error", "gpu-node-3/gpu0: the memory probe failed: injected")
    assert sum(status == "pass" for status, _ in told.values()) >= 20  # the others: most told, all passed
    # every figure asked question by question
    monkeypatch.setattr(locate, "told_figures", lambda _view, _metric, _node, gpus: [None] * len(gpus))
    assert _decided(edited) == told
