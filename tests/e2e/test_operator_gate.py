"""`gpucert configure SPEC --static --operator-values ... --cluster-policy ... --base-ref REF`: the pull-request gate
over the GPU Operator configuration and the baselines a change edits, as a CI job runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..in_process import gpucert_here
from .conftest import ROOT

OPERATOR = ROOT / "tests" / "fixtures" / "operator"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A platform team's repository: the gate spec, its baselines and the operator values, committed on main."""
    shutil.copytree(ROOT / "baselines" / "gpus", tmp_path / "baselines" / "gpus")
    (tmp_path / "specs").mkdir()
    shutil.copy(ROOT / "examples" / "gate.yaml", tmp_path / "specs" / "prod.yaml")
    shutil.copytree(OPERATOR, tmp_path / "gpu-operator")
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "the cluster as it is")
    return tmp_path


def git(cwd: Path, *args: str) -> None:
    ident = ["-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def gate(repo: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path | None]:
    r = gpucert_here("configure", "specs/prod.yaml", "--static", "-q", *args, cwd=repo)
    runs = sorted((repo / "reports").glob("*")) if (repo / "reports").exists() else []
    if not runs:
        return r, {}, None
    run = runs[-1]
    verdict = json.loads((run / "verdict.json").read_text())
    shutil.move(run, repo / f"done-{len(list(repo.glob('done-*')))}")  # the next gate writes a folder of its own
    return r, verdict, repo / f"done-{len(list(repo.glob('done-*'))) - 1}"


def failing(verdict: dict[str, Any]) -> dict[str, str]:
    """Each non-passing check, by check id and the configuration it is about (the message's first words)."""
    return {f"{f['check']}[{f['message'].split(': ')[0]}]": f["status"] for f in verdict["findings"]}


def edit(path: Path, change: dict[str, Any]) -> None:
    doc = yaml.safe_load(path.read_text())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_values_that_deploy_the_pins_pass_and_say_so_in_markdown(repo: Path) -> None:
    r, verdict, run = gate(
        repo,
        "--operator-values",
        "gpu-operator/values-v25.3.2.yaml",
        "--operator-values",
        "gpu-operator/values-prod.yaml",  # layered as helm -f does
        "--summary",
        "gate.md",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["result"] == "pass"
    # per configuration: a version per pinned component (5), the driver, the release, the known-bad table
    assert verdict["summary"]["checks"] == 3 + 5 + 3
    summary = (repo / "gate.md").read_text()
    assert summary.startswith("## ✅ gpucert static gate: PASS")
    assert "`values-v25.3.2.yaml`, `values-prod.yaml`" in summary
    assert run is not None
    assert sorted(p.name for p in (run / "inputs" / "operator").iterdir()) == [
        "values-1-values-v25.3.2.yaml",
        "values-2-values-prod.yaml",
    ]
    junit = ET.parse(run / "junit.xml").getroot()
    cases = list(junit.iter("testcase"))
    names = {tc.get("name") for tc in cases}
    # passed checks are summarised per check family (junit.xml at fleet scale); CI still counts every check
    passed = [tc for tc in cases if (tc.get("classname") or "").startswith("gpucert.passed.")]
    assert {tc.get("classname") for tc in passed} == {"gpucert.passed.stack"}
    assert sum(int(tc.find("properties/property[@name='checks']").get("value")) for tc in passed) == 3 + 5 + 3
    suite_props = {
        p.get("name"): p.get("value") for p in junit.iter("property") if p.get("name", "").startswith("gpucert_")
    }
    assert suite_props["gpucert_checks"] == suite_props["gpucert_passed"] == str(3 + 5 + 3)
    assert "static-gate" in names  # the gate's own testcase, as CI lists it: not a certification
    assert "certification" not in names
    # no cluster was read: no node table, empty, under the headline (report.html and the terminal)
    assert "gpucert-nodes" not in (run / "report.html").read_text()
    assert "gpucert verdict:" not in r.stdout


def test_a_driver_downgrade_and_an_old_toolkit_fail_the_gate(repo: Path) -> None:
    values = repo / "gpu-operator" / "values-v25.3.2.yaml"
    edit(values, {"driver.version": "550.163.01", "toolkit.version": "v1.17.5-ubuntu20.04"})
    r, verdict, _ = gate(repo, "--operator-values", str(values), "--summary", "gate.md")
    assert r.returncode == 1, r.stdout + r.stderr
    name = "values-v25.3.2.yaml"
    assert failing(verdict) == {
        f"stack.version[{name}:driver]": "fail",
        f"stack.version[{name}:container-toolkit]": "fail",
        f"stack.compat[{name}:driver]": "fail",
        f"stack.release[{name}]": "fail",
        f"stack.known_bad[{name}]": "fail",
    }
    messages = " ".join(f["message"] for f in verdict["findings"])
    assert f"{name}:driver: deploys driver 550.163.01" in messages
    assert "the spec pins 570.148.08 (pools train, infer)" in messages
    assert "pools train, infer: driver 550.163.01 is older than 570.26, the minimum for CUDA 12.8" in messages
    assert "container-toolkit 1.17.5" in messages
    assert "is not a version of GPU Operator 25.3.2, which ships 1.17.8" in messages
    assert "CVE-2025-23266" in messages
    summary = (repo / "gate.md").read_text()
    assert summary.startswith("## ❌ gpucert static gate: FAIL")
    assert summary.count("| ❌ fail |") == 5


def test_an_upgrade_that_moves_values_and_pins_together_passes(repo: Path) -> None:
    """A pull request taking the driver to another version the release ships, with the spec's pin."""
    values = repo / "gpu-operator" / "values-v25.3.2.yaml"
    edit(values, {"driver.version": "550.163.01"})
    spec = yaml.safe_load((repo / "specs" / "prod.yaml").read_text())
    for c in spec["stack"]["components"]:
        c["version"] = {"driver": "550.163.01", "cuda": "12.4"}.get(c["name"], c["version"])
    (repo / "specs" / "prod.yaml").write_text(yaml.safe_dump(spec))
    r, verdict, _ = gate(repo, "--operator-values", str(values))
    assert r.returncode == 0, [f["message"] for f in verdict["findings"]]


def test_a_release_with_a_vulnerable_toolkit_is_known_bad(repo: Path) -> None:
    """GPU Operator 24.6.1's own toolkit (1.16.1) is before the fix of CVE-2024-0132 and its successors."""
    spec = yaml.safe_load((repo / "specs" / "prod.yaml").read_text())
    pins = {"driver": "550.90.07", "cuda": "12.4", "container-toolkit": "1.16.1", "device-plugin": "0.16.2"}
    pins |= {"gpu-feature-discovery": "0.16.2", "dcgm-exporter": "3.3.7-3.5.0"}
    for c in spec["stack"]["components"]:
        c["version"] = pins[c["name"]]
    (repo / "specs" / "prod.yaml").write_text(yaml.safe_dump(spec))
    r, verdict, _ = gate(repo, "--operator-values", "gpu-operator/values-v24.6.1.yaml")
    assert r.returncode == 1
    (f,) = verdict["findings"]
    assert f["check"] == "stack.known_bad"
    assert "CVE-2024-0132" in f["message"]
    assert "CVE-2025-23359" in f["message"]


def test_a_cluster_policy_needs_its_release_named(repo: Path) -> None:
    policy = repo / "gpu-operator" / "clusterpolicy.yaml"
    doc = yaml.safe_load(policy.read_text())
    del doc["spec"]["validator"]  # nothing in the manifest says which operator release reads it
    del doc["spec"]["toolkit"]["version"]  # so the toolkit is the release's default, whichever that is
    policy.write_text(yaml.safe_dump(doc))
    r, verdict, _ = gate(repo, "--cluster-policy", str(policy))
    assert r.returncode == 1
    assert failing(verdict) == {
        "stack.release[clusterpolicy.yaml]": "error",
        "stack.version[clusterpolicy.yaml:container-toolkit]": "error",
    }
    messages = {f["check"]: f["message"] for f in verdict["findings"]}
    assert "pass --operator-release VERSION" in messages["stack.release"]
    assert "do not name the operator release" in messages["stack.version"]
    # the known-bad table cannot be read for the toolkit either: one root cause, one finding
    assert {"cause": "stack.release@fleet[clusterpolicy.yaml]", "checks": 1} in verdict["coverage"]["skips"]
    r, verdict, _ = gate(repo, "--cluster-policy", str(policy), "--operator-release", "25.3.2")
    assert r.returncode == 0, [f["message"] for f in verdict["findings"]]


def test_a_b200_pool_names_the_driver_it_needs(repo: Path) -> None:
    spec = yaml.safe_load((repo / "specs" / "prod.yaml").read_text())
    spec["pools"][1]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-B200"}
    spec["pools"][1]["expect"]["gpuProduct"] = "NVIDIA-B200"
    spec["pools"][1]["baseline"] = "b200.yaml"
    b200 = yaml.safe_load((repo / "baselines" / "gpus" / "H200-SXM-141GB.yaml").read_text())
    b200 |= {"sku": "B200", "product": "NVIDIA-B200"}
    (repo / "specs" / "b200.yaml").write_text(yaml.safe_dump(b200))
    for c in spec["stack"]["components"]:
        c["version"] = {"driver": "570.124.06"}.get(c["name"], c["version"])
    (repo / "specs" / "prod.yaml").write_text(yaml.safe_dump(spec))
    values = repo / "gpu-operator" / "values-v25.3.2.yaml"
    edit(values, {"driver.version": "570.124.06"})
    r, verdict, _ = gate(repo, "--operator-values", str(values))
    assert r.returncode == 1
    (f,) = [f for f in verdict["findings"] if f["check"] == "stack.compat"]
    assert (
        "pool infer: driver 570.124.06 does not support NVIDIA-B200; the minimum is 570.133.20 (branch R570"
        in (f["message"])
    )


def test_a_loosened_baseline_needs_a_new_source(repo: Path) -> None:
    h100 = repo / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
    text = h100.read_text()
    doc = yaml.safe_load(text)
    old = doc["metrics"]["memory.bandwidth"]
    h100.write_text(text.replace(f"tolerance: {old['tolerance']}", "tolerance: 0.2", 1))
    r, verdict, _ = gate(repo, "--base-ref", "main")
    assert r.returncode == 1
    (f,) = verdict["findings"]
    assert f["check"] == "baseline.change"
    assert f"memory.bandwidth: tolerance {old['tolerance']} -> 0.2" in f["message"]
    assert "without a new `source`" in f["message"]
    # the same change with the figure's source saying where the new tolerance comes from passes
    doc = yaml.safe_load(h100.read_text())
    doc["metrics"]["memory.bandwidth"]["source"] = "measured on acme-pod-a, 2026-11-30: 2.9 TB/s, spread 6% (run r1)"
    h100.write_text(yaml.safe_dump(doc, sort_keys=False))
    r, verdict, _ = gate(repo, "--base-ref", "main")
    assert r.returncode == 0, [f["message"] for f in verdict["findings"]]
    # and a tightened figure needs nothing new
    git(repo, "checkout", "-q", "--", ".")
    doc = yaml.safe_load(h100.read_text())
    doc["metrics"]["memory.bandwidth"]["expected"] = float(old["expected"]) + 100
    h100.write_text(yaml.safe_dump(doc, sort_keys=False))
    r, verdict, run = gate(repo, "--base-ref", "main")
    assert r.returncode == 0
    assert run is not None
    base = (run / "inputs" / "base" / "H100-SXM5-80GB.yaml").read_text()
    assert base == (ROOT / "baselines" / "gpus" / h100.name).read_text()
    assert json.loads((run / "inputs" / "gate.json").read_text())["baseRef"]["ref"] == "main"


@pytest.mark.parametrize("move", ["rename", "other folder"])
def test_a_renamed_or_moved_baseline_is_compared_with_what_it_replaces(repo: Path, move: str) -> None:
    """A figure lowered in a baseline that also changed its file name (or folder) is still a loosened baseline:
    compared with the pool's baseline at the base ref, never reviewed as new."""
    old = repo / "baselines" / "gpus" / "H100-SXM5-80GB.yaml"
    new = repo / ("baselines/gpus/H100-SXM5-80GB-v2.yaml" if move == "rename" else "baselines/h100/H100-SXM5-80GB.yaml")
    new.parent.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load(old.read_text())
    expected = doc["metrics"]["memory.bandwidth"]["expected"]
    doc["metrics"]["memory.bandwidth"]["expected"] = float(expected) * 0.5
    new.write_text(yaml.safe_dump(doc, sort_keys=False))
    old.unlink()
    spec = repo / "specs" / "prod.yaml"
    spec.write_text(spec.read_text().replace("gpus/H100-SXM5-80GB.yaml", str(new.relative_to(repo / "baselines"))))
    r, verdict, _ = gate(repo, "--base-ref", "main")
    assert r.returncode == 1, r.stdout + r.stderr
    (f,) = verdict["findings"]
    assert f["check"] == "baseline.change"
    assert "memory.bandwidth" in f["message"]
    assert "without a new `source`" in f["message"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--operator-values", "gpu-operator/missing.yaml"], "missing.yaml' does not exist: check the path"),
        (["--cluster-policy", "gpu-operator/values-prod.yaml"], "kind is None, expected ClusterPolicy"),
        (["--base-ref", "no-such-branch"], "--base-ref: 'no-such-branch' is not a commit"),
    ],
)
def test_bad_gate_inputs_exit_2_naming_the_file(repo: Path, args: list[str], says: str) -> None:
    r, verdict, _ = gate(repo, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr
    assert verdict == {}  # no run folder left behind


def test_gate_inputs_need_static(repo: Path) -> None:
    r = gpucert_here("configure", "specs/prod.yaml", "--operator-values", "gpu-operator/values-prod.yaml", cwd=repo)
    assert r.returncode == 2
    assert "add --static" in r.stderr


def ci_command(text: str) -> list[str]:
    """The `gpucert configure` line of a CI file (a folded YAML scalar), split as the shell would."""
    import shlex

    def commands(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node] if node.lstrip().startswith("gpucert configure") else []
        if isinstance(node, dict):
            return [c for v in node.values() for c in commands(v)]
        if isinstance(node, list):
            return [c for v in node for c in commands(v)]
        return []

    (line,) = commands(yaml.safe_load(text))
    return shlex.split(line)


@pytest.mark.parametrize(
    ("example", "base"),
    [
        ("github-actions.yml", "origin/${{ github.base_ref }}"),
        ("gitlab-ci.yml", '"origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME"'),
    ],
)
def test_the_ci_examples_run_the_gate(repo: Path, example: str, base: str) -> None:
    """Each CI example is valid YAML whose job runs the gate; its command, run in a repository laid out as the
    example expects, gates the change and writes the summary it posts."""
    text = (ROOT / "examples" / "ci" / example).read_text()
    doc = yaml.safe_load(text)
    if example.startswith("github"):
        assert set(doc) >= {"name", "jobs"}
        assert doc.get("on", doc.get(True))["pull_request"]["paths"]  # `on:` reads as True in YAML 1.1
        steps = doc["jobs"]["gate"]["steps"]
        assert any(s.get("uses", "").startswith("actions/checkout") and s["with"]["fetch-depth"] == 0 for s in steps)
    else:
        job = doc["gpucert-gate"]
        assert job["rules"][0]["if"] == '$CI_PIPELINE_SOURCE == "merge_request_event"'
        assert job["artifacts"]["reports"]["junit"] == "reports/*/junit.xml"
    args = ci_command(text.replace(base, "main"))  # what the CI system substitutes before the shell runs it
    shutil.copy(repo / "gpu-operator" / "values-v25.3.2.yaml", repo / "gpu-operator" / "values.yaml")
    r = gpucert_here(*args[1:], cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (repo / "gpucert-summary.md").read_text().startswith("## ✅ gpucert static gate: PASS")
