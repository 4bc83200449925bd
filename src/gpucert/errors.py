"""The one exception family of gpucert.

Every error the user can cause or meet carries the object it is about and says the fix, so the CLI can print one
line and exit 2 (usage or configuration) or 3 (could not complete) without a traceback.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ClusterAccessError",
    "ConfigError",
    "EvidenceError",
    "GpucertError",
    "IncompleteRunError",
    "NodeBusyError",
    "RunInterrupted",
]


class GpucertError(Exception):
    """Base of every error gpucert raises on purpose."""

    exit_code = 3


class ConfigError(GpucertError):
    """A spec, fleet, baseline or option is wrong: the user must change an input."""

    exit_code = 2

    def __init__(
        self, message: str, *, path: Path | str | None = None, key: str | None = None, line: int | None = None
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.key = key
        self.line = line
        where = ""
        if self.path is not None:
            where = str(self.path)
            if line is not None:
                where += f":{line}"
            where += ": "
        if key:
            where += f"{key}: "
        super().__init__(f"{where}{message}")


class EvidenceError(GpucertError):
    """An evidence or run folder cannot be read as gpucert wrote it."""

    exit_code = 2

    def __init__(self, message: str, *, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.message = message  # without the path: for a caller that names the file itself
        super().__init__(f"{self.path}: {message}" if self.path is not None else message)


class ClusterAccessError(GpucertError):
    """The cluster refused or could not be reached; the message names the endpoint or the missing permission."""

    exit_code = 2


class AdmissionError(ClusterAccessError):
    """The API server's admission (Pod Security, a policy webhook) refused an object RBAC allowed; `said` is the
    API's own message, quoted."""

    def __init__(self, message: str, said: str) -> None:
        self.said = said
        super().__init__(message)


class IncompleteRunError(GpucertError):
    """The run could not complete (a target failed beyond retries, an interrupted measure)."""

    exit_code = 3


class NodeBusyError(GpucertError):
    """Another recertification holds the node's lease: this one refuses to start (nothing was changed)."""

    exit_code = 3


class RunInterrupted(KeyboardInterrupt):
    """A Ctrl-C (or SIGTERM) during a run, saying which run folder it left: `folder` is None when none was kept (the
    run was stopped before its folder was made, or before any node was measured: the folder went again)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        super().__init__(str(folder) if folder is not None else "")

    def said(self) -> str:
        """What the command prints: where the evidence is, or that there is none to look for."""
        if self.folder is None:
            return "interrupted before any node was measured: no run folder was kept; run the command again"
        return f"interrupted; the evidence measured so far is in {self.folder}"
