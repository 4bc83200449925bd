"""Allure results, one result per (check, node) with the GPUs as steps, so a fleet-scale run stays small.

allure-pytest writes four files per test item (131,073 files for 32,768 items, measured); a certification of
~10^5 items groups instead, and keeps every failing GPU's message.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import Attachment, Label, Parameter, Status, StatusDetails, TestResult, TestStepResult

from gpucert import __version__
from gpucert.checks import CheckStatus, Finding, check_category
from gpucert.errors import ConfigError, EvidenceError, IncompleteRunError
from gpucert.resources import project_root

__all__ = ["build_html", "find_allure", "suite_of", "write_allure"]

_STATUS = {
    CheckStatus.PASS: Status.PASSED,
    CheckStatus.FAIL: Status.FAILED,
    CheckStatus.ERROR: Status.BROKEN,
    CheckStatus.SKIP: Status.SKIPPED,
}
_RANK = {CheckStatus.ERROR: 3, CheckStatus.FAIL: 2, CheckStatus.PASS: 1, CheckStatus.SKIP: 0}
CATEGORIES = ("Stack", "Health", "DCGM", "Performance", "Stragglers", "Infrastructure")


def suite_of(check: str) -> str:
    return "configure" if check.startswith(("stack.", "inventory.", "node.")) else "certify"


def _categories() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    prefixes = {
        "Stack": r"(stack|inventory)\..*",
        "Health": r"health\..*",
        "DCGM": r"dcgm\..*",
        "Stragglers": r"straggler\..*",
        "Infrastructure": r"node\..*",
        "Performance": r"(memory|compute|pcie|p2p|nccl)\..*",
    }
    for name in CATEGORIES:
        out.append(
            {
                "name": name,
                "matchedStatuses": ["failed", "broken"],
                "messageRegex": rf"(?s)\[{prefixes[name]}\].*",
            }
        )
    return out


def write_allure(
    results_dir: Path,
    outcomes: Iterable[Finding],
    evidence: Mapping[Finding, Any],
    *,
    run_id: str,
    spec: str,
    target: str,
    started_ms: int,
    stopped_ms: int,
) -> int:
    """Write the results of a run; returns the number of result files."""
    results_dir.mkdir(parents=True, exist_ok=True)
    logger = AllureFileLogger(str(results_dir))
    groups: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for f in outcomes:
        groups[(f.check, f.node or "fleet")].append(f)
    for (check, node), items in sorted(groups.items()):
        worst = max(items, key=lambda f: _RANK[f.status]).status
        bad = [f for f in items if f.status in (CheckStatus.FAIL, CheckStatus.ERROR)]
        result = TestResult(
            uuid=str(uuid.uuid4()),
            name=f"{check} on {node}",
            fullName=f"{suite_of(check)}.{check}[{node}]",
            historyId=f"{check}[{node}]",
            status=_STATUS[worst],
            start=started_ms,
            stop=stopped_ms,
            labels=[
                Label("epic", suite_of(check)),
                Label("feature", check),
                Label("story", node),
                Label("suite", suite_of(check)),
                Label("tag", check_category(check)),
            ],
            parameters=[Parameter("node", node)],
        )
        if bad:
            result.statusDetails = StatusDetails(message=f"[{check}] " + "\n".join(f.message for f in bad))
            for f in bad:
                if f in evidence:
                    name = f"{uuid.uuid4()}-attachment.json"
                    logger.report_attached_data(json.dumps(evidence[f], indent=1).encode(), name)
                    result.attachments.append(
                        Attachment(name=f"evidence {f.where}", source=name, type="application/json")
                    )
        elif worst is CheckStatus.SKIP:
            result.statusDetails = StatusDetails(message=items[0].message)
        for f in sorted(items, key=lambda f: -1 if f.gpu is None else f.gpu):
            if f.gpu is None and len(items) == 1:
                break
            result.steps.append(
                TestStepResult(
                    name=f"gpu{f.gpu}" if f.gpu is not None else node,
                    status=_STATUS[f.status],
                    statusDetails=StatusDetails(message=f.message) if f.message else None,
                    parameters=[Parameter("gpu", str(f.gpu))] if f.gpu is not None else [],
                    start=started_ms,
                    stop=stopped_ms,
                )
            )
        logger.report_result(result)
    (results_dir / "environment.properties").write_text(
        f"gpucert={__version__}\nrun={run_id}\nspec={spec}\ntarget={target}\npython={platform.python_version()}\n",
        encoding="utf-8",
    )
    (results_dir / "categories.json").write_text(json.dumps(_categories(), indent=1), encoding="utf-8")
    (results_dir / "executor.json").write_text(
        json.dumps(
            {"name": "gpucert", "type": "gpucert", "buildName": run_id, "reportName": f"gpucert {spec}"},
            indent=1,
        ),
        encoding="utf-8",
    )
    return len(groups)


ALLURE_VERSION = "2.46.1"
INSTALL_HINT = (
    f"install the Allure commandline, which needs Java 17: `npm install --prefix .tools "
    f"allure-commandline@{ALLURE_VERSION}` in the gpucert checkout (make test does this), and "
    "`apt-get install openjdk-17-jre-headless` where `java` is missing"
)


def find_allure() -> str | None:
    """The Allure commandline: $GPUCERT_ALLURE, then `allure` on PATH, then the checkout's .tools/ install."""
    found = os.environ.get("GPUCERT_ALLURE") or shutil.which("allure")
    if found:
        return found
    local = project_root() / ".tools" / "node_modules" / ".bin" / "allure"
    return str(local) if local.exists() else None


def _has_java() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or (home is not None and (Path(home) / "bin" / "java").exists())


def build_html(results_dir: Path, out_dir: Path) -> Path:
    """Render `allure-results/` into one self-contained HTML file (`allure generate --single-file`)."""
    if not results_dir.is_dir():
        raise EvidenceError("no allure-results/ here: pass a run folder written by `gpucert certify`", path=results_dir)
    allure = find_allure()
    if allure is None:
        raise ConfigError(f"the Allure commandline is not installed; {INSTALL_HINT}")
    if not _has_java():
        raise ConfigError(f"Java is not installed; {INSTALL_HINT}")
    cmd = [allure, "generate", "--single-file", "--clean", "-o", str(out_dir), str(results_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    index = out_dir / "index.html"
    if proc.returncode != 0 or not index.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise IncompleteRunError(f"allure generate failed (exit {proc.returncode}): {' | '.join(tail)}")
    return index
