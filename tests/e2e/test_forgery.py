"""A review tried to get a signed PASS without the cluster having been tested, and to make gpucert crash: each way
it found is a case here. The run folder's mode (run.json) decides what is required; `sign` signs only a verdict
its own counts, coverage and reports support; evidence that contradicts itself is never a pass."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..in_process import gpucert_here
from .conftest import ROOT, SUITES

SPEC = "examples/clean.yaml"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean certification with the all-reduce across nodes and its pairs, and a key pair: shared by the cases."""
    project = tmp_path_factory.mktemp("forgery")
    shutil.copytree(ROOT / "examples", project / "examples")
    shutil.copytree(ROOT / "baselines", project / "baselines")
    doc = yaml.safe_load((project / SPEC).read_text())
    doc["certify"]["multinode"] = {"pairs": True}
    (project / SPEC).write_text(yaml.safe_dump(doc))
    assert gpucert_here("keygen", "keys", cwd=project).returncode == 0
    r = gpucert_here("certify", SPEC, "-q", "--reports", "clean", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    return project


def clean_run(project: Path) -> Path:
    (run,) = (project / "clean").iterdir()
    return run


def copy_of(project: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(clean_run(project), run)
    return run


def sign(project: Path, run: Path) -> Any:
    return gpucert_here("sign", str(run), "--key", "keys/gpucert.key", cwd=project)


def pytest_run_dir(project: Path, spec: Path, run: Path) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(SUITES / "configure"),
            str(SUITES / "certify"),
            "--spec",
            str(spec),
            "--run-dir",
            str(run),
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


# ---- what a run is, and what it is judged by ---------------------------------------------------------------------


def test_a_run_without_its_evidence_cannot_be_judged_as_a_lighter_run(project: Path, tmp_path: Path) -> None:
    run = copy_of(project, tmp_path)
    shutil.rmtree(run / "evidence")
    (run / "verdict.json").unlink()
    r = pytest_run_dir(project, project / SPEC, run)
    assert r.returncode == 4, r.stdout + r.stderr  # a usage error: nothing evaluated, nothing to sign
    assert "a measure run without evidence/" in r.stdout + r.stderr
    assert not (run / "verdict.json").exists()
    # nor can the mode go missing: a run whose mode is unknown is not evaluated in place (re-evaluating its
    # evidence with --evidence judges it as the certification it holds)
    edit_json(run / "run.json", lambda d: d.pop("mode"))
    r = pytest_run_dir(project, project / SPEC, run)
    assert r.returncode == 4
    assert "run.json names no mode" in r.stdout + r.stderr


def test_a_run_is_judged_only_by_the_spec_it_was_prepared_with(project: Path, tmp_path: Path) -> None:
    run = copy_of(project, tmp_path)
    lax = yaml.safe_load((project / SPEC).read_text())
    lax["certify"]["probes"] = ["nccl"]  # same metadata.name, far less to pass
    (tmp_path / "lax.yaml").write_text(yaml.safe_dump(lax))
    shutil.copytree(project / "baselines", tmp_path.parent / "baselines", dirs_exist_ok=True)
    lax["certify"]["baseline"] = str(project / "baselines" / "gpus" / "H100-SXM5-80GB.yaml")
    (tmp_path / "lax.yaml").write_text(yaml.safe_dump(lax))
    r = pytest_run_dir(project, tmp_path / "lax.yaml", run)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "is not the spec.yaml this run was prepared with" in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda run: edit_json(run / "inventory.json", lambda d: d.update(target="static")), "a measure run"),
        (lambda run: edit_json(run / "inventory.json", lambda d: d.update(target="kubernetes")), "of target"),
        (
            lambda run: (run / "recertify.json").write_text(json.dumps({"node": "gpu-node-1", "handover": None})),
            "recertify.json belongs to a recertification run",
        ),
        (lambda run: edit_json(run / "run.json", lambda d: d.update(mode="static")), "a static run"),
    ],
)
def test_a_relabelled_run_is_refused(project: Path, tmp_path: Path, change: Callable[[Path], None], words: str) -> None:
    run = copy_of(project, tmp_path)
    change(run)
    r = gpucert_here("evaluate", SPEC, "--evidence", str(run), "-q", "--reports", str(tmp_path / "re"), cwd=project)
    assert r.returncode == 2, r.stdout + r.stderr
    assert words in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "re").exists() or not any((tmp_path / "re").iterdir())


