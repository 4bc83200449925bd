"""Where the suites, examples and baselines are: the checkout this package was installed from."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from gpucert.errors import ConfigError

__all__ = ["DECIDING", "code_digest", "made_by", "project_root", "source_commit", "tree_digest"]


def project_root() -> Path:
    """The repository holding suites/, fixtures/, examples/ and baselines/ (gpucert installs from a checkout)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "suites").is_dir() or not (root / "conftest.py").is_file():
        raise ConfigError(
            "the gpucert suites are not next to this installation; install gpucert from its "
            "repository checkout (pip install -e .)",
            path=root,
        )
    return root


def source_commit() -> str | None:
    """The git commit of the checkout gpucert runs from, or None outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


# what decides a run's outcomes beside the package, in the checkout it runs from (cli/suites.py runs pytest over
# suites/ with its rootdir and `-c pyproject.toml`: the suites turn each decision into the test's outcome, the
# repository's conftest.py loads fixtures/, and pyproject.toml's [tool.pytest.ini_options] sets xfail_strict, the
# warnings filter and the plugins)
DECIDING = ("suites", "fixtures", "conftest.py", "pyproject.toml")


@functools.cache  # once a process: the code a process runs does not change under it (an edit is a new process's)
def code_digest() -> str:
    """`sha256:<hex>` over the code that decides a run: every file under src/gpucert but the interpreter's caches,
    and, in the checkout it runs from, suites/, fixtures/, conftest.py and pyproject.toml (`DECIDING`), in the order
    of their paths, each as its path, its length and its bytes (a file renamed, moved or cut at another place is
    another digest). What run.json records beside gpucert_version: two runs with the same digest were decided by the
    same rules and the same suites, byte for byte, which a version string cannot say of a checkout
    (acceptance/retest_kept.py keeps a carried node's decision only then; a suite edited in a checkout, src/
    untouched, is other code). About 8 ms of CPU for its ~260 files, once a run."""
    package = Path(__file__).resolve().parent
    return tree_digest(package, package.parents[1])


def tree_digest(package: Path, root: Path) -> str:
    """`code_digest` of the package at `package` run from the checkout at `root` (a part of `DECIDING` that is not
    there, as beside an installed wheel, adds nothing: such an installation runs no suites)."""
    files = [(f"gpucert/{name}", path) for name, path in _files(package)]
    for part in DECIDING:
        path = root / part
        if path.is_file():
            files.append((part, path))
        elif path.is_dir():
            files += [(f"{part}/{name}", p) for name, p in _files(path)]
    h = hashlib.sha256()
    for name, path in sorted(files):
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return "sha256:" + h.hexdigest()


def _files(folder: Path) -> list[tuple[str, Path]]:
    return [
        (p.relative_to(folder).as_posix(), p)
        for p in folder.rglob("*")
        if "__pycache__" not in p.relative_to(folder).parts and p.suffix not in (".pyc", ".pyo") and p.is_file()
    ]


def made_by() -> dict[str, str | None]:
    """Which gpucert a run.json says decided the run: its version, its checkout's commit, the digest of its code."""
    from gpucert._version import __version__

    return {"gpucert_version": __version__, "git_commit": source_commit(), "gpucert_code": code_digest()}
