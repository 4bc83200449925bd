"""README is a README and the manual is docs/ (issue 24, item 6): README under 200 lines, its links into docs/
resolve, every page of docs/ is in mkdocs.yml's nav, and the manual builds with MkDocs in strict mode, which
fails on a broken link or anchor (the guard `make docs` and `make test` rely on, checked by breaking a link)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_short_and_links_into_the_manual() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "make demo" in readme
    assert "make test" in readme
    targets = LINK.findall(readme)
    assert {t for t in targets if t.startswith("docs/")} >= {"docs/verdict.md", "docs/acceptance.md", "docs/spec.md"}
    missing = [t for t in targets if "://" not in t and not (ROOT / t).is_file()]
    assert missing == []


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True
    nav = {page for entry in config["nav"] for page in entry.values()}
    assert nav == {p.name for p in (ROOT / "docs").glob("*.md")}


def test_text_moved_once_the_openssl_recipe_lives_in_one_page() -> None:
    """Moved, not copied: the recipe the attest and acceptance tests run is in docs/acceptance.md and nowhere else."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    holders = [p.name for p in pages if "<!-- verify-recipe -->" in p.read_text()]
    assert holders == ["acceptance.md"]


def test_make_test_builds_the_docs_strictly_with_mkdocs_pinned_in_the_test_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "test: lint typecheck docs unit" in makefile
    assert "\t$(BIN)/mkdocs build --strict" in makefile
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert "mkdocs>=1.6,<2" in extra


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_the_manual_builds_and_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the test extra's MkDocs: pip install -e '.[test]'")
    ok = _build(ROOT, tmp_path / "site")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "site" / "acceptance" / "index.html").is_file()
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "first-run.md"
    page.write_text(page.read_text().replace("recertification.md#in-the-cluster-deploy", "recertification.md#gone"))
    broken = _build(copy, tmp_path / "site2")
    assert broken.returncode != 0
    assert "does not contain an anchor '#gone'" in broken.stderr
