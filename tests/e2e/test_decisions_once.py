"""What the run's view keeps once (issue 28: each GPU's believable figure per metric, read by its check, its peers'
index, the exporter and the reports) decides every check as deciding it afresh does: a fleet with faults of every
kind, decided by a fresh view and by one whose caches were filled by deciding in another order first, gives the same
findings, word for word."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucert.evaluate.evaluation import Evaluation
from gpucert.evaluate.rules.performance import sample_problem
from gpucert.plan import run as runner
from gpucert.plan.checks import GPU_METRICS, NODE_METRICS, CheckKey, CheckStatus, Finding
from gpucert.plan.layout import Mode
from gpucert.plan.runfolder import RunFolder

from .conftest import fleet_doc, spec_doc

NODES = 8
FAULTS: list[dict[str, Any]] = [
    {"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.93},
    {"kind": "slow", "node": "gpu-node-4", "metric": "pcie.h2d", "factor": 0.93},  # the whole node
    {"kind": "slow", "node": "gpu-node-1", "gpu": 6, "metric": "p2p.bandwidth", "factor": 0.7},
    {"kind": "slow", "node": "gpu-node-3", "metric": "nccl.all_reduce", "factor": 0.8},
    *(  # a little behind on every GEMM at once: straggler.combined
        {"kind": "slow", "node": "gpu-node-5", "gpu": 1, "metric": f"compute.gemm.{d}", "factor": 0.975}
        for d in ("fp16", "bf16", "tf32", "fp32")
    ),
    {
        "kind": "intermittent",
        "node": "gpu-node-3",
        "gpu": 5,
        "metric": "compute.gemm.fp16",
        "factor": 0.7,
        "fraction": 0.3,
    },
    {"kind": "ecc", "node": "gpu-node-1", "gpu": 5, "uncorrected": 2},
    {"kind": "remapped-rows", "node": "gpu-node-6", "gpu": 0, "failure": True},
    {"kind": "pcie-link", "node": "gpu-node-1", "gpu": 2, "generation": 3, "width": 16},
    {"kind": "throttle", "node": "gpu-node-4", "gpu": 7, "reason": "hw_slowdown"},
    {"kind": "nvlink-down", "node": "gpu-node-6", "gpu": 4},
    {"kind": "nvlink-errors", "node": "gpu-node-7", "gpu": 2, "counter": "replay", "count": 5},
    {"kind": "dcgm", "node": "gpu-node-4", "gpu": 0, "test": "memory"},
    {"kind": "xid", "node": "gpu-node-7", "gpu": 6, "code": 79},
    {"kind": "temperature", "node": "gpu-node-2", "gpu": 1, "celsius": 95},
    {"kind": "version", "node": "gpu-node-3", "component": "driver", "version": "550.54.14"},
    {"kind": "ordering", "node": "gpu-node-2", "component": "device-plugin", "before": "container-toolkit"},
    {"kind": "missing-gpu", "node": "gpu-node-8", "gpu": 7},
    {"kind": "unhealthy-gpu", "node": "gpu-node-6", "gpu": 6},
    {"kind": "unreachable", "node": "gpu-node-9"},
    {"kind": "preflight", "node": "gpu-node-10", "step": "cupy"},
]


def _edit_samples(path: Path) -> None:
    """Samples no figure can be made of, written into one node's evidence: not numbers, too few, none at all."""
    doc = json.loads(path.read_text())
    gpus = {g["index"]: g for g in doc["gpus"]}
    gpus[0]["measurements"]["memory.bandwidth"]["samples"][4] = "fast"  # read as NaN: "not numbers"
    tf32 = gpus[1]["measurements"]["compute.gemm.tf32"]
    tf32["samples"] = tf32["samples"][:3]
    gpus[2]["measurements"]["pcie.d2h"]["samples"] = []
    path.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    project = tmp_path_factory.mktemp("once")
    (project / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc(FAULTS, nodes=NODES + 2)))
    doc = spec_doc()
    doc["expect"]["nodes"] = NODES + 2
    (project / "spec.yaml").write_text(yaml.safe_dump(doc))
    spec, _ = runner.load_inputs(project / "spec.yaml")
    folder = runner.prepare(spec, project / "reports", Mode.MEASURE)
    _edit_samples(folder.path / "evidence" / "gpu-node-7.json")
    return folder


def _decide(ev: Evaluation, keys: list[CheckKey]) -> dict[CheckKey, Finding | str]:
    out: dict[CheckKey, Finding | str] = {}
    for key in keys:
        try:
            out[key] = ev.decide(key)
        except Exception as exc:  # a rule that raises must raise the same way both times
            out[key] = repr(exc)
    return out


