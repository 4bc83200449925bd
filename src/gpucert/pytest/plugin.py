"""The pytest plugin: options, plan and measure before collection, parametrization, outcomes, reports.

Run state lives in `config.stash`. Plan and measure run once, in the controller, before xdist starts its workers,
and only in a session that runs tests (`--co`, `--help`, `--markers`, `--fixtures` never create a run folder);
workers receive the run folder through `workerinput` and only evaluate. The verdict counts every check the spec
requires (gpucert.plan.required), so a session that deselected, never reached or skipped some without a failing cause
cannot say PASS.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpucert.acceptance.waivers import serial_of
from gpucert.cli.args import non_empty
from gpucert.errors import GpucertError
from gpucert.evaluate.evaluation import Evaluation, GpuSlot
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.fabric_checks import rail_detail
from gpucert.plan.runfolder import RunFolder
from gpucert.report import alluredir, details
from gpucert.report.allure import write_allure
from gpucert.report.failure_text import check_failure
from gpucert.report.markdown import summary_markdown
from gpucert.report.terminal import WRITTEN, tell_junit, terminal_summary
from gpucert.report.verdict import Outcome, build_verdict, kind_of
from gpucert.report.verdict_model import Verdict
from gpucert.spec.baseline import GpuBaseline
from gpucert.spec.cluster import ClusterSpec

NO_SPEC = "gpucert suites need a spec: pytest suites --spec SPEC (or run `gpucert certify SPEC`)"

if TYPE_CHECKING:
    from _pytest.outcomes import Skipped
else:
    Skipped = pytest.skip.Exception

__all__ = ["CheckFailed", "CheckSkipped", "RunContext", "check_key", "expect", "run_context"]


class CheckFailed(AssertionError):
    """A check decided fail (or error): carries the Finding, whose message is the assertion message."""

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        super().__init__(f"[{finding.check}] {finding.message}")


class CheckSkipped(Skipped):
    """A check that cannot run because another check failed: carries the Finding and its cause."""

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        super().__init__(finding.message, allow_module_level=False)


def expect(finding: Finding) -> None:
    """Turn a Finding into the test's outcome: pass returns, skip skips with its reason, fail and error raise."""
    if finding.status is CheckStatus.PASS:
        return
    if finding.status is CheckStatus.SKIP:
        raise CheckSkipped(finding)
    raise CheckFailed(finding)


@dataclass
class RunContext:
    spec: ClusterSpec
    baselines: dict[str, GpuBaseline]  # each pool's SKU baseline
    folder: RunFolder
    readonly: bool = False  # a session that only lists or shows (--co): reads the run folder, writes nothing
    outcomes: dict[CheckKey, Outcome] = field(default_factory=dict)
    selected: set[CheckKey] | None = None  # the keys the session collected, after -k, --lf, --deselect
    collected: int = 0
    left_out: int = 0  # items whose check the spec does not require
    evidence_of: dict[CheckKey, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    verdict: Verdict | None = None
    _evaluation: Evaluation | None = None

    @property
    def evaluation(self) -> Evaluation:
        if self._evaluation is None:
            self._evaluation = Evaluation(self.folder, self.spec, self.baselines)
        return self._evaluation


context_key = pytest.StashKey[RunContext]()


def run_context(config: pytest.Config) -> RunContext | None:
    return config.stash.get(context_key, None)


def _fingerprint(text: str) -> str:
    """What `gpucert keygen` prints for a key: the report shows it, so it says nothing else."""
    if not re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a key fingerprint (SHA256:... as `gpucert keygen` prints)")
    return text


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("gpucert", "gpucert cluster certification")
    group.addoption(
        "--spec", metavar="SPEC", type=non_empty, help="ClusterSpec to certify: plan, measure and evaluate it"
    )
    group.addoption(
        "--evidence",
        metavar="DIR",
        type=non_empty,
        help="re-evaluate recorded evidence (a run folder or its evidence/) instead of measuring",
    )
    group.addoption(
        "--reports",
        metavar="DIR",
        type=non_empty,
        default="reports",
        help="where the run folder is created (default: ./reports)",
    )
    group.addoption(
        "--run-dir", metavar="DIR", type=non_empty, help="evaluate this prepared run folder in place (used by the CLI)"
    )
    group.addoption("--no-measure", action="store_true", help="plan only: configure checks need no evidence")
    group.addoption("--static", action="store_true", help="no cluster at all: the static recipe gate")
    group.addoption(
        "--signer",
        metavar="FINGERPRINT",
        type=_fingerprint,
        help="the key that will sign this run, shown in the report",
    )
    alluredir.add_option(parser, pluginmanager)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser) -> Generator[None]:
    yield
    alluredir.add_option_if_missing(parser, early_config.pluginmanager)


