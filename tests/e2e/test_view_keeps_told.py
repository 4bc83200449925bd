"""The run view keeps what its pool's peer index believed of its own nodes (issue 28): a check's figure is the very
one the index holds, kept for the node when one of its checks first asks, never believed again; a figure the view
was asked before the index existed stands (the first answer kept); a fleet too small to compare still answers."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest
import yaml

from gpucert.evaluate import view_figures
from gpucert.evaluate.evaluation import Evaluation
from tests.in_process import gpucert_here

from .conftest import fleet_doc, spec_doc
from .test_handover_acceptance import ok, runs


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("keeps")
    spec = spec_doc(probes=["health", "memory", "pcie"])
    del spec["certify"]["multinode"]
    spec["expect"] |= {"nodes": 5, "gpusPerNode": 4}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc([], nodes=5, gpus=4)))
    ok(gpucert_here("certify", "spec.yaml", "-q", cwd=work))
    (found,) = runs(work / "reports")
    return found


def _never(*_args: object) -> NoReturn:
    raise AssertionError("believed again: the pool's index had told it")


def test_a_nodes_figures_are_its_pools_index_own(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = Evaluation.from_run(run)
    first = "gpu-node-1"
    early = ev.believed("memory.bandwidth", first, 0)  # before any index: believable's answer, kept
    pool = ev.pool_name(first)
    metrics = ev.peers.metrics(pool)
    assert {"memory.bandwidth", "pcie.h2d", "pcie.d2h"} <= set(metrics)
    for metric in metrics:
        ev.peers.index(metric, pool)
    monkeypatch.setattr(view_figures, "believable", _never)
    for node in ev.inventory.names:
        for metric in metrics:
            held = ev.peers.index(metric, pool).values
            for gpu in range(4):
                got = ev.believed(metric, node, gpu)
                if (metric, node, gpu) == ("memory.bandwidth", first, 0):
                    assert got is early
                else:
                    assert got is held[(node, gpu)]