def test_a_configure_only_run_signs_as_what_it_is(project: Path, tmp_path: Path) -> None:
    r = gpucert_here("configure", SPEC, "-q", "--reports", str(tmp_path / "cfg"), cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (tmp_path / "cfg").iterdir()
    assert sign(project, run).returncode == 0
    v = gpucert_here("verify", str(run), "--key", "keys/gpucert.pub", cwd=project)
    assert v.returncode == 0
    assert "scope: configure only: the cluster's configuration, NOTHING MEASURED" in v.stdout
    certified = copy_of(project, tmp_path)
    assert sign(project, certified).returncode == 0
    v = gpucert_here("verify", str(certified), "--key", "keys/gpucert.pub", cwd=project)
    assert "scope: certification: every node measured and judged" in v.stdout


# ---- what gets signed ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda run: edit_json(run / "verdict.json", lambda d: d.update(result="pass")), "not a verdict gpucert"),
        (lambda run: (run / "verdict.json").write_text("{}"), "not a verdict gpucert wrote"),
        (lambda run: (run / "junit.xml").unlink(), "did not finish writing its reports"),
        (
            lambda run: (run / "junit.xml").write_text(
                (run / "junit.xml").read_text().replace('value="fail"', 'value="pass"')
            ),
            "junit.xml (pass)",
        ),
    ],
)
def test_sign_signs_only_a_verdict_its_run_supports(
    project: Path, tmp_path: Path, change: Callable[[Path], None], words: str
) -> None:
    # a failed run: GPU 3 of node 2 slow
    spoiled = tmp_path / "project"
    shutil.copytree(project / "examples", spoiled / "examples")
    shutil.copytree(project / "baselines", spoiled / "baselines")
    fleet = yaml.safe_load((spoiled / "examples/fleets/h100-4x8.yaml").read_text())
    fleet["faults"] = [{"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.5}]
    (spoiled / "examples/fleets/h100-4x8.yaml").write_text(yaml.safe_dump(fleet))
    assert gpucert_here("certify", SPEC, "-q", cwd=spoiled).returncode == 1
    (run,) = (spoiled / "reports").iterdir()
    change(run)
    r = gpucert_here("sign", str(run), "--key", str(project / "keys" / "gpucert.key"), cwd=spoiled)
    assert r.returncode == 2, r.stdout + r.stderr
    assert words in r.stderr
    assert not (run / "certificate.intoto.json").exists()


# ---- evidence that contradicts itself ------------------------------------------------------------------------------


def node_doc(run: Path, node: str, change: Callable[[dict[str, Any]], None]) -> None:
    edit_json(run / "evidence" / f"{node}.json", change)


def _gpu(index: int, change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda d: change(d["gpus"][index])


def _dcgm_gpu5_gone(d: dict[str, Any]) -> None:
    d["dcgm"]["results"]["memory"]["gpus"].pop("5")


@pytest.mark.parametrize(
    ("change", "check", "where", "status", "words"),
    [
        (lambda d: d["nccl"].update(correct=False), "nccl.all_reduce", None, "fail", "wrong values"),
        (lambda d: d["nccl"].update(ranks=1), "nccl.all_reduce", None, "error", "over 1 ranks"),
        (_dcgm_gpu5_gone, "dcgm.memory", 5, "error", "not for this one"),
        (lambda d: d["dcgm"]["results"]["memory"]["gpus"]["2"].update(status="Warn"), "dcgm.memory", 2, "fail", "Warn"),
        (lambda d: d["dcgm"].update(exit_code=226), "dcgm.software", 0, "error", "exited 226"),
        (
            _gpu(1, lambda g: g["health"]["ecc"].update(volatile_uncorrected=None, aggregate_uncorrected=12)),
            "health.ecc",
            1,
            "error",
            "not reported",
        ),
        (_gpu(1, lambda g: g["health"]["remapped_rows"].update(failure=None)), "health.remapped_rows", 1, "error", ""),
        (_gpu(4, lambda g: g.update(product="NVIDIA A100-SXM4-40GB")), "inventory.product", None, "fail", "A100"),
        (_gpu(4, lambda g: g.update(memory_mib=40960)), "inventory.product", None, "fail", "40960 MiB"),
        (lambda d: d["system"].update(driver_version="535.54.03"), "stack.version", None, "fail", "driver 535.54.03"),
        (_gpu(6, lambda g: g.update(index=9)), "inventory.gpus", None, "fail", "numbered its GPUs"),
        (
            _gpu(0, lambda g: g["measurements"]["memory.bandwidth"].update(unit="MB/s")),
            "memory.bandwidth",
            0,
            "error",
            "measured in MB/s",
        ),
    ],
)
def test_evidence_that_contradicts_itself_is_never_a_pass(
    project: Path,
    tmp_path: Path,
    change: Callable[[dict[str, Any]], None],
    check: str,
    where: int | None,
    status: str,
    words: str,
) -> None:
    run = copy_of(project, tmp_path)
    node_doc(run, "gpu-node-1", change)
    r = gpucert_here("evaluate", SPEC, "--evidence", str(run), "-q", "--reports", str(tmp_path / "re"), cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    (re_run,) = (tmp_path / "re").iterdir()
    verdict = json.loads((re_run / "verdict.json").read_text())
    mine = [f for f in verdict["findings"] if f["check"] == check and f["node"] == "gpu-node-1" and f["gpu"] == where]
    assert mine, verdict["findings"]
    assert mine[0]["status"] == status
    assert words in mine[0]["message"]


@pytest.mark.parametrize(
    ("name", "change", "words"),
    [
        ("default/nccl.json", lambda d: d.update(nodes=["gpu-node-1", "gpu-node-1"]), "named twice"),
        ("default/nccl.json", lambda d: d.update(nodes=["gpu-node-1", "intruder"]), "intruder not in this run"),
        ("pairs-0001.json", lambda d: d["pairs"][0].update(nodes=["gpu-node-1", "stranger"]), "stranger not in"),
        ("pairs-0001.json", lambda d: d["pairs"].append(d["pairs"][0]), "measured twice"),
    ],
)
def test_fabric_evidence_of_other_nodes_is_an_error(
    project: Path, tmp_path: Path, name: str, change: Callable[[dict[str, Any]], None], words: str
) -> None:
    run = copy_of(project, tmp_path)
    edit_json(run / "evidence" / "multinode" / name, change)
    r = gpucert_here("evaluate", SPEC, "--evidence", str(run), "-q", "--reports", str(tmp_path / "re"), cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    (re_run,) = (tmp_path / "re").iterdir()
    findings = json.loads((re_run / "verdict.json").read_text())["findings"]
    assert any(f["status"] == "error" and words in f["message"] for f in findings), findings


# ---- inputs that crashed it ---------------------------------------------------------------------------------------


def test_inputs_that_crashed_are_one_line_errors(project: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    cases = [
        ("certify", SPEC, "--reports", str(tmp_path / "afile")),
        ("schema", "--out", str(tmp_path / "afile" / "x")),
        ("certify", "/dev/zero"),
        ("evaluate", SPEC, "--evidence", str(clean_run(project)), "--reports", str(clean_run(project) / "evidence")),
    ]
    os.mkfifo(tmp_path / "fifo")
    cases.append(("certify", str(tmp_path / "fifo")))
    for args in cases:
        r = gpucert_here(*args, cwd=project)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert not list((clean_run(project) / "evidence").glob("*clean-h100*"))  # nothing written into the recorded run


def test_node_names_too_long_for_a_file_and_infinite_figures(project: Path, tmp_path: Path) -> None:
    work = tmp_path / "p"
    shutil.copytree(project / "examples", work / "examples")
    shutil.copytree(project / "baselines", work / "baselines")
    fleet = work / "examples/fleets/h100-4x8.yaml"
    doc = yaml.safe_load(fleet.read_text())
    doc["nodes"]["namePrefix"] = ("a" * 62 + ".") * 3 + "a" * 57 + "-"
    fleet.write_text(yaml.safe_dump(doc))
    r = gpucert_here("certify", SPEC, cwd=work)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "nodes.namePrefix" in r.stderr
    shutil.copy(project / "examples/fleets/h100-4x8.yaml", fleet)
    base = work / "baselines/gpus/H100-SXM5-80GB.yaml"
    b = yaml.safe_load(base.read_text())
    b["metrics"]["memory.bandwidth"]["expected"] = float("inf")
    base.write_text(yaml.safe_dump(b))
    r = gpucert_here("certify", SPEC, cwd=work)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "metrics.memory.bandwidth.expected" in r.stderr


def test_cache_show_plans_nothing(pytester: pytest.Pytester) -> None:
    spec = yaml.safe_load((ROOT / SPEC).read_text())
    spec["target"]["fleet"] = str(ROOT / "examples/fleets/h100-4x8.yaml")
    spec["certify"]["baseline"] = str(ROOT / "baselines/gpus/H100-SXM5-80GB.yaml")
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec))
    pytester.runpytest_subprocess(
        str(SUITES / "certify"), "--spec", "spec.yaml", "--reports", str(pytester.path / "reports"), "--cache-show"
    )
    assert not (pytester.path / "reports").exists()


def test_a_skip_whose_cause_passed_is_an_error_everywhere() -> None:
    from gpucert.evaluate.evaluation import Evaluation
    from gpucert.plan.checks import CheckKey, CheckStatus, Finding

    class Contradicted(Evaluation):
        def _decide(self, key: CheckKey) -> Finding:
            if key.check == "node.reachable":
                return Finding(key.check, CheckStatus.PASS, key.node)
            cause = str(CheckKey("node.reachable", key.node))
            return Finding(key.check, CheckStatus.SKIP, key.node, key.gpu, "not measured", cause=cause)

    ev = Contradicted.__new__(Contradicted)
    found = ev.decide(CheckKey("health.ecc", "n1", 0))
    assert found.status is CheckStatus.ERROR
    assert "node.reachable@n1, which did not fail (pass)" in found.message


# ---- a verdict that does not add up, re-signed (issue 23 item 5) -------------------------------------------------


def test_a_re_signed_verdict_whose_counts_do_not_add_up_is_refused(project: Path, tmp_path: Path) -> None:
    """Whoever holds the key can sign anything; what `verify` and `accept` still catch is a verdict that contradicts
    itself: a failed run's findings dropped and its result made pass, the nodes' own counts left standing."""
    from gpucert.report import attest

    spoiled = tmp_path / "project"
    shutil.copytree(project / "examples", spoiled / "examples")
    shutil.copytree(project / "baselines", spoiled / "baselines")
    fleet = yaml.safe_load((spoiled / "examples/fleets/h100-4x8.yaml").read_text())
    fleet["faults"] = [{"kind": "slow", "node": "gpu-node-2", "gpu": 3, "metric": "memory.bandwidth", "factor": 0.5}]
    (spoiled / "examples/fleets/h100-4x8.yaml").write_text(yaml.safe_dump(fleet))
    assert gpucert_here("certify", SPEC, "-q", cwd=spoiled).returncode == 1
    (run,) = (spoiled / "reports").iterdir()
    key, pub = project / "keys" / "gpucert.key", project / "keys" / "gpucert.pub"

    def forge(v: dict[str, Any]) -> None:
        v.update(result="pass", findings=[])
        v["summary"].update(failed=0, errors=0)
        for node in v["nodes"].values():
            node.update(result="pass", failing=[])

    edit_json(run / "verdict.json", forge)
    for name in ("junit.xml", "report.html"):  # the reports said fail too
        (run / name).unlink()
    predicate = {"scope": {"mode": "measure", "suites": ["configure", "certify"]}, "result": "pass"}
    attest.sign_folder(run, key, attest.PREDICATE_TYPE, predicate)
    r = gpucert_here("verify", str(run), "--key", str(pub), cwd=spoiled)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the signed verdict.json is not one gpucert writes" in r.stdout + r.stderr
    assert "nodes.gpu-node-2 counts" in r.stdout + r.stderr
    r = gpucert_here("accept", str(run), "--sign-key", str(key), "--out", str(tmp_path / "acc"), cwd=spoiled)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "its signed verdict.json is not one gpucert writes" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "acc").exists() or not any((tmp_path / "acc").iterdir())