def _figures(ev: Evaluation) -> dict[tuple[str, str, int | None], Any]:
    """What the exporter and the reports read of every GPU (and node), asked in reverse order."""
    out: dict[tuple[str, str, int | None], Any] = {}
    for node in reversed(ev.inventory.names):
        for metric in (*GPU_METRICS, *NODE_METRICS):
            for gpu in [None] if metric in NODE_METRICS else list(range(7, -1, -1)):
                out[(node, metric, gpu)] = ev.sampled(metric, node, gpu)
    return out


def test_every_check_is_decided_the_same_by_a_fresh_view_and_a_warm_one(run: RunFolder) -> None:
    fresh = Evaluation.from_run(run)
    keys = list(fresh.plan.required)
    first = _decide(fresh, keys)
    warm = Evaluation.from_run(run)
    figures = _figures(warm)  # the figures first, then every check backwards, then forwards again
    backwards = _decide(warm, keys[::-1])
    again = _decide(warm, keys)
    assert backwards == first
    assert again == first
    assert _figures(fresh) == figures
    assert warm.peers.against_sku() == fresh.peers.against_sku()
    assert warm.peers.undecided() == fresh.peers.undecided()
    # the comparison is over a fleet whose every fault is found, and whose edited samples are errors, not figures
    found = {
        (f.check, f.node, f.gpu) for f in first.values() if isinstance(f, Finding) and f.status is not CheckStatus.PASS
    }
    assert {
        ("straggler.memory.bandwidth", "gpu-node-2", 3),
        ("straggler.pcie.h2d", "gpu-node-4", None),
        ("p2p.bandwidth", "gpu-node-1", 6),
        ("nccl.all_reduce", "gpu-node-3", None),
        ("straggler.combined", "gpu-node-5", 1),
        ("stability.compute.gemm.fp16", "gpu-node-3", 5),
        ("health.ecc", "gpu-node-1", 5),
        ("memory.bandwidth", "gpu-node-7", 0),
        ("compute.gemm.tf32", "gpu-node-7", 1),
        ("pcie.d2h", "gpu-node-7", 2),
        ("node.reachable", "gpu-node-9", None),
    } <= found, sorted(found)
    assert figures[("gpu-node-7", "memory.bandwidth", 0)] is None
    assert "not numbers" in first[CheckKey("memory.bandwidth", "gpu-node-7", 0)].message  # type: ignore[union-attr]
    assert "recorded no samples" in first[CheckKey("pcie.d2h", "gpu-node-7", 2)].message  # type: ignore[union-attr]


def test_a_released_node_is_judged_again_from_its_evidence(run: RunFolder) -> None:
    ev = Evaluation.from_run(run)
    before = ev.believed("memory.bandwidth", "gpu-node-2", 3)
    ev.release("gpu-node-2")
    assert "gpu-node-2" not in ev._figures  # what the view kept of the node goes with its evidence
    assert ev.believed("memory.bandwidth", "gpu-node-2", 3) == before


def _sample_problem_as_written(samples: list[float], expected: float | None, least: int) -> str | None:
    """sample_problem before its common case was told in two passes (rules/performance.py at 93f6c9a)."""
    if len(samples) < max(least, 5):
        need = max(least, 5)
        why = "a figure needs" if need == 5 else "the spec asks of this probe (certify.samples)"
        return f"{len(samples)} samples, fewer than the {need} {why}"
    odd = [x for x in samples if not math.isfinite(x)]
    if odd:
        return f"{len(odd)} of {len(samples)} samples are not numbers ({odd[0]})"
    low = [x for x in samples if x <= 0]
    if low:
        return f"{len(low)} of {len(samples)} samples are zero or negative ({low[0]})"
    if expected is not None and max(samples) > 10 * expected:
        return (
            f"a sample of {max(samples):.4g} is more than 10x the baseline figure {expected:.4g}: "
            + "no GPU measures that"
        )
    return None


@pytest.mark.parametrize(
    "samples",
    [
        [1.0, 2.0, 3.0, 4.0, 5.0],
        [1.0, 2.0, math.nan, 4.0, 5.0],
        [1.0, math.inf, 3.0, -math.inf, 5.0],
        [1.0, 2.0, math.inf, 4.0, 5.0],
        [1.0, 0.0, 3.0, -2.0, 5.0],
        [1e308, 1e308, 1.0, 2.0, 3.0],  # finite, though their sum is not
        [1e308, 1e308, -1.0, 2.0, 3.0],
        [1.0, 2.0, 3.0, 4.0, 500.0],
        [1.0, 2.0, 3.0],
    ],
)
def test_sample_problem_says_what_it_said_sample_by_sample(samples: list[float]) -> None:
    for expected in (None, 10.0):
        assert sample_problem(samples, expected, 5) == _sample_problem_as_written(samples, expected, 5)
