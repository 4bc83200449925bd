"""junit.xml at fleet scale: the checks that passed are one testcase per node and check family (property `checks`
says how many each stands for), every check that did not pass keeps its item's testcase with its message (a
per-GPU check's item names each GPU that did not pass), and the testsuite's properties count every check."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[ET.Element, dict]:
    reports = tmp_path_factory.mktemp("junit")
    r = subprocess.run(
        [sys.executable, "-m", "gpucert.cli.main", "certify", "examples/demo.yaml", "-q", "--reports", str(reports)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    (run,) = reports.iterdir()
    return ET.parse(run / "junit.xml").getroot(), json.loads((run / "verdict.json").read_text())


def test_passed_checks_are_one_testcase_per_node_and_family(demo: tuple[ET.Element, dict]) -> None:
    root, verdict = demo
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    summaries = [c for c in cases if c.get("classname", "").startswith("gpucert.passed.")]
    own = [c for c in cases if c.get("classname", "").startswith("suites.")]
    # no testcase of a single check that passed: each says a failure, an error or a skip
    assert own
    assert all(len(c) for c in own), [c.get("name") for c in own if not len(c)]
    groups = {(c.get("classname"), c.get("name")) for c in summaries}
    assert len(groups) == len(summaries)  # one per node and family
    # the name a CI page lists says how many checks the testcase stands for (gpu-node-1's 8 x 7 health checks,
    # less its ECC and PCIe-link failures)
    assert ("gpucert.passed.health", "gpu-node-1: 54 checks passed (health)") in groups
    for c in summaries:
        n = int(c.find("properties/property[@name='checks']").get("value"))
        family = c.get("classname").removeprefix("gpucert.passed.")
        assert c.get("name", "").endswith(f": {n} check{'' if n == 1 else 's'} passed ({family})"), c.get("name")
    counted = sum(int(c.find("properties/property[@name='checks']").get("value")) for c in summaries)
    s = verdict["summary"]
    assert counted == s["passed"]
    # the items that did not pass (issue 28: a per-GPU check's item is one per check and node): the demo's 10
    # failed checks are 10 items, its 9 skipped checks 2 (gpu-node-4's pcie.h2d on its 8 GPUs, one stack.compat)
    assert len(own) == 12
    # CI counts testcases: the summaries, the items that did not pass, and the certification's own
    assert int(suite.get("tests")) == len(cases) == len(summaries) + len(own) + 1
    # a CI parser that checks the testsuite's counts against its testcases finds them equal
    said = {kind: sum(1 for c in cases if c.find(kind) is not None) for kind in ("failure", "error", "skipped")}
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == tuple(
        str(said[kind]) for kind in ("failure", "error", "skipped")
    )
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["gpucert_checks"] == str(s["checks"])
    assert props["gpucert_passed"] == str(s["passed"])


def test_every_failure_keeps_its_testcase_and_message(demo: tuple[ET.Element, dict]) -> None:
    root, verdict = demo
    messages = [f.get("message", "") for f in root.iter("failure")]
    for finding in verdict["findings"]:
        assert any(finding["message"] in m for m in messages), finding
    # every skipped check is said: a skipped item of a per-GPU check names each of its GPUs that skipped
    said = [len(re.findall(r"gpu\d skip: ", m)) or 1 for m in (x.get("message", "") for x in root.iter("skipped"))]
    assert sum(said) == verdict["summary"]["skipped"]
