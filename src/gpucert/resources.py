"""Where the suites, examples and baselines are: the checkout this package was installed from."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from gpucert.errors import ConfigError

__all__ = ["code_digest", "made_by", "project_root", "source_commit"]


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


@functools.cache  # once a process: the code a process runs does not change under it (an edit is a new process's)
def code_digest() -> str:
    """`sha256:<hex>` over gpucert's own package: every file under src/gpucert but the interpreter's caches, in the
    order of their paths, each as its path, its length and its bytes (a file renamed, moved or cut at another place
    is another digest). What run.json records beside gpucert_version: two runs with the same digest were decided by
    the same rules, byte for byte, which a version string cannot say of a checkout (pytest/carried.py keeps a
    carried node's decision only then). About 8 ms of CPU for its ~240 files, once a run."""
    package = Path(__file__).resolve().parent
    files = sorted(
        (p.relative_to(package).as_posix(), p)
        for p in package.rglob("*")
        if "__pycache__" not in p.relative_to(package).parts and p.suffix not in (".pyc", ".pyo") and p.is_file()
    )
    h = hashlib.sha256()
    for name, path in files:
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return "sha256:" + h.hexdigest()


def made_by() -> dict[str, str | None]:
    """Which gpucert a run.json says decided the run: its version, its checkout's commit, the digest of its code."""
    from gpucert._version import __version__

    return {"gpucert_version": __version__, "git_commit": source_commit(), "gpucert_code": code_digest()}
