"""Where the suites, examples and baselines are: the checkout this package was installed from."""

from __future__ import annotations

from pathlib import Path

from gpucert.errors import ConfigError

__all__ = ["project_root", "source_commit"]


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
