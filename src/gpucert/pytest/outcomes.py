"""Outcomes: how a check's Finding becomes a test's outcome (`expect`), and how a test report becomes the check's
Finding again, in the controller's words: pass, fail, error, skip with its failing cause, or waived.

The fail-closed rule lives here: a check that did not run, with no failing check to say why, has not passed; its
skip is reported as an error. A failure a waiver accepts is pytest's xfail, with the waiver as the reason.

A `gpus` item (one per check and node) carries each of its GPUs' findings (gpus.py): its report says the one that
says most, its message every GPU that did not pass, and the controller counts every GPU's check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpucert.errors import GpucertError
from gpucert.evaluate.skips import skip_stands
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.pytest.gpus import GpuChecks, final
from gpucert.report import details
from gpucert.report.failure_text import check_failure

if TYPE_CHECKING:
    from _pytest.outcomes import Skipped

    from gpucert.pytest.context import RunContext
else:
    Skipped = pytest.skip.Exception

__all__ = ["CheckFailed", "CheckSkipped", "expect", "judge_report"]


class CheckFailed(AssertionError):
    """A check decided fail (or error): carries the Finding, whose message is the assertion message, and for a
    `gpus` item every GPU's finding (`findings`; the Finding then sums them up)."""

    def __init__(self, finding: Finding, findings: tuple[Finding, ...] = ()) -> None:
        self.finding = finding
        self.findings = findings
        super().__init__(f"[{finding.check}] {finding.message}")


class CheckSkipped(Skipped):
    """A check that cannot run because another check failed: carries the Finding and its cause (and for a `gpus`
    item every GPU's finding, as CheckFailed does)."""

    def __init__(self, finding: Finding, findings: tuple[Finding, ...] = ()) -> None:
        self.finding = finding
        self.findings = findings
        super().__init__(finding.message, allow_module_level=False)


def expect(decision: Finding | GpuChecks) -> None:
    """Turn a decision into the test's outcome: pass returns, skip skips with its reason, fail and error raise (a
    node's GPUs: any failure or error fails, else any skip skips, else any waiver is the waived failure)."""
    if isinstance(decision, GpuChecks):
        status = decision.status
        if status is CheckStatus.PASS:
            return
        if status is CheckStatus.SKIP:
            raise CheckSkipped(decision.summary(), decision.findings)
        raise CheckFailed(decision.summary(), decision.findings)
    if decision.status is CheckStatus.PASS:
        return
    if decision.status is CheckStatus.SKIP:
        raise CheckSkipped(decision)
    raise CheckFailed(decision)


def _finding(report: pytest.TestReport, call: pytest.CallInfo[None], key: CheckKey) -> Finding:
    """The Finding a report says, when the test did not raise one of gpucert's own."""
    exc = call.excinfo.value if call.excinfo is not None else None
    if isinstance(exc, CheckFailed | CheckSkipped):
        return exc.finding
    check, node, gpu = key.check, key.node, key.gpu
    if report.passed:
        return Finding(check, CheckStatus.PASS, node, gpu)
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return Finding(check, CheckStatus.SKIP, node, gpu, reason.removeprefix("Skipped: "))
    if isinstance(exc, AssertionError) and report.when == "call":
        return Finding(check, CheckStatus.FAIL, node, gpu, str(exc).splitlines()[0] if str(exc) else "failed")
    text = f"{type(exc).__name__}: {exc}" if exc is not None else str(report.longrepr).splitlines()[-1]
    return Finding(check, CheckStatus.ERROR, node, gpu, f"the check could not run: {text}")


def _decisive(report: pytest.TestReport) -> bool:
    """The report that decides the check: the call, a setup that did not pass, a teardown that failed."""
    return (
        report.when == "call"
        or (report.when == "setup" and not report.passed)
        or (report.when == "teardown" and report.failed)
    )


def _skip_or_fail_closed(report: pytest.TestReport, finding: Finding) -> Finding:
    """A skip with a failing cause says it plainly; a skip without one is an error (fail closed)."""
    if finding.status is not CheckStatus.SKIP:
        return finding
    if finding.cause is not None:
        if isinstance(report.longrepr, tuple):
            path, line, _ = report.longrepr  # pytest's skip reason, said plainly (not the exception's class name)
            report.longrepr = (path, line, f"Skipped: {finding.message} (follows from {finding.cause})")
        return finding
    finding = skip_stands(finding, None)  # a check that did not run, with no failing cause, has not passed
    report.outcome = "failed"
    report.longrepr = f"[{finding.check}] {finding.message}"
    return finding


