"""benchmarks/reports_diff.py: what two runs of the same inputs may differ in is normalised (a worktree's path, its
name with a hyphen as the project's branches have), and two allure-results folders that differ only in how many
alike results they hold are said to differ in one line, not an IndexError."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reports_diff.py"
RESULT = '{"name": "passed"}'


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reports_diff", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(folder: Path, skipped_at: str, results: int) -> Path:
    (folder / "allure-results").mkdir(parents=True)
    (folder / "junit.xml").write_text(f'<skipped message="{skipped_at}src/gpucert/x.py:3" time="0.1"/>\n')
    for i in range(results):
        (folder / "allure-results" / f"{i:08x}-1111-2222-3333-444444444444-result.json").write_text(RESULT)
    return folder


def test_a_worktrees_path_is_normalised_whatever_its_name(tmp_path: Path) -> None:
    diff = _module()
    main = _run(tmp_path / "main", "/work/main/", 1)
    for tree in ("rtallure", "final9-b", "fix.2"):
        other = _run(tmp_path / tree, f"/work/wt/{tree}/", 1)
        assert diff.differences(main, other) == [], tree


def test_alike_results_counted_differ_in_a_line(tmp_path: Path) -> None:
    diff = _module()
    one, two = _run(tmp_path / "one", "/work/main/", 1), _run(tmp_path / "two", "/work/main/", 2)
    assert diff.differences(one, two) == ["allure-results differ (1 and 2 files): U-result.json first"]
    (two / "allure-results").rename(tmp_path / "gone")
    assert diff.differences(one, two) == ["allure-results differ (1 and 0 files): U-result.json first"]


def test_a_folder_that_is_not_there_is_said_in_a_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("usage:")
    assert "Traceback" not in r.stderr
