"""junit.xml covers a re-test's carried nodes as it covers measured ones (issue 28): their passed checks in the
summaries per node and family, each check that did not pass a testcase as its test item would be (a per-GPU check
one per check and node, labelled by the checks its GPUs failed), a waived one a passed testcase that says its
waiver. Through pytest's own LogXML (_pytest/junitxml.py, pytest 9.1.1) and junit.PassedSummary; a stand-in for the
run's context, no pytest session."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import LogXML, xml_key

from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.pytest.junit import PassedSummary
from gpucert.pytest.junit_cases import carried_cases
from gpucert.report.verdict import Outcome

PASS, FAIL, SKIP, WAIVED = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.SKIP, CheckStatus.WAIVED
NODE, MEASURED = "gpu-node-10", "gpu-node-3"


@dataclass
class Ctx:
    outcomes: dict[CheckKey, Outcome]
    carried: frozenset[str] = frozenset({NODE})
    retest: Any = None  # no record: the testcases carry no source run


def outcomes() -> dict[CheckKey, Outcome]:
    found: dict[CheckKey, Finding] = {}
    for gpu in range(8):
        key = CheckKey("compute.gemm.bf16", NODE, gpu)
        found[key] = Finding("compute.gemm.bf16", PASS, NODE, gpu)
        found[CheckKey("health.ecc", NODE, gpu)] = Finding("health.ecc", PASS, NODE, gpu)
        found[CheckKey("dcgm.memory", NODE, gpu)] = Finding("dcgm.memory", PASS, NODE, gpu)
        found[CheckKey("health.ecc", MEASURED, gpu)] = Finding(
            "health.ecc", FAIL, MEASURED, gpu, "measured: its item's"
        )
    # a GPU behind its peers: the metric's key, decided as straggler.<metric>
    found[CheckKey("compute.gemm.bf16", NODE, 6)] = Finding(
        "straggler.compute.gemm.bf16", FAIL, NODE, 6, f"{NODE}/gpu6 651.8 TFLOP/s behind its peers"
    )
    found[CheckKey("dcgm.memory", NODE, 2)] = Finding(
        "dcgm.memory", WAIVED, NODE, 2, f"{NODE}/gpu2 DCGM memory Fail [WAIVED by waivers[0], ...]", waiver="waivers[0]"
    )
    found[CheckKey("stack.version", NODE, None, "driver")] = Finding("stack.version", FAIL, NODE, None, "550 not 570")
    cause = f"stack.version@{NODE}[driver]"
    found[CheckKey("stack.compat", NODE)] = Finding("stack.compat", SKIP, NODE, None, "driver not pinned", cause=cause)
    return {k: Outcome(f) for k, f in found.items()}


@pytest.fixture
def written(tmp_path: Path) -> tuple[ET.Element, int]:
    xml = LogXML(str(tmp_path / "junit.xml"), None, family="xunit2")
    config: Any = type("Config", (), {"stash": pytest.Stash()})()
    config.stash[xml_key] = xml
    xml.pytest_sessionstart()
    passed = PassedSummary(config)
    ctx: Any = Ctx(outcomes())
    n = carried_cases(config, ctx, passed)
    passed.pytest_sessionfinish()
    xml.pytest_sessionfinish()
    return ET.parse(tmp_path / "junit.xml").getroot(), n


def cases(root: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname", ""), c.get("name", "")): c for c in root.iter("testcase")}


def test_a_carried_nodes_checks_are_testcases_as_its_items_would_be(written: tuple[ET.Element, int]) -> None:
    root, n = written
    found = cases(root)
    assert n == 4
    # the passed checks: one summary per node and family, as for a measured node (the measured node's outcomes
    # are its items' to write, not the carried nodes')
    assert {k for k in found if k[0].startswith("gpucert.passed.")} == {
        ("gpucert.passed.performance", f"{NODE}: 7 checks passed (performance)"),
        ("gpucert.passed.health", f"{NODE}: 8 checks passed (health)"),
        ("gpucert.passed.dcgm", f"{NODE}: 7 checks passed (dcgm)"),
    }
    assert not [k for k in found if MEASURED in k[1]]
    # a per-GPU check's carried failure: one testcase per check and node, labelled by the check the GPU failed
    gemm = found[("gpucert.carried.performance", f"compute.gemm.bf16[{NODE}]")]
    failure = gemm.find("failure")
    assert failure is not None
    assert failure.get("message", "").splitlines() == [
        f"[straggler.compute.gemm.bf16] {NODE}: 1 of 8 GPUs did not pass (1 fail)",
        f"  [straggler.compute.gemm.bf16] gpu6 fail: {NODE}/gpu6 651.8 TFLOP/s behind its peers",
    ]
    # a node's check: one testcase per check (and detail), failed or skipped with its failing cause
    version = found[("gpucert.carried.stack", f"stack.version[{NODE}/driver]")].find("failure")
    assert version is not None
    assert version.get("message") == "[stack.version] 550 not 570"
    skipped = found[("gpucert.carried.stack", f"stack.compat[{NODE}]")].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == f"driver not pinned (follows from stack.version@{NODE}[driver])"


def test_a_carried_waived_check_is_a_passed_testcase_that_says_its_waiver(written: tuple[ET.Element, int]) -> None:
    root, _ = written
    dcgm = cases(root)[("gpucert.carried.dcgm", f"dcgm.memory[{NODE}]")]
    assert [child.tag for child in dcgm] == ["properties", "system-out"]  # no <skipped>: it is no skip
    props = {p.get("name"): p.get("value") for p in dcgm.iter("property")}
    assert props == {"gpucert_waived": "waivers[0]"}
    out = dcgm.find("system-out")
    assert out is not None
    assert (out.text or "").startswith(f"WAIVED: [dcgm.memory] {NODE}: 1 of 8 GPUs did not pass (1 waived)")
    assert "[WAIVED by waivers[0]" in (out.text or "")


def test_the_testsuites_counts_are_the_testcases(written: tuple[ET.Element, int]) -> None:
    root, _ = written
    suite = root.find("testsuite")
    assert suite is not None
    testcases = suite.findall("testcase")
    said = {kind: sum(1 for c in testcases if c.find(kind) is not None) for kind in ("failure", "error", "skipped")}
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        str(len(testcases)),
        str(said["failure"]),
        str(said["error"]),
        str(said["skipped"]),
    )
    assert (len(testcases), said["failure"], said["skipped"]) == (7, 2, 1)