def _runs_tests(config: pytest.Config) -> bool:
    """Whether this session will run tests (and so may plan and measure): not --co, --help, --fixtures, ..."""
    o = config.option
    shows = (
        "help",
        "markers",
        "collectonly",
        "showfixtures",
        "show_fixtures_per_test",
        "setupplan",
        "setuponly",
        "cacheshow",
    )
    return not any(getattr(o, name, False) for name in shows)


def _prepare(config: pytest.Config) -> RunContext | None:  # noqa: C901
    spec_opt = config.getoption("spec")
    if spec_opt is None:
        for opt in ("evidence", "run_dir"):
            if config.getoption(opt):
                raise pytest.UsageError(
                    f"--{opt.replace('_', '-')} needs --spec SPEC: the spec says what to check the evidence against"
                )
        return None
    modes = [f"--{o.replace('_', '-')}" for o in ("static", "evidence", "no_measure", "run_dir") if config.getoption(o)]
    if len(modes) > 1:
        raise pytest.UsageError(f"{' and '.join(modes)} choose different runs: give one of them")
    from gpucert.plan import run as runner

    try:
        spec, baselines = runner.load_inputs(Path(spec_opt))
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            return RunContext(spec, baselines, RunFolder(Path(workerinput["gpucert_run_dir"])))
        run_dir_opt = config.getoption("run_dir")
        evidence = config.getoption("evidence")
        if run_dir_opt:
            folder = RunFolder(Path(run_dir_opt))
            if not folder.prepared:
                raise pytest.UsageError(f"--run-dir needs a prepared run folder with inventory.json; got {folder.path}")
            assert spec.path is not None
            folder.judged_by(spec.path, spec.baseline_paths())
            folder.check()
            return RunContext(spec, baselines, folder, readonly=not _runs_tests(config))
        if not _runs_tests(config):
            # listing or showing: read recorded evidence in place, or parametrize nothing; never plan or measure
            if not evidence:
                return None
            recorded = runner.recorded_run(Path(evidence))
            recorded.check()
            return RunContext(spec, baselines, recorded, readonly=True)
        mode = (
            runner.Mode.STATIC
            if config.getoption("static")
            else runner.Mode.EVIDENCE
            if evidence
            else runner.Mode.PLAN
            if config.getoption("no_measure")
            else runner.Mode.MEASURE
        )
        folder = runner.prepare(
            spec, Path(config.getoption("reports")), mode, evidence=Path(evidence) if evidence else None
        )
        return RunContext(spec, baselines, folder)
    except GpucertError as exc:
        if exc.exit_code == 2:  # the input is wrong: a usage error, as pytest says it
            raise pytest.UsageError(str(exc)) from None
        pytest.exit(f"gpucert: the run could not complete: {exc}", returncode=exc.exit_code)
    except OSError as exc:  # a path the system refuses (a name too long, a path under a file): the input is wrong
        from gpucert.cli.args import os_error

        raise pytest.UsageError(os_error(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    ctx = _prepare(config)
    if ctx is None:
        return
    config.stash[context_key] = ctx
    if hasattr(config, "workerinput") or ctx.readonly:
        return
    config.pluginmanager.register(Controller(ctx), "gpucert-controller")
    config.pluginmanager.register(VerdictWriter(ctx), "gpucert-verdict")
    opt = config.option
    if getattr(opt, "htmlpath", "missing") is None:
        opt.htmlpath = str(ctx.folder.report_path)
        opt.self_contained_html = True
    if opt.xmlpath is None:
        opt.xmlpath = str(ctx.folder.junit_path)
    if config.pluginmanager.hasplugin("html"):
        from gpucert.report.html import HtmlSummary

        config.pluginmanager.register(HtmlSummary(ctx, config.getoption("signer")), "gpucert-html")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    ctx = run_context(node.config)
    if ctx is not None:
        node.workerinput["gpucert_run_dir"] = str(ctx.folder.path)


def pytest_sessionstart(session: pytest.Session) -> None:
    if run_context(session.config) is not None:
        alluredir.take_over(session.config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    ctx = run_context(config)
    if ctx is not None:
        return [f"gpucert: spec {ctx.spec.metadata.name}, run folder {ctx.folder.path}"]
    if config.getoption("spec") and not _runs_tests(config):
        return [
            "gpucert: this session runs no tests, so it plans and measures nothing; the checks are parametrized "
            "over a run's inventory (add --evidence DIR to list those of a recorded run)"
        ]
    return []


# ---- parametrization over the inventory, and the plan's keys ------------------------------------------------


# the parameters that name a check's detail: those of a node, and those of the fleet (parametrized from the plan)
FLEET_DETAILS = ("gate_input", "pool", "racks")
DETAILS = ("component", "waiver", "rail", *FLEET_DETAILS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    ctx = run_context(metafunc.config)
    if ctx is None:
        return
    names = metafunc.fixturenames
    ev = ctx.evaluation
    if "waiver" in names:
        book = ev.waiver_book
        metafunc.parametrize("waiver", book.ids if book is not None else [])
    # checks of the fleet decided once per detail the plan names: the static gate's (one per configuration or
    # baseline it was given), a pool's fabric declaration, the link between two racks
    fleet_detail = next((p for p in FLEET_DETAILS if p in names), None)
    if fleet_detail is not None:
        marker = metafunc.definition.get_closest_marker("check")
        check = str(marker.args[0]) if marker is not None else ""
        details = sorted(k.detail for k in ev.plan.required if k.check == check and k.detail and not k.node)
        if details:
            metafunc.parametrize(fleet_detail, details, ids=details)
        return
    if not ({"node", "gpu"} & set(names)):
        return
    nodes = ev.inventory.names
    if "gpu" in names:
        slots = [GpuSlot(n, i) for n in nodes for i in range(ev.pools.gpus_per_node(n))]
        metafunc.parametrize("gpu", slots, ids=[repr(s) for s in slots])
    elif "rail" in names:  # a node's rails: those of its pool's fabric
        rails = [(n, rail_detail(r)) for n in nodes for r in range(ev.rails_of(n))]
        metafunc.parametrize(("node", "rail"), rails, ids=[f"{n}/{r}" for n, r in rails])
    elif "component" in names:
        pairs = [(n, c) for n in nodes for c in ev.components()]
        metafunc.parametrize(("node", "component"), pairs, ids=[f"{n}/{c}" for n, c in pairs])
    else:
        metafunc.parametrize("node", nodes, ids=nodes)
    if "dcgm_test" in names:
        metafunc.parametrize("dcgm_test", ev.dcgm_tests())


def check_key(item: pytest.Item) -> CheckKey | None:
    """The check a test item decides, from its `check` marker and its parameters."""
    marker = item.get_closest_marker("check")
    if marker is None:
        return None
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    try:
        check = str(marker.args[0]).format(**params)
    except (KeyError, IndexError):
        return None  # not parametrized by gpucert (no spec): the test skips and decides nothing
    gpu = params.get("gpu")
    detail = next((params[p] for p in DETAILS if isinstance(params.get(p), str)), None)
    if detail is None and set(FLEET_DETAILS) & set(getattr(item, "fixturenames", ())):
        return None  # the gate was given nothing for this check: no item decides it
    if isinstance(gpu, GpuSlot):
        return CheckKey(check, gpu.node, gpu.index, detail)
    node = params.get("node")
    return CheckKey(check, node if isinstance(node, str) else None, None, detail)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the items whose check the spec does not require (a probe it did not ask for, a 1-GPU node's P2P)."""
    ctx = run_context(config)
    if ctx is None:
        if _runs_tests(config) and any(item.get_closest_marker("check") for item in items):
            # a suite run without a spec would only skip: pytest's usage error (exit 4), with the fix
            raise pytest.UsageError(NO_SPEC)
        return
    plan = ctx.evaluation.plan
    kept = [
        item
        for item in items
        if ((key := check_key(item)) is None and not set(FLEET_DETAILS) & set(getattr(item, "fixturenames", ())))
        or (key is not None and key in plan)
    ]
    ctx.left_out = len(items) - len(kept)
    items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    ctx = run_context(session.config)
    if ctx is None:
        return
    keys = [k for k in map(check_key, session.items) if k is not None]
    ctx.selected = set(keys)
    ctx.collected = len(session.items)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # the controller learns what each worker selected when the worker finishes
        workeroutput["gpucert_selected"] = [k.to_json() for k in keys]


# ---- outcomes ----------------------------------------------------------------------------------------------


def _finding(report: pytest.TestReport, call: pytest.CallInfo[None], key: CheckKey) -> Finding:
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:  # noqa: C901
    report = yield
    ctx = run_context(item.config)
    key = check_key(item) if ctx is not None else None
    if ctx is None or key is None:
        return report
    decisive = (
        report.when == "call"
        or (report.when == "setup" and not report.passed)
        or (report.when == "teardown" and report.failed)
    )
    if not decisive:
        return report
    finding = _finding(report, call, key)
    if finding.status is CheckStatus.SKIP and finding.cause is not None and isinstance(report.longrepr, tuple):
        path, line, _ = report.longrepr  # pytest's skip reason, said plainly (not the exception's class name)
        report.longrepr = (path, line, f"Skipped: {finding.message} (follows from {finding.cause})")
    if finding.status is CheckStatus.SKIP and finding.cause is None:
        # a check that did not run, with no failing check to say why, has not passed: fail closed
        finding = dataclasses.replace(
            finding,
            status=CheckStatus.ERROR,
            message=f"the check could not be decided, and no other check failed to explain why: {finding.message}",
        )
        report.outcome = "failed"
        report.longrepr = f"[{finding.check}] {finding.message}"
    if finding.status is CheckStatus.FAIL and ctx.evaluation.waiver_book is not None:
        finding = ctx.evaluation.waiver_book.waive(finding, serial_of(ctx.evaluation))
        if finding.status is CheckStatus.WAIVED:
            # pytest's own word for a failure that was expected and accepted: xfail (JUnit <skipped
            # type="pytest.xfail">, pytest-html "Expected failures", the terminal's x), with the waiver as reason
            report.outcome = "skipped"
            report.wasxfail = f"[{finding.check}] {finding.message}"
    if isinstance(call.excinfo.value if call.excinfo else None, CheckFailed) and report.failed:
        check_failure(report, finding)
    report.gpucert = {"key": key.to_json(), "finding": finding.to_json(), "start": call.start, "stop": call.stop}
    if finding.status in (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED):
        try:
            evidence = details.evidence_for(ctx.evaluation, finding)
        except GpucertError as exc:
            evidence = {"unreadable": str(exc)}
        report.gpucert["evidence"] = evidence
        if item.config.pluginmanager.hasplugin("html"):
            from pytest_html import extras

            report.extras = [*getattr(report, "extras", []), extras.json(evidence, name="evidence")]
    return report


_RANK = {CheckStatus.PASS: 0, CheckStatus.WAIVED: 1, CheckStatus.SKIP: 2, CheckStatus.FAIL: 3, CheckStatus.ERROR: 4}


class Controller:
    """Collects every check's outcome in the controller process; at the end writes verdict.json, run.json and
    the Allure results, tells JUnit and the terminal the same result, and makes the exit status say it too."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "gpucert", None)
        if data is None:
            return
        key = CheckKey.from_json(data["key"])
        outcome = Outcome(Finding.from_json(data["finding"]), float(data["start"]), float(data["stop"]))
        before = self.ctx.outcomes.get(key)
        if before is None or _RANK[outcome.finding.status] >= _RANK[before.finding.status]:
            self.ctx.outcomes[key] = outcome
        if "evidence" in data:
            self.ctx.evidence_of[key] = data["evidence"]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.ctx.collected = len(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        selected = (getattr(node, "workeroutput", None) or {}).get("gpucert_selected")
        if selected is not None:
            self.ctx.selected = (self.ctx.selected or set()) | {CheckKey.from_json(d) for d in selected}

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from gpucert.plan.run import recorded_mode

        ctx = self.ctx
        ev = ctx.evaluation
        stopped = "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else None
        if session.shouldstop or session.shouldfail:
            stopped = str(session.shouldstop or session.shouldfail)
        verdict = build_verdict(
            run=ctx.folder.id,
            kind=kind_of(recorded_mode(ctx.folder)),
            spec=ctx.spec.metadata.name,
            target=ev.inventory.target,
            nodes=ev.inventory.names,
            gpus=ev.gpu_total(),
            plan=ev.plan,
            outcomes=ctx.outcomes,
            selected=ctx.selected,
            stopped=stopped,
            measured=ev.measured_at(),
            waivers={wid: w.to_json() for wid, w in ev.waiver_book.by_id.items()} if ev.waiver_book else None,
            retest=ctx.folder.read_retest(),
            node_pools={n: ev.pools.name_of(n) for n in ev.inventory.names},
            pools={
                p.name: {
                    "nodes": p.expect.nodes,
                    "gpusPerNode": p.expect.gpus_per_node,
                    "product": p.expect.gpu_product,
                    "baseline": ev.baselines[p.name].sku,
                    "nodeSelector": dict(p.node_selector),
                }
                for p in ctx.spec.pools
                if _summarised(ev, p.name)
            },
            beside=_beside(ctx),
        )
        ctx.verdict = verdict  # written last (VerdictWriter), after every report: a run cut short has no verdict
        if ev.inventory.target == "static":  # what a CI job posts on the pull request
            ctx.folder.summary_path.write_text(summary_markdown(verdict, ctx.folder.read_gate()), encoding="utf-8")
        finished = time.time()
        ctx.folder.write_run_info(
            spec=ctx.spec.metadata.name, target=ev.inventory.target, started=ctx.started, finished=finished
        )
        dirs = [ctx.folder.allure_dir]
        extra = alluredir.results_dir(session.config)
        if extra:
            dirs.append(extra)
        for results in dirs:
            write_allure(
                results,
                ctx.outcomes,
                ctx.evidence_of,
                verdict=verdict,
                started_ms=int(ctx.started * 1000),
                stopped_ms=int(finished * 1000),
            )
        tell_junit(session.config, verdict)
        if session.config.pluginmanager.hasplugin("html"):
            from gpucert.report.html import count_checks_in_footer, measurement_times
            from gpucert.report.html_top import measurement_window

            count_checks_in_footer(session.config, verdict, measurement_window(measurement_times(ev)))
        if not verdict.passed and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.ctx.verdict is not None:
            terminal_summary(terminalreporter, self.ctx.verdict, self.ctx.left_out, self.ctx.folder.verdict_path)


def _beside(ctx: RunContext) -> dict[str, Any]:
    """What the verdict says beside the checks: the fleet against the SKU figure (informational) and the peer
    comparisons too few peers ruled out, so that a pass is never silent about what it could not compare; whether
    the cluster was checked before the measure (optional, additive to v3); the recertification."""
    ev = ctx.evaluation
    beside: dict[str, Any] = {"fleetAgainstSku": ev.peers.against_sku(), "undecided": ev.peers.undecided()}
    beside["preflight"] = ctx.folder.read_preflight()
    recert = ev.recertification
    if recert is not None:
        beside["recertify"] = {
            "node": recert["node"],
            "handover": recert["handover"],
            "fleetPeers": len(recert.get("fleetPeers") or {}),
            "summary": details.recertify_summary(ev),
        }
    return beside


def _summarised(ev: Evaluation, pool: str) -> bool:
    """Whether the verdict sums up this pool: not in the static gate (no nodes), and on recertification only the
    node's own pool."""
    if ev.inventory.target == "static":
        return False
    return ev.recertification is None or bool(ev.pools.members(pool))


class VerdictWriter:
    """Writes verdict.json after every report of the run (report.html, junit.xml, Allure, run.json) is on disk: the
    verdict is the run's last word, so an interrupt before it leaves no verdict to sign, never a verdict that says
    more than the reports beside it."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.ctx.verdict is not None:
            self.ctx.folder.write_verdict(self.ctx.verdict.to_json())
            session.config.stash[WRITTEN] = self.ctx.verdict
