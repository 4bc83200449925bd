"""DCGM diagnostic rules: one test of `dcgmi diag` for one GPU, from the parsed result. Pure.

DCGM prints a warning as Fail and can fail a test's summary with every GPU passing (DCGM issue 253): both fail.
A test DCGM skipped was not run on the GPU, which is an error, never a pass.
"""

from __future__ import annotations

from gpucert.checks import CheckStatus, Finding
from gpucert.evidence import DcgmEvidence

__all__ = ["judge_dcgm"]


def judge_dcgm(test: str, node: str, gpu: int, d: DcgmEvidence, level: int) -> Finding:
    """The finding of `dcgm.<test>` for GPU `gpu` of `node`, from a diagnostic that should have run `level`."""
    check, where = f"dcgm.{test}", f"{node}/gpu{gpu}"

    def error(message: str) -> Finding:
        return Finding(check, CheckStatus.ERROR, node, gpu, message)

    def fail(message: str) -> Finding:
        return Finding(check, CheckStatus.FAIL, node, gpu, message, observed="Fail", expected="Pass")

    if d.level < level:
        return error(f"{node}: DCGM ran level {d.level}, the spec asks for level {level}")
    if d.runtime_error:
        return error(f"{node}: dcgmi diag failed: {d.runtime_error}")
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
    if mine is not None and mine.status == "Fail":
        # with the DCGM_FR_* id, category and severity where DCGM gave them, as a vendor looks them up
        return fail(f"{where}: DCGM {test} Fail: {mine.describe()}")
    if result.summary == "Fail" and not any(r.status == "Fail" for r in result.gpus.values()):
        return fail(f"{where}: DCGM {test} summary is Fail though no GPU result is ({'; '.join(result.info)})")
    status = mine.status if mine is not None else (result.summary or "Pass")
    if status == "Skip":
        why = "; ".join([*(mine.warnings if mine else []), *result.info]) or "DCGM gave no reason"
        return error(f"{where}: DCGM skipped the {test} test, so it was not run: {why}")
    return Finding(
        check, CheckStatus.PASS, node, gpu, f"{where}: DCGM {test} {status}", observed=status, expected="Pass"
    )
