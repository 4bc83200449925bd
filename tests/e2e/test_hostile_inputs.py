"""Inputs a careless or hostile user gives: each is one line naming the file, the key and the fix (exit 2), never
a traceback, never a PASS, never a file read or written outside its folder, never an empty run folder."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..in_process import gpucert_here

FLEET = "examples/fleets/h100-4x8-faulty.yaml"
DEMO = "examples/demo.yaml"
H100 = "baselines/gpus/H100-SXM5-80GB.yaml"


def edit_yaml(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))


def one_line_error(r: Any, *expected: str) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    line: str = lines[0]
    return line


def no_run_folder(project: Path) -> None:
    reports = project / "reports"
    assert not reports.exists() or not any(reports.iterdir()), list(reports.iterdir())


def faults(*items: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["faults"] = list(items)

    return change


# ---- the spec, the fleet and the baseline ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "change", "expected"),
    [
        (DEMO, lambda d: d["certify"].update(probes=[]), ["certify.probes", "at least 1"]),
        (DEMO, lambda d: d["certify"].update(probes=["memory", "memory"]), ["probes listed twice: memory"]),
        (
            DEMO,
            lambda d: d["certify"].update(baseline="../baselines/gpus/A100-SXM4-80GB.yaml"),
            ["A100-SXM4-80GB.yaml: product:", "expects NVIDIA-H100-80GB-HBM3 (expect.gpuProduct)"],
        ),
        (
            DEMO,
            lambda d: d["expect"].update(gpuProdct="x"),
            ["expect.gpuProdct: unknown key; did you mean gpuProduct?"],
        ),
        (DEMO, lambda d: d["target"].update(flet="x"), ["target.flet: unknown key; did you mean fleet?"]),
        (
            FLEET,
            faults({"kind": "version", "node": "gpu-node-1", "component": "driver", "version": "x.y"}),
            ["faults[0].version"],
        ),
        (
            FLEET,
            faults({"kind": "version", "node": "gpu-node-1", "component": "drvier", "version": "1.2"}),
            ["faults[0].component", "'drvier'"],
        ),
        (
            FLEET,
            faults({"kind": "ordering", "node": "gpu-node-1", "component": "device-plugin", "before": "toolkit"}),
            ["faults[0].before"],
        ),
        (
            FLEET,
            faults({"kind": "ecc", "node": "gpu-node-1", "gpu": 8, "uncorrected": 1}),
            ["faults[0].gpu", "GPUs are 0..7"],
        ),
        (
            FLEET,
            faults({"kind": "slow", "node": "gpu-node-1", "gpu": 2, "metric": "nccl.all_reduce", "factor": 0.5}),
            ["faults[0].gpu", "one figure per node"],
        ),
        (
            FLEET,
            lambda d: d["nodes"].update(namePrefix="../../../x-"),
            ["nodes.namePrefix", "not a Kubernetes node name"],
        ),
        (FLEET, lambda d: d.update(sku="../../etc/passwd"), ["sku:", "not a valid SKU name"]),
        # a NUL byte in a path the spec names: os.path.realpath raises ValueError, not OSError
        (DEMO, lambda d: d["target"].update(fleet="fleets/a\x00.yaml"), ["target.fleet", "cannot be resolved"]),
        (DEMO, lambda d: d["certify"].update(baseline="a\x00.yaml"), ["certify.baseline", "cannot be resolved"]),
        # a component's name is part of a check id: a bidi override or a bell would forge what a report says
        (
            DEMO,
            lambda d: d["stack"]["components"][1].update(name="cuda\u202e"),
            ["stack.components[1].name", "should match pattern"],
        ),
        (DEMO, lambda d: d["stack"]["components"][1].update(name="c" * 64), ["stack.components[1].name", "at most 63"]),
        # issue 23 item 2: baselines that would pass anything
        (
            H100,
            lambda d: d["metrics"]["memory.bandwidth"].update(tolerance=0.4),
            ["metrics.memory.bandwidth.tolerance:", "passes a GPU at 60%"],
        ),
        (
            H100,
            lambda d: d["metrics"]["compute.gemm.fp16"].update(comparison="max"),
            ["metrics.compute.gemm.fp16.comparison:", "write comparison: min"],
        ),
        (H100, lambda d: d["health"].update(applicationXids=[13, 64]), ["health.applicationXids[1]:", "XID 64"]),
    ],
)
def test_bad_documents_exit_2_in_one_line(project: Path, target: str, change: Any, expected: list[str]) -> None:
    edit_yaml(project / target, change)
    r = gpucert_here("certify", DEMO, "-q", cwd=project)
    named = [] if "A100" in expected[0] else [Path(target).name]
    one_line_error(r, *named, *expected)
    no_run_folder(project)


def test_a_baseline_without_a_figure_for_a_requested_probe(project: Path) -> None:
    edit_yaml(project / "baselines" / "gpus" / "H100-SXM5-80GB.yaml", lambda d: d["metrics"].pop("pcie.d2h"))
    r = gpucert_here("certify", DEMO, "-q", cwd=project)
    one_line_error(r, "H100-SXM5-80GB.yaml", "metrics:", "pcie.d2h (probe pcie)")
    no_run_folder(project)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("apiVersion: x\nkind: ClusterSpec\nkind: ClusterSpec\n", "key 'kind' is written twice"),
        ("apiVersion: " + "[" * 50000 + "]" * 50000 + "\n", "nested too deeply"),
        ("a: &a [1]\nb: *a\n", "aliases are not allowed"),
        # PyYAML's reader refuses a control character before parsing starts (ReaderError, no problem_mark)
        ("apiVersion: x\nkind: ClusterSpec\nname: \x01\n", "spec.yaml:3: YAML not accepted: character #x0001"),
    ],
)
def test_yaml_gpucert_does_not_accept(project: Path, text: str, expected: str) -> None:
    (project / "spec.yaml").write_text(text)
    one_line_error(gpucert_here("certify", "spec.yaml", cwd=project), "spec.yaml", expected)
    no_run_folder(project)


def test_an_alias_bomb_is_refused_at_once(project: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(ord("b"), ord("j")):
        prev = chr(i - 1)
        lines.append(f"{chr(i)}: &{chr(i)} [" + ",".join([f"*{prev}"] * 9) + "]")
    (project / "bomb.yaml").write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    one_line_error(gpucert_here("certify", "bomb.yaml", cwd=project), "bomb.yaml:2", "aliases are not allowed")
    assert time.monotonic() - started < 20  # it took 24 s and 2.2 GB before; the interpreter's start is most of it


def test_a_symlink_loop_as_baseline(project: Path) -> None:
    os.symlink("loop-b", project / "loop-a")
    os.symlink("loop-a", project / "loop-b")
    edit_yaml(project / DEMO, lambda d: d["certify"].update(baseline="../loop-a"))
    one_line_error(gpucert_here("certify", DEMO, cwd=project), "demo.yaml", "certify.baseline", "cannot be resolved")
    no_run_folder(project)


def test_missing_gpu_on_every_gpu_of_a_node_is_one_finding(project: Path) -> None:
    edit_yaml(project / FLEET, faults(*({"kind": "missing-gpu", "node": "gpu-node-1", "gpu": i} for i in range(8))))
    r = gpucert_here("certify", DEMO, "-q", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    (run,) = (project / "reports").iterdir()
    verdict = json.loads((run / "verdict.json").read_text())
    assert [(f["check"], f["node"]) for f in verdict["findings"]] == [("inventory.gpus", "gpu-node-1")]
    assert verdict["coverage"]["complete"] is True


HANDOVER_WAIVERS = "examples/handover/waivers.yaml"


@pytest.mark.parametrize(
    ("approved_by", "reason", "expected"),
    [
        ("m.mallory", "credit agreed in PO 4411", "m.mallory is not among the spec's approvers"),
        ("buyer: j.doe; vendor: a.smith; m.mallory", "credit agreed", "m.mallory is not among the spec's approvers"),
        ("  ", "credit agreed in PO 4411", "waivers[0].approvedBy: is blank"),
        ("buyer: j.doe", "\t", "waivers[0].reason: is blank"),
    ],
)
def test_a_waiver_without_people_is_refused(project: Path, approved_by: str, reason: str, expected: str) -> None:
    """Issue 23 item 3: the approvers are people the spec names (acceptance.approvers), and the reason is written."""

    def change(doc: dict[str, Any]) -> None:
        doc["waivers"][0].update(approvedBy=approved_by, reason=reason)

    edit_yaml(project / HANDOVER_WAIVERS, change)
    r = gpucert_here("certify", "examples/handover/spec-after-repair.yaml", "-q", cwd=project)
    one_line_error(r, "waivers.yaml", expected)
    no_run_folder(project)


# issue 23 item 7: pydantic's lax mode reads `true` as 1, "3" as 3 and 2.0 as 2; where a user document wants a number
# (a count, a seed, a level, a figure, a tolerance, a waiver's limit) a bool, a string or a fraction is refused
POOLS = "examples/pools.yaml"


@pytest.mark.parametrize(
    ("spec", "target", "change", "expected"),
    [
        (DEMO, DEMO, lambda d: d["expect"].update(nodes=True), "expect.nodes: true is a yes/no value, not a number"),
        (DEMO, DEMO, lambda d: d["expect"].update(nodes="4"), "expect.nodes: '4' is text, not a number"),
        (DEMO, DEMO, lambda d: d["expect"].update(nodes=4.0), "expect.nodes: 4.0 is not a whole number"),
        (DEMO, DEMO, lambda d: d["certify"].update(dcgm={"level": True}), "certify.dcgm.level: true is a yes/no"),
        (DEMO, FLEET, lambda d: d.update(seed=True), "seed: true is a yes/no value"),
        (DEMO, H100, lambda d: d["pcie"].update(width="16"), "pcie.width: '16' is text"),
        (DEMO, H100, lambda d: d["pcie"].update(width=True), "pcie.width: true is a yes/no value"),  # Literal[1, ...]
        (
            DEMO,
            H100,
            lambda d: d["metrics"]["memory.bandwidth"].update(tolerance=True),
            "metrics.memory.bandwidth.tolerance: true is a yes/no value",
        ),
        (DEMO, H100, lambda d: d["health"].update(applicationXids=[13, True]), "health.applicationXids[1]: true"),
        (POOLS, POOLS, lambda d: d["pools"][1]["expect"].update(nodes=True), "pools[1].expect.nodes: true"),
        (
            "examples/handover/spec-after-repair.yaml",
            HANDOVER_WAIVERS,
            lambda d: d["waivers"][0]["accept"].update(min="640"),
            "waivers[0].accept.min: '640' is text, not a number",
        ),
    ],
)
def test_a_number_written_as_a_bool_or_text_is_refused(
    project: Path, spec: str, target: str, change: Any, expected: str
) -> None:
    edit_yaml(project / target, change)
    r = gpucert_here("certify", spec, "-q", cwd=project)
    one_line_error(r, Path(target).name, expected, "write ")
    no_run_folder(project)


def test_a_handover_baseline_figure_written_as_a_bool_is_refused(tmp_path: Path) -> None:
    from gpucert.errors import ConfigError
    from gpucert.spec.handover import load_node_baseline

    doc = {
        "apiVersion": "gpucert.io/v1alpha1",
        "kind": "NodeBaseline",
        "node": "gpu-node-1",
        "sku": "H100-SXM5-80GB",
        "recorded": {"run": "r", "date": "2026-12-04", "result": "pass"},
        "gpus": [
            {"index": 0, "metrics": {"memory.bandwidth": {"median": 3000.0, "spread": 0.01, "n": 5, "unit": "GB/s"}}}
        ],
    }
    path = tmp_path / "gpu-node-1.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_node_baseline(path).gpus[0].metrics["memory.bandwidth"].n == 5
    doc["gpus"][0]["metrics"]["memory.bandwidth"]["n"] = True  # type: ignore[index]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"gpus\[0\]\.metrics\.memory\.bandwidth\.n: true is a yes/no value"):
        load_node_baseline(path)


# ---- recorded evidence --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean certification whose run folder the tests below copy and spoil."""
    from .conftest import ROOT

    project = tmp_path_factory.mktemp("recorded")
    shutil.copytree(ROOT / "examples", project / "examples")
    shutil.copytree(ROOT / "baselines", project / "baselines")
    r = gpucert_here("certify", "examples/clean.yaml", "-q", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (project / "reports").iterdir()
    return run


def spoil(run: Path, dest: Path, change: Callable[[Path], None]) -> Path:
    copy = dest / "ev"
    shutil.copytree(run, copy)
    change(copy)
    return copy


def evaluate(project: Path, evidence: Path) -> Any:
    return gpucert_here("evaluate", "examples/clean.yaml", "--evidence", str(evidence), "-q", cwd=project)


def json_edit(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _inventory_node(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        change(doc["nodes"][0])
        return doc

    json_edit(run / "inventory.json", edit)


def _loop(run: Path) -> None:
    (run / "evidence" / "gpu-node-1.json").unlink()
    os.symlink("l2", run / "evidence" / "gpu-node-1.json")
    os.symlink("gpu-node-1.json", run / "evidence" / "l2")


def _samples(node: str, gpu: int, metric: str, samples: list[float]) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        def edit(doc: dict[str, Any]) -> dict[str, Any]:
            doc["gpus"][gpu]["measurements"][metric]["samples"] = samples
            return doc

        json_edit(run / "evidence" / f"{node}.json", edit)

    return change


def _health(gpu: int, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit_run(run: Path) -> None:
        def edit(doc: dict[str, Any]) -> dict[str, Any]:
            change(doc["gpus"][gpu]["health"])
            return doc

        json_edit(run / "evidence" / "gpu-node-1.json", edit)

    return edit_run


NAN, INF = float("nan"), float("inf")


def _node_doc(change: Callable[[dict[str, Any]], None], node: str = "gpu-node-1") -> Callable[[Path], None]:
    def edit_run(run: Path) -> None:
        def edit(doc: dict[str, Any]) -> dict[str, Any]:
            change(doc)
            return doc

        json_edit(run / "evidence" / f"{node}.json", edit)

    return edit_run


def _pairs(change: Callable[[list[dict[str, Any]]], None]) -> Callable[[Path], None]:
    return _node_doc(lambda d: change(d["p2p"]["pairs"]))


def _pair(pairs: list[dict[str, Any]], src: int, dst: int) -> dict[str, Any]:
    return next(p for p in pairs if (p["src"], p["dst"]) == (src, dst))


def _dcgm_gpus(test: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return _node_doc(lambda d: change(d["dcgm"]["results"][test]["gpus"]))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: (r / "evidence" / "gpu-node-1.json").write_text("[]"), ["gpu-node-1.json", "a JSON object"]),
        (
            lambda r: (r / "evidence" / "gpu-node-1.json").write_bytes(bytes(range(256))),
            ["gpu-node-1.json", "not JSON"],
        ),
        (_loop, ["gpu-node-1.json", "links are refused"]),
        (lambda r: _inventory_node(r, lambda n: n.update(extra=1)), ["inventory.json", "nodes.0.extra"]),
        (lambda r: _inventory_node(r, lambda n: n.update(name="../../../outside")), ["not a Kubernetes node name"]),
        (
            lambda r: json_edit(r / "inventory.json", lambda d: {**d, "nodes": [*d["nodes"], d["nodes"][0]]}),
            ["gpu-node-1 is listed twice"],
        ),
        # a reading or counter that is not a number: `false` would be a count of 0 to pydantic's lax mode
        (
            _health(2, lambda h: h["ecc"].update(volatile_uncorrected=False)),
            ["gpu-node-1.json", "gpus.2.health.ecc.volatile_uncorrected", "valid integer"],
        ),
        (_health(2, lambda h: h.update(temperature_c="40")), ["gpus.2.health.temperature_c", "valid number"]),
        (_node_doc(lambda d: d["gpus"][1].update(index=True)), ["gpu-node-1.json", "gpus.1.index"]),
        (
            lambda r: shutil.copy(r / "evidence" / "gpu-node-2.json", r / "evidence" / "gpu-node-1.json"),
            ["gpu-node-1.json", "its evidence is of node 'gpu-node-2'"],
        ),
    ],
)
def test_unusable_recorded_evidence_exits_2(
    recorded: Path, tmp_path: Path, change: Callable[[Path], None], expected: list[str]
) -> None:
    project = recorded.parent.parent
    evidence = spoil(recorded, tmp_path, change)
    reports = project / "reports"
    before = set(reports.iterdir())
    one_line_error(evaluate(project, evidence), *expected)
    assert set(reports.iterdir()) == before  # no run folder left behind


@pytest.mark.parametrize(
    ("change", "check", "why"),
    [
        (_samples("gpu-node-1", 2, "memory.bandwidth", [2900.0] * 19 + [NAN]), "memory.bandwidth", "not numbers"),
        (_samples("gpu-node-1", 2, "memory.bandwidth", [2900.0] * 19 + [INF]), "memory.bandwidth", "not numbers"),
        (_samples("gpu-node-1", 2, "memory.bandwidth", [-2900.0] * 20), "memory.bandwidth", "zero or negative"),
        (_samples("gpu-node-1", 2, "pcie.h2d", [5.3e6] * 10), "pcie.h2d", "no GPU measures that"),
        (_samples("gpu-node-1", 2, "compute.gemm.bf16", [700.0] * 3), "compute.gemm.bf16", "3 samples, fewer than"),
        (_health(2, lambda h: h["ecc"].update(volatile_corrected=-5)), "health.ecc", "cannot be negative"),
        (_health(2, lambda h: h.update(clock_event_reasons=-1)), "health.throttle", "out of range"),
        (_health(2, lambda h: h["pcie"].update(current_generation=9)), "health.pcie_link", "out of range"),
        (_health(2, lambda h: h.update(temperature_c=-300)), "health.temperature", "out of range"),
        (
            _health(2, lambda h: h.update(clock_event_reasons=None, throttle_under_load=[])),
            "health.throttle",
            "were not reported",
        ),
        (_health(2, lambda h: h.update(nvlink_active=None)), "health.nvlink", "NVLink state was not reported"),
        (_health(2, lambda h: h.update(nvlink_active=[False] * 18)), "health.nvlink", "links are inactive"),
        (_health(2, lambda h: h.update(nvlink_errors=None)), "health.nvlink", "error counters were not read"),
        # issue 23 item 1: a sample that is not a number (a bool is an int to Python and to pydantic's lax mode)
        (_samples("gpu-node-1", 2, "memory.bandwidth", [True] * 20), "memory.bandwidth", "not numbers"),
        (_samples("gpu-node-1", 2, "compute.gemm.bf16", [700.0] * 9 + ["700"]), "compute.gemm.bf16", "not numbers"),
        (_samples("gpu-node-1", 2, "pcie.h2d", [50.0] * 9 + [None]), "pcie.h2d", "not numbers"),
        (_pairs(lambda ps: _pair(ps, 2, 3).update(samples=[True] * 20)), "p2p.bandwidth", "not numbers"),
        (_pairs(lambda ps: _pair(ps, 2, 3).update(samples=[INF] * 20)), "p2p.bandwidth", "not numbers"),
        # a P2P matrix with a pair missing, twice, a GPU paired with itself, or copies staged through the host
        (_pairs(lambda ps: ps.remove(_pair(ps, 2, 5))), "p2p.bandwidth", "lacks the pairs 2->5"),
        (_pairs(lambda ps: ps.append(dict(_pair(ps, 2, 3)))), "p2p.bandwidth", "holds the pair 2->3 twice"),
        (_pairs(lambda ps: _pair(ps, 2, 3).update(dst=2)), "p2p.bandwidth", "pairs GPU 2 with itself"),
        (_pairs(lambda ps: _pair(ps, 2, 3).update(dst=8)), "p2p.bandwidth", "a GPU the node does not show"),
        (_pairs(lambda ps: _pair(ps, 4, 2).update(peer_access=False)), "p2p.bandwidth", "no peer access"),
        # DCGM's per-GPU result missing: the test's summary (or nothing) is never this GPU's pass
        (_dcgm_gpus("memory", lambda g: g.pop("2")), "dcgm.memory", "not for this one"),
        (_dcgm_gpus("memory", lambda g: g.clear()), "dcgm.memory", "no per-GPU result of the memory test"),
        (_dcgm_gpus("software", lambda g: g.clear()), "dcgm.software", "no per-GPU result of the software test"),
        # a reading of Infinity, or an endless throttle window
        (_health(2, lambda h: h.update(temperature_c=INF)), "health.temperature", "out of range"),
        (
            _health(2, lambda h: h.update(throttle_under_load=[{"probe": "compute.gemm.bf16", "seconds": INF}])),
            "health.throttle",
            "counters out of range",
        ),
    ],
)
def test_evidence_that_cannot_be_believed_is_an_error_never_a_pass(
    recorded: Path, tmp_path: Path, change: Callable[[Path], None], check: str, why: str
) -> None:
    project = recorded.parent.parent
    r = evaluate(project, spoil(recorded, tmp_path, change))
    assert r.returncode == 1, r.stdout + r.stderr
    run = sorted((project / "reports").iterdir())[-1]
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["result"] == "fail"
    errors = [f for f in verdict["findings"] if f["check"] == check and (f["node"], f["gpu"]) == ("gpu-node-1", 2)]
    assert len(errors) == 1, verdict["findings"]
    assert errors[0]["status"] == "error"
    assert why in errors[0]["message"]


def _times(started: str | None = None, finished: str | None = None) -> Callable[[Path], None]:
    def change(doc: dict[str, Any]) -> None:
        doc.update({k: v for k, v in (("started", started), ("finished", finished)) if v is not None})

    return _node_doc(change)


def _nameless(gpu: int) -> Callable[[Path], None]:
    return _node_doc(lambda d: d["gpus"][gpu].update(uuid=" ", serial=None))


@pytest.mark.parametrize(
    ("change", "check", "why"),
    [
        (_times("2026-12-02T18:10:00+00:00", "2026-12-02T18:00:00+00:00"), "node.reachable", "before it started"),
        (_times(started="yesterday"), "node.reachable", "not ISO 8601 timestamps"),
        (_times("2026-12-02T18:00:00", "2026-12-02T18:10:00"), "node.reachable", "carry no time zone"),
        (_nameless(3), "inventory.gpus", "GPUs [3] report neither a UUID nor a serial"),
    ],
)
def test_node_evidence_that_cannot_be_believed_is_an_error_on_the_node(
    recorded: Path, tmp_path: Path, change: Callable[[Path], None], check: str, why: str
) -> None:
    project = recorded.parent.parent
    r = evaluate(project, spoil(recorded, tmp_path, change))
    assert r.returncode == 1, r.stdout + r.stderr
    run = sorted((project / "reports").iterdir())[-1]
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["result"] == "fail"
    errors = [f for f in verdict["findings"] if f["status"] in ("error", "fail")]
    assert [(f["check"], f["node"]) for f in errors] == [(check, "gpu-node-1")], verdict["findings"]
    assert why in errors[0]["message"]
    assert verdict["nodes"]["gpu-node-1"]["result"] != "pass"


def test_the_same_gpu_twice_and_evidence_of_another_cluster(recorded: Path, tmp_path: Path) -> None:
    project = recorded.parent.parent

    def change(run: Path) -> None:
        def twice(doc: dict[str, Any]) -> dict[str, Any]:
            doc["gpus"][1]["serial"] = doc["gpus"][0]["serial"]
            return doc

        json_edit(run / "evidence" / "gpu-node-1.json", twice)
        stranger = json.loads((run / "evidence" / "gpu-node-2.json").read_text())
        stranger["node"] = "gpu-node-9"
        (run / "evidence" / "gpu-node-9.json").write_text(json.dumps(stranger))

    r = evaluate(project, spoil(recorded, tmp_path, change))
    assert r.returncode == 1
    run = sorted((project / "reports").iterdir())[-1]
    findings = {
        (f["check"], f["node"]): f["message"] for f in json.loads((run / "verdict.json").read_text())["findings"]
    }
    assert "reported by gpu-node-1/gpu0, gpu-node-1/gpu1" in findings[("inventory.gpus", "gpu-node-1")]
    assert "gpu-node-9.json" in findings[("inventory.nodes", None)]


# ---- names that would leave their folder ---------------------------------------------------------------------


def test_recertify_refuses_a_node_name_that_is_a_path(project: Path) -> None:
    (project / "victim.lock").write_text("{}")
    reports = project / "deep" / "reports"
    r = gpucert_here(
        "recertify", "../../../victim", "--spec", "examples/clean.yaml", "--reports", str(reports), cwd=project
    )
    one_line_error(r, "NODE", "not a Kubernetes node name")
    assert (project / "victim.lock").exists()
    assert not reports.exists()


def test_keygen_onto_a_dangling_symlink(project: Path) -> None:
    (project / "keys").mkdir()
    os.symlink(project / "elsewhere" / "stolen.key", project / "keys" / "gpucert.key")
    one_line_error(gpucert_here("keygen", "keys", cwd=project), "gpucert.key", "a key (or a link) already exists")
    assert not (project / "elsewhere").exists()


# ---- verify --------------------------------------------------------------------------------------------------


def test_verify_checks_every_file_but_the_root_envelope(recorded: Path, tmp_path: Path) -> None:
    project = recorded.parent.parent
    keys = tmp_path / "keys"
    assert gpucert_here("keygen", str(keys), cwd=project).returncode == 0
    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    assert gpucert_here("sign", str(run), "--key", str(keys / "gpucert.key"), cwd=project).returncode == 0
    shutil.copy(run / "certificate.intoto.json", run / "evidence" / "certificate.intoto.json")
    (run / "empty").mkdir()
    r = gpucert_here("verify", str(run), "--key", str(keys / "gpucert.pub"), cwd=project)
    assert r.returncode == 1
    assert "added: evidence/certificate.intoto.json" in r.stdout
    assert "added: empty/" in r.stdout
    # a key that did not sign it: the envelope is named, and nothing of its payload is shown
    other = tmp_path / "other"
    assert gpucert_here("keygen", str(other), cwd=project).returncode == 0
    r = gpucert_here("verify", str(run), "--key", str(other / "gpucert.pub"), cwd=project)
    assert r.returncode == 1
    assert f"{run / 'certificate.intoto.json'} holds 1 signature" in r.stdout.replace("\n", " ")
    assert "result" not in r.stdout
    assert "spec " not in r.stdout
