"""The fail-closed rule for skips, written once: a check that did not run has not passed.

A skip stands only when it names its cause (the check it follows from: one root cause, one finding) and that cause
failed or errored. A skip whose cause passed is an error: the evidence contradicts itself. A skip that names no cause
is an error too: nothing failed to explain why the check could not be decided. A skip whose cause did not run at all
stands here; the verdict counts the run incomplete for it.
"""

from __future__ import annotations

import dataclasses

from gpucert.plan.checks import CheckStatus, Finding

__all__ = ["BAD", "skip_stands"]

BAD = (CheckStatus.FAIL, CheckStatus.ERROR)


def skip_stands(found: Finding, cause: Finding | None) -> Finding:
    """`found` as it stands once its skip is held to `cause` (the finding of the check it names; None when that
    check did not run): unchanged, or an error saying why the skip does not stand."""
    if found.status is not CheckStatus.SKIP:
        return found
    if found.cause is None:
        message = f"the check could not be decided, and no other check failed to explain why: {found.message}"
        return dataclasses.replace(found, status=CheckStatus.ERROR, message=message)
    if cause is None or cause.status in BAD:
        return found
    message = f"skipped because of {found.cause}, which did not fail ({cause.status.value}): {found.message}"
    return dataclasses.replace(found, status=CheckStatus.ERROR, message=message, cause=None)
