"""The session: the run a pytest session evaluates, opened once at configure time, and what the controller does at
its end (the verdict, run.json, figures.json, the Allure results, JUnit's and the terminal's word, the exit status).

Plan and measure run once, in the controller, before xdist starts its workers, and only in a session that runs tests
(`--co`, `--help`, `--markers`, `--fixtures` never create a run folder); workers receive the run folder through
`workerinput` and only evaluate. The verdict counts every check the spec requires (gpucert.plan.required), so a
session that deselected, never reached or skipped some without a failing cause cannot say PASS.
"""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from gpucert.errors import GpucertError
from gpucert.evaluate.evaluation import Evaluation
from gpucert.evaluate.held import figures_document
from gpucert.plan.checks import CheckKey, CheckStatus, Finding
from gpucert.plan.inputs import load_inputs
from gpucert.plan.layout import Mode
from gpucert.plan.recorded import recorded_run
from gpucert.plan.records import read_recertify_record
from gpucert.plan.runfolder import RunFolder
from gpucert.pytest import junit
from gpucert.pytest.carried import decide_carried
from gpucert.pytest.context import RunContext, context_key
from gpucert.pytest.gpus import RANK
from gpucert.pytest.junit_cases import WaivedCases, carried_cases
from gpucert.pytest.options import Options
from gpucert.report import alluredir, details
from gpucert.report.allure import write_allure
from gpucert.report.allure_history import carry_in, kept_history
from gpucert.report.allure_notrun import not_run
from gpucert.report.markdown import summary_markdown
from gpucert.report.terminal import KEPT, WRITTEN, terminal_summary
from gpucert.report.verdict import Outcome, build_verdict, kind_of
from gpucert.report.verdict_model import Verdict

__all__ = ["OWN_PLUGINS", "open_run", "refuse_blocked", "start"]

# the names gpucert registers its session's plugins under (start): `-p no:NAME` blocks a registration by name
# (pytest 9.1.1 _pytest/config/__init__.py, PytestPluginManager.consider_pluginarg -> pluggy 1.7 set_blocked), and
# pluggy's register() then returns None without a word: the run would end with no verdict, junit.xml all passing
OWN_PLUGINS = (
    "gpucert-junit-passed",
    "gpucert-junit-waived",
    "gpucert-controller",
    "gpucert-verdict",
    "gpucert-html",
)


# ---- opening the run, at configure time ----------------------------------------------------------------------


def _in_place(options: Options) -> RunContext:
    """--run-dir: a folder gpucert prepared, judged by the spec and baselines it was prepared with (its inputs/,
    read once). A spec given beside it must be that spec, byte for byte, and the baselines it names (by the same
    text, so from the given spec's folder) those baselines: a run judged by another spec than the one it records
    would sign a lie."""
    assert options.run_dir is not None
    folder = RunFolder(options.run_dir)
    if not folder.prepared:
        raise pytest.UsageError(f"--run-dir needs a prepared run folder with inventory.json; got {folder.path}")
    evaluation = Evaluation.from_run(folder)
    if options.spec is not None:
        given = options.spec.resolve()
        folder.judged_by(given, {p.name: (given.parent / p.baseline).resolve() for p in evaluation.spec.pools})
    folder.check()
    return RunContext(evaluation, readonly=not options.runs_tests)


def _mode(options: Options) -> Mode:
    """What a session that runs tests prepares: the static gate, a re-evaluation, a plan, or plan and measure."""
    if options.static:
        return Mode.STATIC
    if options.evidence is not None:
        return Mode.EVIDENCE
    return Mode.PLAN if options.no_measure else Mode.MEASURE


def _open(config: pytest.Config, options: Options) -> RunContext | None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the controller prepared the run, if there is one
        run_dir = workerinput.get("gpucert_run_dir")
        return RunContext(Evaluation.from_run(Path(run_dir))) if run_dir is not None else None
    if options.run_dir is not None:
        return _in_place(options)
    if options.spec is None:
        return None
    from gpucert.plan import run as runner

    spec, baselines = load_inputs(options.spec)  # the user's files: what to plan and measure
    if not options.runs_tests:
        # listing or showing: read recorded evidence in place, or parametrize nothing; never plan or measure. What
        # is listed is what re-evaluating it under this spec would run: no run folder holds that spec yet
        if options.evidence is None:
            return None
        recorded = recorded_run(options.evidence)
        recorded.check()
        return RunContext(Evaluation(recorded, spec, baselines), readonly=True)
    return RunContext(
        Evaluation.from_run(runner.prepare(spec, options.reports, _mode(options), evidence=options.evidence))
    )


