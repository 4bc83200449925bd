"""What a failed check says where pytest shows a failure: the terminal's failure section and FAILED line,
pytest-html's row, JUnit's <failure>. One line naming the check id and why, not the traceback through gpucert's
own frames ending in `gpucert.pytest.outcomes.CheckFailed: ...`.

pytest's own representation classes are used (`_pytest._code.code` in pytest 8.3 to 9.1: ReprExceptionInfo,
ReprTraceback, ReprEntryNative, ReprFileLocation), because pytest-xdist serialises exactly those between workers
and the controller (xdist's report serialisation reads `reprtraceback` and `reprcrash`); a plain string would
leave the FAILED line without its message.
"""

from __future__ import annotations

from typing import Any

from gpucert.plan.checks import Finding

__all__ = ["check_failure"]


def check_failure(report: Any, finding: Finding) -> None:
    """Make a failed check's report say `[check] message`, at the test's location."""
    try:
        from _pytest._code.code import ReprEntryNative, ReprExceptionInfo, ReprFileLocation, ReprTraceback
    except ImportError:  # pragma: no cover - pytest moved them: keep pytest's own text
        return
    text = f"[{finding.check}] {finding.message}"
    path, line, _ = report.location
    report.longrepr = ReprExceptionInfo(
        reprtraceback=ReprTraceback([ReprEntryNative([text + "\n"])], None, "native"),
        reprcrash=ReprFileLocation(str(path), (line or 0) + 1, text),
    )