def _waive(report: pytest.TestReport, finding: Finding, ctx: RunContext, key: CheckKey) -> Finding:
    """A failure the run's waivers accept becomes waived, and the report an xfail."""
    if finding.status is not CheckStatus.FAIL:
        return finding
    finding = ctx.evaluation.waive(finding, key)
    if finding.status is CheckStatus.WAIVED:
        # pytest's own word for a failure that was expected and accepted: xfail (JUnit <skipped
        # type="pytest.xfail">, pytest-html "Expected failures", the terminal's x), with the waiver as reason
        report.outcome = "skipped"
        report.wasxfail = f"[{finding.check}] {finding.message}"
    return finding


def _evidence(ctx: RunContext, finding: Finding) -> dict[str, object] | None:
    """A finding's evidence, for the controller (Allure) and pytest-html's row."""
    try:
        return details.evidence_for(ctx.evaluation, finding)
    except GpucertError as exc:
        return {"unreadable": str(exc)}


def _one(
    item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport, ctx: RunContext, key: CheckKey
) -> Finding:
    """The Finding of an item that decides one check, its report made to say it."""
    finding = _skip_or_fail_closed(report, _finding(report, call, key))
    finding = _waive(report, finding, ctx, key)
    if isinstance(call.excinfo.value if call.excinfo else None, CheckFailed) and report.failed:
        check_failure(report, finding)
    return finding


def _gpus(
    call: pytest.CallInfo[None], report: pytest.TestReport, ctx: RunContext, keys: tuple[CheckKey, ...]
) -> tuple[Finding, ...]:
    """Each GPU's Finding of a `gpus` item, its report made to say the one that says most."""
    exc = call.excinfo.value if call.excinfo is not None else None
    ours = isinstance(exc, CheckFailed | CheckSkipped) and len(exc.findings) == len(keys)
    if ours:
        findings: tuple[Finding, ...] = exc.findings  # type: ignore[union-attr]
    else:  # the test passed, or something else than its decision ended it: each GPU's check says that
        findings = tuple(final(ctx, _finding(report, call, key), key) for key in keys)
    checks = GpuChecks(keys[0].check, keys[0].node or "", findings)
    summary = checks.summary()
    status = checks.status
    if status in (CheckStatus.FAIL, CheckStatus.ERROR):
        if ours or not report.failed:  # pytest's own failure (a test's own assertion, a fixture's error) stays
            report.outcome = "failed"
            check_failure(report, summary)
    elif status is CheckStatus.SKIP and isinstance(report.longrepr, tuple):
        path, line, _ = report.longrepr  # the skip's reason, every skipped GPU's cause said plainly
        report.longrepr = (path, line, f"Skipped: [{summary.check}] {summary.message}")
    elif status is CheckStatus.WAIVED:
        report.outcome = "skipped"
        report.wasxfail = f"[{summary.check}] {summary.message}"
    return findings


def judge_report(
    item: pytest.Item,
    call: pytest.CallInfo[None],
    report: pytest.TestReport,
    ctx: RunContext,
    keys: tuple[CheckKey, ...],
    *,
    of_gpus: bool = False,
) -> None:
    """Make the report that decides `keys` say the checks' outcome, and carry each one's Finding."""
    if not _decisive(report):
        return
    findings = _gpus(call, report, ctx, keys) if of_gpus else (_one(item, call, report, ctx, keys[0]),)
    # a report keeps attributes it was given: xdist serialises `gpucert` to the controller, pytest-html reads `extras`
    checks: list[dict[str, Any]] = []
    html = item.config.pluginmanager.hasplugin("html")
    extra: list[Any] = []
    for key, finding in zip(keys, findings, strict=True):
        check: dict[str, Any] = {"key": key.to_json(), "finding": finding.to_json()}
        if finding.status in (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED):
            check["evidence"] = evidence = _evidence(ctx, finding)
            if html:
                from pytest_html import extras

                name = "evidence" if len(keys) == 1 else f"evidence {finding.where}"
                extra.append(extras.json(evidence, name=name))
        checks.append(check)
    carrier: Any = report
    carrier.gpucert = {"checks": checks, "start": call.start, "stop": call.stop}
    if extra:
        carrier.extras = [*getattr(report, "extras", []), *extra]
