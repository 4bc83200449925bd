"""A re-test decides its carried nodes' checks without a test item each (issue 28), and says what a full
re-evaluation of the same evidence says.

The handover example's 16 x 8 fleet certified with its waiver: gpu-node-3, -7 and -11 fail, gpu-node-14 passes by
the waiver (a straggler: a check that compares with peers). The fleet is then repaired on -7 and -11 only, and
re-tested: -3, -7 and -11 are measured again (-3 still fails), -14 and the twelve others are carried, -14 with its
waived fault. The re-test's verdict must be the one `gpucert evaluate` gives over the same evidence, item by item."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import yaml

from ..in_process import gpucert_here, next_second
from .conftest import ROOT, fleet_doc, spec_doc
from .test_handover_acceptance import AFTER, new_run, ok, project_copy, runs, set_expiry

REPAIRED = "examples/handover/fleet-repaired.yaml"
FIRST = "examples/handover/spec-first.yaml"


def verdict(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "verdict.json").read_text())
    return data


def judged(v: dict[str, Any]) -> dict[str, Any]:
    """What a verdict decided, without what differs between two runs of the same evidence (ids, times, provenance)."""
    nodes = {
        n: {k: s[k] for k in ("result", "passed", "failed", "errors", "skipped", "waived", "failing", "waivedChecks")}
        for n, s in v["nodes"].items()
    }
    coverage = {k: v["coverage"][k] for k in ("required", "ran", "deselected", "notReached", "complete")}
    return {
        "result": v["result"],
        "summary": v["summary"],
        "coverage": coverage,
        "findings": v["findings"],
        "nodes": nodes,
        "fleet": v["fleet"],
        "pools": v["pools"],
    }


def test_a_retest_says_what_re_evaluating_everything_says(tmp_path: Path) -> None:
    work = project_copy(tmp_path)
    set_expiry(work, date.today() + timedelta(days=365))
    first = yaml.safe_load((work / AFTER).read_text())
    first["target"]["fleet"] = "fleet.yaml"  # the fleet as handed over, judged with the waiver
    (work / FIRST).write_text(yaml.safe_dump(first))
    fleet = yaml.safe_load((work / REPAIRED).read_text())
    fleet["faults"].append({"kind": "ecc", "node": "gpu-node-3", "gpu": 2, "uncorrected": 2})  # not repaired
    (work / REPAIRED).write_text(yaml.safe_dump(fleet))
    reports = work / "reports"
    ok(gpucert_here("keygen", "keys", cwd=work))
    before = runs(reports) if reports.exists() else set()
    ok(gpucert_here("certify", FIRST, "-q", "--sign-key", "keys/gpucert.key", cwd=work), 1)
    run1 = new_run(reports, before)
    assert verdict(run1)["nodes"]["gpu-node-14"]["result"] == "waived"
    before = runs(reports)
    next_second()
    ok(gpucert_here("certify", AFTER, "-q", "--sign-key", "keys/gpucert.key", "--retest", str(run1), cwd=work), 1)
    run2 = new_run(reports, before)
    retest = verdict(run2)
    assert set(retest["retest"]["measured"]) == {"gpu-node-3", "gpu-node-7", "gpu-node-11"}
    assert "gpu-node-14" in retest["retest"]["carried"]
    # every check an item: the same evidence without the re-test's record (else the evaluation carries them too)
    plain = tmp_path / "plain"
    shutil.copytree(run2 / "evidence", plain / "evidence")
    for name in ("inventory.json", "stack.json"):
        shutil.copyfile(run2 / name, plain / name)
    before = runs(reports)
    next_second()
    ok(gpucert_here("evaluate", AFTER, "--evidence", str(plain / "evidence"), "-q", cwd=work), 1)
    run3 = new_run(reports, before)
    assert "retest" not in verdict(run3)
    full = verdict(run3)
    assert judged(retest) == judged(full)
    faults = {(f["check"], f["node"], f["status"]) for f in retest["findings"]}
    assert ("health.ecc", "gpu-node-3", "fail") in faults  # a fault on a node measured again
    assert ("straggler.compute.gemm.bf16", "gpu-node-14", "waived") in faults  # and on a carried one
    # the carried nodes have no test item: the re-test's items are those of the nodes measured again and the fleet's
    # (a node's 160 checks since straggler.combined; its per-GPU checks one item per check and node, issue 28)
    assert items(run2, "gpu-node-5") == 0
    assert 0 < items(run3, "gpu-node-5") == items(run2, "gpu-node-3") == items(run3, "gpu-node-3") < 160
    # and junit.xml says what it says for the run that had every check an item: the same testcases, failures and
    # skips for CI to count, the same summaries of passed checks (carried nodes' too), each check that did not pass
    # a testcase (the carried waived board's among them, as a passed testcase that says its waiver)
    assert junit_said(run2) == junit_said(run3)
    assert sum(junit_said(run2)["summaries"].values()) == retest["summary"]["passed"]


def test_a_carried_nodes_check_against_its_peers_is_decided_again_not_carried(tmp_path: Path) -> None:
    """A carried node keeps its evidence, not its decisions: a check that compares it with its peers is decided again
    over the re-test's fleet. Four nodes on one kernel, three of them failing with an ECC error; repaired, those three
    come back on a newer kernel. gpu-node-4 passed and is carried, and is now the one node on the old kernel:
    stack.skew, which passed it in the first run, fails it in the re-test, as re-evaluating everything says."""
    ecc = [{"kind": "ecc", "node": f"gpu-node-{i}", "gpu": 0, "uncorrected": 1} for i in (1, 2, 3)]
    kernel = [
        {"kind": "version", "node": f"gpu-node-{i}", "component": "kernel", "version": "6.8.0"} for i in (1, 2, 3)
    ]
    for name, faults in (("first", ecc), ("repaired", kernel)):
        (tmp_path / f"fleet-{name}.yaml").write_text(yaml.safe_dump(fleet_doc(faults, gpus=2)))
        spec = spec_doc(probes=["health"])  # the ECC error and the stack: nothing more to measure
        del spec["certify"]["multinode"]
        spec["target"]["fleet"] = f"fleet-{name}.yaml"
        spec["expect"]["gpusPerNode"] = 2
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    reports = tmp_path / "reports"
    ok(gpucert_here("keygen", "keys", cwd=tmp_path))
    ok(gpucert_here("certify", "first.yaml", "-q", "--sign-key", "keys/gpucert.key", cwd=tmp_path), 1)
    (run1,) = runs(reports)
    assert ("stack.skew", "gpu-node-4") not in failing(verdict(run1))
    assert verdict(run1)["nodes"]["gpu-node-4"]["result"] == "pass"
    next_second()
    args = ("certify", "repaired.yaml", "-q", "--sign-key", "keys/gpucert.key", "--retest", str(run1))
    ok(gpucert_here(*args, cwd=tmp_path), 1)
    run2 = new_run(reports, {run1})
    retest = verdict(run2)
    assert retest["retest"]["carried"] == ["gpu-node-4"]
    assert failing(retest) == {("stack.skew", "gpu-node-4")}  # the three repaired nodes pass now
    plain = tmp_path / "plain"
    shutil.copytree(run2 / "evidence", plain / "evidence")
    for name in ("inventory.json", "stack.json"):
        shutil.copyfile(run2 / name, plain / name)
    next_second()
    ok(gpucert_here("evaluate", "repaired.yaml", "--evidence", str(plain / "evidence"), "-q", cwd=tmp_path), 1)
    run3 = new_run(reports, {run1, run2})
    assert judged(retest) == judged(verdict(run3))


def failing(v: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["check"], f["node"]) for f in v["findings"] if f["status"] in ("fail", "error")}


def junit_said(run: Path) -> dict[str, Any]:
    """What a CI system reads of a run's junit.xml: the testsuite's counts, the summaries' names and the checks they
    stand for, and the testcases that did not pass (or were waived) by how they end."""
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    summaries = {
        c.get("name"): int(c.find("properties/property[@name='checks']").get("value"))  # type: ignore[union-attr,arg-type]
        for c in cases
        if c.get("classname", "").startswith("gpucert.passed.")
    }
    ends = sorted(
        "waived" if c.find("properties/property[@name='gpucert_waived']") is not None else c[-1].tag
        for c in cases
        if not c.get("classname", "").startswith("gpucert.passed.") and len(c)
    )
    counts = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
    return {"counts": counts, "summaries": summaries, "ends": ends}


def items(run: Path, node: str) -> int:
    """How many test items the run's session collects whose parameters name `node` (`[gpu-node-5]`,
    `[gpu-node-5-bf16]`, `[gpu-node-5/driver]`)."""
    return sum(bool(re.search(rf"\[{re.escape(node)}[]/-]", line)) for line in collected(run))


@functools.cache
def collected(run: Path) -> tuple[str, ...]:
    """The lines `pytest --co -q` prints for the certify suite over the run folder: collected once for a run, and
    counted for each node asked about."""
    suites = str(ROOT / "suites" / "certify")
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", suites, "--run-dir", str(run)],
        cwd=run,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return tuple(listed.stdout.splitlines())
