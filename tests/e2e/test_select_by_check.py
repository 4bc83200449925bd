"""`-k` selects by the check ids the verdict names (issue 28): an item is matched by every check id it decides, its
check's and, for a measured figure, the `straggler.<metric>` and `stability.<metric>` findings that are that
check's. The verdict's coverage follows the items: a check whose item was deselected is deselected, a selected item
decides all its checks.

pytest 9.1.1's `-k` matches substrings of an item's names, marker names and `Node.listextrakeywords()`
(`_pytest/mark/__init__.py`, `KeywordMatcher.from_item`); its identifiers take dots (`_pytest/mark/expression.py`,
`ident`), so `-k health.ecc` is written as the verdict writes the check.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from .conftest import ROOT, SUITES, spec_doc

REQUIRED = 742  # the demo spec on a 4 x 8 fleet (tests/e2e/test_coverage.py: CLEAN_CHECKS)
FAULTY = yaml.safe_load((ROOT / "examples" / "fleets" / "h100-4x8-faulty.yaml").read_text())


def run_faulty(pytester: pytest.Pytester, *args: str, plugins: list[object] | None = None) -> dict[str, Any]:
    """The suites over the demo's faulty fleet (a straggler, an unstable GPU, an ECC error...): the verdict."""
    (pytester.path / "fleet.yaml").write_text(yaml.safe_dump(FAULTY))
    (pytester.path / "spec.yaml").write_text(yaml.safe_dump(spec_doc()))
    suites = (str(SUITES / "configure"), str(SUITES / "certify"))
    reports = pytester.path / "reports"
    # report.html left out: what is asserted is the verdict (the file's runs stay within the suite's time budget)
    pytester.runpytest(
        *suites, "--spec", "spec.yaml", "--reports", str(reports), "-p", "no:html", *args, plugins=plugins or []
    )
    (run,) = [p for p in reports.iterdir() if not p.name.startswith(".")]
    verdict: dict[str, Any] = json.loads((run / "verdict.json").read_text())
    return verdict


class Keywords:
    """Each decided check's id, beside the `-k` keywords of the item that decided it."""

    def __init__(self) -> None:
        self.keywords: dict[str, set[str]] = {}
        self.seen: list[tuple[str, str, set[str]]] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.keywords = {item.nodeid: item.listextrakeywords() for item in session.items}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for check in getattr(report, "gpucert", {}).get("checks", []):
            key, finding = check["key"]["check"], check["finding"]["check"]
            self.seen.append((key, finding, self.keywords[report.nodeid]))


def test_every_check_id_an_item_decides_is_one_of_its_keywords(pytester: pytest.Pytester) -> None:
    seen = Keywords()
    run_faulty(pytester, "-p", "no:cacheprovider", plugins=[seen])
    assert seen.seen
    for key_check, finding_check, keywords in seen.seen:
        assert key_check in keywords
        assert finding_check in keywords, (finding_check, keywords)
    # the faulty fleet's straggler and unstable GPU are decided by their metric's item, under their own ids
    decided_as = {f for k, f, _ in seen.seen if f != k}
    assert {"straggler.compute.gemm.bf16", "stability.compute.gemm.fp16"} <= decided_as


def _finding(verdict: dict[str, Any], check: str, node: str, gpu: int | None) -> dict[str, Any]:
    (finding,) = [f for f in verdict["findings"] if (f["check"], f["node"], f["gpu"]) == (check, node, gpu)]
    return finding


@pytest.mark.parametrize(
    ("keyword", "ran", "found"),
    [
        # the id the verdict names selects the items that decide it: compute.gemm.bf16's, one a node (32 checks),
        # and the node-level straggler.compute.gemm.bf16 (4); the straggler GPU's failure is among them
        ("straggler.compute.gemm.bf16", 32 + 4, ("straggler.compute.gemm.bf16", "gpu-node-1", 6)),
        # memory.bandwidth on its 8 GPUs, its node-level straggler, DCGM's memory test on its 8 GPUs
        ("gpu-node-3 and memory", 8 + 1 + 8, None),
    ],
)
def test_k_selects_by_check_id(
    pytester: pytest.Pytester, keyword: str, ran: int, found: tuple[str, str, int | None] | None
) -> None:
    v = run_faulty(pytester, "-p", "no:cacheprovider", "-k", keyword)
    c = v["coverage"]
    assert (c["required"], c["ran"], c["deselected"], c["notReached"]) == (REQUIRED, ran, REQUIRED - ran, 0)
    assert v["result"] == ("fail" if found else "incomplete")
    if found is not None:
        assert _finding(v, *found)["status"] == "fail"
    if "." in keyword:  # no check of the selected id is among those deselected
        assert not [m for m in c["missing"] if m.startswith(keyword)]


def test_last_failed_after_a_failing_gpu_reruns_its_checks_on_the_node(pytester: pytest.Pytester) -> None:
    first = run_faulty(pytester, "-k", "health.ecc")
    assert (first["coverage"]["ran"], first["coverage"]["deselected"]) == (32, REQUIRED - 32)  # 4 items, 8 GPUs each
    assert _finding(first, "health.ecc", "gpu-node-1", 5)["status"] == "fail"
    for run in (pytester.path / "reports").iterdir():  # keep the next run's folder the only one
        run.rename(pytester.path / f"first-{run.name}")
    v = run_faulty(pytester, "--lf")
    c = v["coverage"]
    # the failed item: health.ecc on each GPU of gpu-node-1, every other check deselected
    assert (c["ran"], c["deselected"], c["notReached"]) == (8, REQUIRED - 8, 0)
    assert not [m for m in c["missing"] if m.startswith("health.ecc@gpu-node-1/")]
    assert (v["summary"]["passed"], v["summary"]["failed"]) == (7, 1)
    assert _finding(v, "health.ecc", "gpu-node-1", 5)["status"] == "fail"
    assert v["result"] == "fail"
