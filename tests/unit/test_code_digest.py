"""resources.code_digest: the digest a re-test's kept decisions are held to (acceptance/retest_kept.py, gate 1) covers
every file that decides a run's outcomes, not only src/gpucert: a suite edited in a checkout (its test no longer
calling expect(decision), so an ECC failure passes) signed a false pass with the package's digest unchanged, and a
clean checkout's re-test then kept it (sweep7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucert.resources import DECIDING, code_digest, project_root, tree_digest


def _checkout(root: Path) -> Path:
    files = {
        "src/gpucert/__init__.py": "x = 1\n",
        "src/gpucert/rules.py": "def rule(): ...\n",
        "suites/certify/test_health.py": "def test_ecc(decision):\n    expect(decision)\n",
        "fixtures/run.py": "def decision(): ...\n",
        "conftest.py": 'pytest_plugins = ["fixtures.run"]\n',
        "pyproject.toml": "[tool.pytest.ini_options]\nxfail_strict = true\n",
        "tests/test_x.py": "def test(): ...\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "src" / "gpucert"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("suites/certify/test_health.py", "def test_ecc(decision):\n    pass\n"),
        ("suites/certify/test_extra.py", "def test_more(): ...\n"),
        ("fixtures/run.py", "def decision(): return PASS\n"),
        ("conftest.py", 'pytest_plugins = ["fixtures.other"]\n'),
        ("pyproject.toml", "[tool.pytest.ini_options]\nxfail_strict = false\n"),
        ("src/gpucert/rules.py", "def rule(): return PASS\n"),
    ],
)
def test_whatever_decides_a_run_is_in_the_digest(tmp_path: Path, name: str, text: str) -> None:
    package = _checkout(tmp_path)
    before = tree_digest(package, tmp_path)
    (tmp_path / name).write_text(text)
    assert tree_digest(package, tmp_path) != before


def test_caches_and_what_no_run_reads_are_not(tmp_path: Path) -> None:
    package = _checkout(tmp_path)
    before = tree_digest(package, tmp_path)
    for cache in (package / "__pycache__" / "rules.cpython-312.pyc", tmp_path / "suites" / "__pycache__" / "t.pyc"):
        cache.parent.mkdir(parents=True)
        cache.write_bytes(b"\0")
    (tmp_path / "tests" / "test_x.py").write_text("def test(): assert 0\n")
    assert tree_digest(package, tmp_path) == before


def test_a_file_moved_between_the_package_and_the_checkout_is_another_digest(tmp_path: Path) -> None:
    package = _checkout(tmp_path)
    before = tree_digest(package, tmp_path)
    (tmp_path / "fixtures" / "run.py").rename(package / "run.py")
    assert tree_digest(package, tmp_path) != before


def test_this_checkouts_digest_covers_its_suites_fixtures_conftest_and_pyproject() -> None:
    root = project_root()
    assert all((root / part).exists() for part in DECIDING)  # a part renamed would silently drop out of the digest
    assert code_digest() == tree_digest(root / "src" / "gpucert", root)