def refuse_blocked(config: pytest.Config) -> None:
    """A usage error when `-p no:` blocks one of gpucert's own plugins, or pytest-metadata while pytest-html would
    write report.html: pytest-html 4.2.0 reads pytest-metadata's stash key at session start (pytest_html/
    basereport.py:77, `_generate_environment`) and ends the session with an INTERNALERROR before any verdict."""
    pm = config.pluginmanager
    blocked = [name for name in OWN_PLUGINS if pm.is_blocked(name)]
    if blocked:
        raise pytest.UsageError(
            f"-p no:{blocked[0]} blocks a plugin of gpucert's own: without it the run has no verdict (or a verdict "
            "JUnit and report.html do not say); remove -p no:" + ", -p no:".join(blocked)
        )
    if pm.is_blocked("metadata") and pm.hasplugin("html"):
        raise pytest.UsageError(
            "-p no:metadata: pytest-html needs pytest-metadata to write report.html; remove -p no:metadata, or add "
            "-p no:html as well to run without report.html"
        )


def open_run(config: pytest.Config, options: Options) -> RunContext | None:
    """The run this session evaluates, planned and measured first when it runs tests and has no evidence; None
    when the session has no spec, or only lists and has nothing recorded to list. Bad input is pytest's usage
    error; a run that cannot complete ends the session with gpucert's exit code."""
    try:
        return _open(config, options)
    except GpucertError as exc:
        if exc.exit_code == 2:  # the input is wrong: a usage error, as pytest says it
            raise pytest.UsageError(str(exc)) from None
        pytest.exit(f"gpucert: the run could not complete: {exc}", returncode=exc.exit_code)
    except OSError as exc:  # a path the system refuses (a name too long, a path under a file): the input is wrong
        from gpucert.cli.args import os_error

        raise pytest.UsageError(os_error(exc)) from None


def start(config: pytest.Config, ctx: RunContext, options: Options) -> None:
    """Keep the run in the stash; in the controller of a session that runs tests, register what collects the
    outcomes and writes the reports, and point pytest-html and JUnit into the run folder."""
    config.stash[context_key] = ctx
    if hasattr(config, "workerinput") or ctx.readonly:
        return
    passed = junit.PassedSummary(config)
    config.pluginmanager.register(passed, "gpucert-junit-passed")
    config.pluginmanager.register(WaivedCases(config), "gpucert-junit-waived")
    # registered after PassedSummary: of two tryfirst pytest_sessionfinish, pluggy calls the later registered one
    # first, so the controller counts the carried nodes' passed checks before PassedSummary writes its summaries
    config.pluginmanager.register(Controller(ctx, passed), "gpucert-controller")
    config.pluginmanager.register(VerdictWriter(ctx), "gpucert-verdict")
    opt = config.option
    if getattr(opt, "htmlpath", "missing") is None:
        opt.htmlpath = str(ctx.folder.report_path)
        opt.self_contained_html = True
    junit.default_path(config, ctx.folder)
    if config.pluginmanager.hasplugin("html"):
        from gpucert.report.html import HtmlSummary

        config.pluginmanager.register(HtmlSummary(ctx, options.signer), "gpucert-html")


# ---- the controller, and the end of the session --------------------------------------------------------------


def _stopped(session: pytest.Session, exitstatus: int) -> str | None:
    """Why the session ended before every selected item ran, if it did."""
    if session.shouldstop or session.shouldfail:
        return str(session.shouldstop or session.shouldfail)
    return "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else None


def _summarised(ev: Evaluation, pool: str) -> bool:
    """Whether the verdict sums up this pool: not in the static gate (no nodes), and on recertification only the
    node's own pool."""
    if ev.inventory.target == "static":
        return False
    return ev.recertification is None or bool(ev.pools.members(pool))


def _beside(ctx: RunContext) -> dict[str, Any]:
    """What the verdict says beside the checks: the fleet against the SKU figure (informational) and the peer
    comparisons too few peers ruled out, so that a pass is never silent about what it could not compare; whether
    the cluster was checked before the measure (optional, additive to v3); the recertification."""
    ev = ctx.evaluation
    beside: dict[str, Any] = {"fleetAgainstSku": ev.peers.against_sku(), "undecided": ev.peers.undecided()}
    beside["preflight"] = ctx.folder.read_preflight()
    recert = read_recertify_record(ctx.folder)
    if recert is not None:
        beside["recertify"] = {
            "node": recert.node,
            "handover": recert.handover,
            "fleetPeers": len(recert.fleet_peers),
            "summary": details.recertify_summary(ev),
        }
    return beside


