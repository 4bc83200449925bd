"""DCGM diagnostic rules: one test of `dcgmi diag` for one GPU, from the parsed result. Pure.

DCGM prints a warning as Fail and can fail a test's summary with every GPU passing (DCGM issue 253): both fail.
A test DCGM skipped was not run on the GPU, which is an error, never a pass; so is a test with no result for the GPU
(a summary alone, or nothing at all), whatever the summary says.
"""

from __future__ import annotations

from gpucert.evaluate.locate import gpu_evidence
from gpucert.evaluate.registry import no_rule
from gpucert.evaluate.view import GpuSlot, RunView
from gpucert.measure.evidence import DcgmEvidence, DcgmGpuResult, DcgmTestResult
from gpucert.plan.checks import CheckKey, CheckStatus, Finding

__all__ = ["decide_dcgm", "judge_dcgm"]


def _untied(test: str, result: DcgmTestResult) -> str:
    entries = ", ".join(f"DCGM GPU {g} {r.status}" for g, r in sorted(result.untied.items()))
    return f"DCGM reported the {test} test by its own GPU ids only ({entries}; no serial ties them to boards)"


def _node_level(test: str, d: DcgmEvidence) -> bool:
    """DCGM 3.x runs its deployment checks (our `software` test) for the node, naming no GPU: their result is the
    node's (tests/fixtures and ../shared/samples/dcgm/dcgm3-r3-pass.json). Every other result is per GPU."""
    return test == "software" and d.raw is not None and "DCGM GPU Diagnostic" in d.raw


def _status(test: str, result: DcgmTestResult, mine: DcgmGpuResult | None, d: DcgmEvidence) -> str:
    """The GPU's status of the test (Pass, Skip; Fail is judged before), or why there is none to judge: a summary
    speaks for no GPU in particular, so a missing per-GPU result is never a pass (DCGM 3.x's node-wide
    deployment checks aside)."""
    if mine is not None:
        return mine.status
    if not _node_level(test, d):
        summary = f"its summary is {result.summary}" if result.summary else "it gave no summary"
        return f"DCGM gave no per-GPU result of the {test} test ({summary})"
    status = result.summary or "none"
    return status if status in ("Pass", "Skip") else f"DCGM {test} gave the node no status it defines ({status})"


def _this_gpu(
    test: str, where: str, result: DcgmTestResult, mine: DcgmGpuResult | None, serial: str | None
) -> tuple[str, str] | None:
    """What DCGM's own result for this GPU says at once ("fail" or "error", and why), or None to read on."""
    if mine is None and result.untied:
        return "error", f"{where}: {_untied(test, result)}, so none of them is charged to this GPU: it cannot be judged"
    if mine is None and result.gpus:
        return "error", f"{where}: DCGM reported the {test} test for GPUs {sorted(result.gpus)}, not for this one"
    if mine is None:
        return None
    if mine.status not in ("Pass", "Fail", "Skip"):
        return "fail", f"{where}: DCGM {test} {mine.status}: {mine.describe()}"
    if serial is not None and mine.serial is not None and mine.serial != serial:
        return "error", (
            f"{where}: DCGM tested a GPU with serial {mine.serial}, this GPU's is {serial} (an embedded host engine "
            "on another host?)"
        )
    if mine.status == "Fail":
        # with the DCGM_FR_* id, category and severity where DCGM gave them, as a vendor looks them up
        return "fail", f"{where}: DCGM {test} Fail: {mine.describe()}"
    return None


def _exit_unexplained(d: DcgmEvidence) -> bool:
    """dcgmi diag exited non-zero and no test failed: its results are not whole (the exit code first: a zero exit,
    what nearly every diagnostic gives, needs no look at its results)."""
    if d.exit_code in (None, 0):
        return False
    failed = any(r.status == "Fail" for t in d.results.values() for r in t.entries())
    return not failed and not any(t.summary == "Fail" for t in d.results.values())


def _not_run(node: str, d: DcgmEvidence, level: int) -> str | None:
    """Why the diagnostic as a whole cannot be read for this check: a lower level than asked, or dcgmi failing."""
    if d.level < level:
        return f"{node}: DCGM ran level {d.level}, the spec asks for level {level}"
    if d.runtime_error:
        return f"{node}: dcgmi diag failed: {d.runtime_error}"
    return None


def judge_dcgm(
    test: str,
    node: str,
    gpu: int,
    d: DcgmEvidence,
    level: int,
    serial: str | None = None,
) -> Finding:
    """The finding of `dcgm.<test>` for GPU `gpu` of `node`, from a diagnostic that should have run `level`."""
    check, where = f"dcgm.{test}", f"{node}/gpu{gpu}"

    def error(message: str) -> Finding:
        return Finding(check, CheckStatus.ERROR, node, gpu, message)

    def fail(message: str) -> Finding:
        return Finding(check, CheckStatus.FAIL, node, gpu, message, observed="Fail", expected="Pass")

    if not_run := _not_run(node, d, level):
        return error(not_run)
    result = d.results.get(test)
    if result is None:
        return Finding(
            check,
            CheckStatus.FAIL,
            node,
            gpu,
            f"{where}: DCGM level {d.level} did not run the {test} test (exit code {d.exit_code})",
        )
    mine = result.gpus.get(gpu)
    said = _this_gpu(test, where, result, mine, serial)
    if said is not None:
        return fail(said[1]) if said[0] == "fail" else error(said[1])
    if result.summary == "Fail" and not any(r.status == "Fail" for r in result.entries()):
        return fail(f"{where}: DCGM {test} summary is Fail though no GPU result is ({'; '.join(result.info)})")
    status = _status(test, result, mine, d)
    if status not in ("Pass", "Skip"):
        return error(f"{where}: {status}: it cannot be judged")
    if _exit_unexplained(d):
        return error(f"{where}: dcgmi diag exited {d.exit_code} though no test failed: its results are not whole")
    if status == "Skip":
        why = "; ".join([*(mine.warnings if mine else []), *result.info]) or "DCGM gave no reason"
        return error(f"{where}: DCGM skipped the {test} test, so it was not run: {why}")
    return Finding(
        check, CheckStatus.PASS, node, gpu, f"{where}: DCGM {test} {status}", observed=status, expected="Pass"
    )


def decide_dcgm(view: RunView, key: CheckKey) -> Finding:
    """`dcgm.<test>` of one GPU, from the node's DCGM diagnostic."""
    node, gpu = key.node, key.gpu
    if node is None or gpu is None:
        raise no_rule(key)
    g = gpu_evidence(view, key.check, GpuSlot(node, gpu))
    if isinstance(g, Finding):
        return g
    ev = view.evidence(node)
    if ev is None or ev.dcgm is None:
        return Finding(key.check, CheckStatus.ERROR, node, gpu, f"{node}: no DCGM diagnostic was recorded")
    test = key.check.removeprefix("dcgm.")
    d = ev.dcgm
    return judge_dcgm(test, node, gpu, d, view.spec.certify.dcgm.level, serial=g.serial)
