"""The pytest plugin: options, plan and measure before collection, parametrization, outcomes, reports.

Run state lives in `config.stash`. Plan and measure run once, in the controller, before xdist starts its workers;
workers receive the run folder through `workerinput` and only evaluate.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpucert.baseline import GpuBaseline, load_baseline
from gpucert.checks import CheckStatus, Finding
from gpucert.errors import GpucertError
from gpucert.evaluation import Evaluation, GpuSlot
from gpucert.inventory import read_inventory
from gpucert.report.allure import write_allure
from gpucert.report.verdict import build_verdict, write_run_info, write_verdict
from gpucert.spec import ClusterSpec, load_spec

__all__ = ["CheckFailed", "RunContext", "expect", "run_context"]


class CheckFailed(AssertionError):
    """A check decided fail (or error): carries the Finding, whose message is the assertion message."""

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        super().__init__(f"[{finding.check}] {finding.message}")


def expect(finding: Finding) -> None:
    """Turn a Finding into the test's outcome: pass returns, skip skips with its reason, fail and error raise."""
    if finding.status is CheckStatus.PASS:
        return
    if finding.status is CheckStatus.SKIP:
        pytest.skip(finding.message)
    raise CheckFailed(finding)


@dataclass
class RunContext:
    spec: ClusterSpec
    baseline: GpuBaseline
    run_dir: Path
    outcomes: list[Finding] = field(default_factory=list)
    items: list[int] = field(default_factory=list)
    evidence_of: dict[Finding, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    _evaluation: Evaluation | None = None

    @property
    def evaluation(self) -> Evaluation:
        if self._evaluation is None:
            self._evaluation = Evaluation(self.run_dir, self.spec, self.baseline)
        return self._evaluation


context_key = pytest.StashKey[RunContext]()


def run_context(config: pytest.Config) -> RunContext | None:
    return config.stash.get(context_key, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpucert", "gpucert cluster certification")
    group.addoption("--spec", metavar="SPEC", help="ClusterSpec to certify: plan, measure and evaluate it")
    group.addoption(
        "--evidence",
        metavar="DIR",
        help="re-evaluate recorded evidence (a run folder or its evidence/) instead of measuring",
    )
    group.addoption(
        "--reports",
        metavar="DIR",
        default="reports",
        help="where the run folder is created (default: ./reports)",
    )
    group.addoption("--run-dir", metavar="DIR", help="evaluate this prepared run folder in place (used by the CLI)")
    group.addoption("--no-measure", action="store_true", help="plan only: configure checks need no evidence")
    group.addoption("--static", action="store_true", help="no cluster at all: the static recipe gate")
    group.addoption("--signer", metavar="FINGERPRINT", help="the key that will sign this run, shown in the report")


def _prepare(config: pytest.Config) -> RunContext | None:
    spec_opt = config.getoption("spec")
    if spec_opt is None:
        for opt in ("evidence", "run_dir"):
            if config.getoption(opt):
                raise pytest.UsageError(
                    f"--{opt.replace('_', '-')} needs --spec SPEC: the spec says what to check the evidence against"
                )
        return None
    from gpucert import run as runner
    from gpucert.targets import open_target

    try:
        spec = load_spec(spec_opt)
        baseline = load_baseline(spec.resolve(spec.certify.baseline))
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            return RunContext(spec, baseline, Path(workerinput["gpucert_run_dir"]))
        run_dir_opt = config.getoption("run_dir")
        if run_dir_opt:
            run_dir = Path(run_dir_opt)
            if not (run_dir / "inventory.json").exists():
                raise pytest.UsageError(f"--run-dir needs a prepared run folder with inventory.json; got {run_dir}")
            return RunContext(spec, baseline, run_dir)
        run_dir = runner.create_run_dir(Path(config.getoption("reports")), spec)
        evidence = config.getoption("evidence")
        if config.getoption("static"):
            runner.plan_static(run_dir)
        elif evidence:
            runner.import_evidence(Path(evidence), run_dir)
        else:
            target = open_target(spec)
            inventory = runner.plan(target, spec, run_dir)
            if not config.getoption("no_measure"):
                runner.measure(target, inventory, spec, run_dir)
        return RunContext(spec, baseline, run_dir)
    except GpucertError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    ctx = _prepare(config)
    if ctx is None:
        return
    config.stash[context_key] = ctx
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Controller(ctx), "gpucert-controller")
        opt = config.option
        if getattr(opt, "htmlpath", "missing") is None:
            opt.htmlpath = str(ctx.run_dir / "report.html")
            opt.self_contained_html = True
        if opt.xmlpath is None:
            opt.xmlpath = str(ctx.run_dir / "junit.xml")
        if config.pluginmanager.hasplugin("html"):
            from gpucert.report.html import HtmlSummary

            config.pluginmanager.register(HtmlSummary(ctx, config.getoption("signer")), "gpucert-html")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    ctx = run_context(node.config)
    if ctx is not None:
        node.workerinput["gpucert_run_dir"] = str(ctx.run_dir)


def pytest_report_header(config: pytest.Config) -> list[str]:
    ctx = run_context(config)
    return [f"gpucert: spec {ctx.spec.metadata.name}, run folder {ctx.run_dir}"] if ctx else []


# ---- parametrization over the inventory ---------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    ctx = run_context(metafunc.config)
    if ctx is None:
        return
    names = metafunc.fixturenames
    if not ({"node", "gpu"} & set(names)):
        return
    ev = ctx.evaluation
    nodes = read_inventory(ctx.run_dir / "inventory.json").names
    if "gpu" in names:
        slots = [GpuSlot(n, i) for n in nodes for i in range(ctx.spec.expect.gpus_per_node)]
        metafunc.parametrize("gpu", slots, ids=[repr(s) for s in slots])
    elif "component" in names:
        pairs = [(n, c) for n in nodes for c in ev.components()]
        metafunc.parametrize(("node", "component"), pairs, ids=[f"{n}/{c}" for n, c in pairs])
    else:
        metafunc.parametrize("node", nodes, ids=nodes)
    if "dcgm_test" in names:
        metafunc.parametrize("dcgm_test", ev.dcgm_tests())


# ---- outcomes ----------------------------------------------------------------------------------------------


def _identity(item: pytest.Item) -> tuple[str, str | None, int | None] | None:
    marker = item.get_closest_marker("check")
    if marker is None:
        return None
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    check = str(marker.args[0]).format(**params)
    gpu = params.get("gpu")
    if isinstance(gpu, GpuSlot):
        return check, gpu.node, gpu.index
    node = params.get("node")
    return check, node if isinstance(node, str) else None, None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    ident = _identity(item)
    if ident is None or run_context(item.config) is None:
        return report
    decisive = (
        report.when == "call"
        or (report.when == "setup" and not report.passed)
        or (report.when == "teardown" and report.failed)
    )
    if not decisive:
        return report
    check, node, gpu = ident
    exc = call.excinfo.value if call.excinfo is not None else None
    if isinstance(exc, CheckFailed):
        finding = exc.finding
    elif report.passed:
        finding = Finding(check, CheckStatus.PASS, node, gpu)
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        finding = Finding(check, CheckStatus.SKIP, node, gpu, reason.removeprefix("Skipped: "))
    elif isinstance(exc, AssertionError) and report.when == "call":
        finding = Finding(check, CheckStatus.FAIL, node, gpu, str(exc).splitlines()[0] if str(exc) else "failed")
    else:
        text = f"{type(exc).__name__}: {exc}" if exc is not None else str(report.longrepr).splitlines()[-1]
        finding = Finding(check, CheckStatus.ERROR, node, gpu, f"the check could not run: {text}")
    report.gpucert = finding.to_json()
    if finding.status in (CheckStatus.FAIL, CheckStatus.ERROR):
        ctx = run_context(item.config)
        assert ctx is not None
        try:
            evidence = ctx.evaluation.evidence_for(finding)
        except GpucertError as exc:
            evidence = {"unreadable": str(exc)}
        report.gpucert["evidence"] = evidence
        if item.config.pluginmanager.hasplugin("html"):
            from pytest_html import extras

            report.extras = [*getattr(report, "extras", []), extras.json(evidence, name="evidence")]
    return report


class Controller:
    """Collects every check's outcome in the controller process and writes verdict.json and Allure at the end."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "gpucert", None)
        if data is not None:
            finding = Finding.from_json(data)
            self.ctx.outcomes.append(finding)
            if "evidence" in data:
                self.ctx.evidence_of[finding] = data["evidence"]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self.ctx.items[:] = [len(session.items)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.ctx.items[:] = [len(ids)]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        ctx = self.ctx
        if exitstatus == pytest.ExitCode.INTERRUPTED or not ctx.outcomes:
            return  # no verdict from a partial evaluation; the evidence already on disk stays
        ev = ctx.evaluation
        inventory = ev.inventory
        gpus = 0
        for n in inventory.nodes:
            e = ev.evidence(n.name) if ev.measured else None
            gpus += len(e.gpus) if e is not None and e.collected else (n.gpu_count or 0)
        verdict = build_verdict(
            run=ctx.run_dir.name,
            spec=ctx.spec.metadata.name,
            target=inventory.target,
            nodes=len(inventory.nodes),
            gpus=gpus,
            outcomes=ctx.outcomes,
        )
        recert = ev.recertification
        if recert is not None:
            verdict["recertify"] = {
                "node": recert["node"],
                "handover": recert["handover"],
                "fleetPeers": len(recert.get("fleetPeers") or {}),
                "summary": ev.recertify_summary(),
            }
        write_verdict(ctx.run_dir / "verdict.json", verdict)
        write_run_info(
            ctx.run_dir,
            run=ctx.run_dir.name,
            spec=ctx.spec.metadata.name,
            target=inventory.target,
            started=ctx.started,
            finished=time.time(),
        )
        write_allure(
            ctx.run_dir / "allure-results",
            ctx.outcomes,
            ctx.evidence_of,
            run_id=ctx.run_dir.name,
            spec=ctx.spec.metadata.name,
            target=inventory.target,
            started_ms=int(ctx.started * 1000),
            stopped_ms=int(time.time() * 1000),
        )