def _verdict(ctx: RunContext, stopped: str | None) -> Verdict:
    """The run's verdict, from the outcomes the controller collected and the plan."""
    ev = ctx.evaluation
    return build_verdict(
        run=ctx.folder.id,
        kind=kind_of(ctx.folder.mode),  # every folder a session writes a verdict for was prepared with its mode
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
        retest=ctx.retest,
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


def _write_records(ctx: RunContext, config: pytest.Config, verdict: Verdict) -> None:
    """What the run folder keeps beside the verdict: the gate's summary, run.json, figures.json (a measured run's),
    the Allure results."""
    ev = ctx.evaluation
    if ev.inventory.target == "static":  # what a CI job posts on the pull request
        ctx.folder.write_summary(summary_markdown(verdict, ctx.folder.read_gate()))
    finished = time.time()
    ctx.folder.write_run_info(
        spec=ctx.spec.metadata.name, target=ev.inventory.target, started=ctx.started, finished=finished
    )
    if ev.measured:  # what a re-test of this run reads in place of a carried node's evidence (evaluate/held.py)
        with suppress(GpucertError, ValueError):  # none where it cannot be made: a re-test reads every document
            ctx.folder.write_figures(figures_document(ev))
    dirs = [ctx.folder.allure_dir]
    extra = alluredir.results_dir(config)
    if extra:
        dirs.append(extra)
    # the trend so far: the spec's history kept from its latest earlier report (report/allure_history.py)
    history, notes = kept_history(ctx.folder.path.parent, ctx.spec.metadata.name, ctx.folder.id)
    missing = not_run(ev.plan.required, ctx.outcomes, ctx.selected)
    for results in dirs:
        write_allure(
            results,
            ctx.outcomes,
            ctx.evidence_of,
            verdict=verdict,
            started_ms=int(ctx.started * 1000),
            stopped_ms=int(finished * 1000),
            missing=missing,
        )
        carry_in(results, history, replace=False)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for note in notes:
        if reporter is not None:
            reporter.write_line(f"Allure trend: {note}")


class Controller:
    """Collects every check's outcome in the controller process; at the end writes verdict.json, run.json and
    the Allure results, tells JUnit and the terminal the same result, and makes the exit status say it too."""

    def __init__(self, ctx: RunContext, passed: junit.PassedSummary | None = None) -> None:
        self.ctx = ctx
        self.passed = passed

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "gpucert", None)
        if data is None:
            return
        start, stop = float(data["start"]), float(data["stop"])
        decided: list[tuple[CheckKey, CheckStatus]] = []
        for check in data["checks"]:  # one, or each GPU's of a `gpus` item
            key = CheckKey.from_json(check["key"])
            outcome = Outcome(Finding.from_json(check["finding"]), start, stop)
            before = self.ctx.outcomes.get(key)
            if before is None or RANK[outcome.finding.status] >= RANK[before.finding.status]:
                self.ctx.outcomes[key] = outcome
            if "evidence" in check:
                self.ctx.evidence_of[key] = check["evidence"]
            decided.append((key, outcome.finding.status))
        if self.passed is not None:
            self.passed.passed(report, decided)

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
        ctx = self.ctx
        decide_carried(ctx)
        if ctx.kept is not None:
            session.config.stash[KEPT] = ctx.kept.said()
        verdict = _verdict(ctx, _stopped(session, exitstatus))
        ctx.verdict = verdict  # written last (VerdictWriter), after every report: a run cut short has no verdict
        _write_records(ctx, session.config, verdict)
        carried_cases(session.config, ctx, self.passed)
        junit.tell_junit(session.config, verdict)
        if session.config.pluginmanager.hasplugin("html"):
            from gpucert.report.html import count_checks_in_footer, measurement_times
            from gpucert.report.html_top import measurement_window

            window = measurement_window(measurement_times(ctx.evaluation))
            count_checks_in_footer(session.config, verdict, window)
        if not verdict.passed and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.ctx.verdict is not None:
            terminal_summary(terminalreporter, self.ctx.verdict, self.ctx.left_out, self.ctx.folder.verdict_path)


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
