"""pytest-html additions: the run's summary (result, signer, per-node verdict and stack table, plots) and compact
rows at fleet scale. Reads the run folder through the Evaluation, after every check has run."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from html import escape
from itertools import repeat
from typing import TYPE_CHECKING, Any, Protocol

from gpucert.evaluate.rules.fabric_checks import multinode_figure
from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.stats import median
from gpucert.plan.checks import FABRIC_METRICS, NODE_METRICS, CheckStatus
from gpucert.plan.domains import ring_prefix
from gpucert.report import details, plots
from gpucert.report.fabric_html import fabric_section
from gpucert.report.html_top import LAYOUT, failures_table, signature_hint
from gpucert.report.trend import node_trend
from gpucert.report.verdict import headline, incomplete_parts
from gpucert.report.verdict_model import Group, NodeSummary, PoolSummary, Verdict
from gpucert.spec.baseline import GpuBaseline, MetricBaseline
from gpucert.spec.kubernetes import topology_key

if TYPE_CHECKING:
    from gpucert.evaluate.evaluation import Evaluation
    from gpucert.measure.evidence import FabricEvidence
    from gpucert.plan.checks import CheckKey
    from gpucert.plan.runfolder import RunFolder
    from gpucert.report.verdict import Outcome
    from gpucert.spec.cluster import ClusterSpec


class RunView(Protocol):
    """What the HTML summary reads of a run (gpucert.pytest.context's RunContext is one)."""

    spec: ClusterSpec
    folder: RunFolder
    collected: int
    verdict: Verdict | None

    @property
    def outcomes(self) -> Mapping[CheckKey, Outcome]: ...

    @property
    def evaluation(self) -> Evaluation: ...


__all__ = ["PASSED_ROWS_LIMIT", "HtmlSummary", "count_checks_in_footer", "measurement_times", "natural_key"]

PASSED_ROWS_LIMIT = 2000  # above this many items, passed rows are counted in the summary, not listed one by one
MAX_HEATMAPS = 4
MAX_NCCL_LINES = 8
STACK_COLUMNS = ("kubelet", "runtime")
RESULT_COLOURS = {"pass": "#27ae60", "fail": "#c0392b", "incomplete": "#b9770e", "waived": "#8e44ad"}


def natural_key(name: str) -> list[int | str]:
    """Sort key that orders gpu-node-2 before gpu-node-10 (numbers by value, the rest as text)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class HtmlSummary:
    """A pytest plugin object, registered next to pytest-html by gpucert's plugin."""

    def __init__(self, ctx: RunView, signer: str | None) -> None:
        self.ctx = ctx
        self.signer = signer

    def _many(self) -> bool:
        return self.ctx.collected > PASSED_ROWS_LIMIT

    def pytest_html_report_title(self, report: Any) -> None:
        report.title = f"gpucert: {self.ctx.spec.metadata.name}"

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells.insert(1, '<th class="sortable" data-column-type="check">Check</th>')

    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        if report.passed and self._many():
            del cells[:]
            return
        checks = getattr(report, "gpucert", {}).get("checks") or [{}]  # a `gpus` item's: one check on each GPU
        check = checks[0].get("finding", {}).get("check", "")
        cells.insert(1, f'<td class="col-check">{escape(check)}</td>')

    def pytest_html_results_table_html(self, report: Any, data: list[str]) -> None:
        # a skip's longrepr is (path, line, reason): show the reason, not the tuple
        if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            data[:] = [escape(str(report.longrepr[2]).removeprefix("Skipped: ")) + "\n"]

    def _serial(self, node: str, gpu: int) -> str | None:
        e = self.ctx.evaluation.usable(node) if self.ctx.evaluation.measured else None
        return next((g.serial for g in e.gpus if g.index == gpu), None) if e is not None else None

    def _node_table(self) -> str:
        """One row per node, grouped by pool (a header row each: what the pool expects and its result)."""
        ev = self.ctx.evaluation
        verdict = self.ctx.verdict
        if verdict is None:
            return ""
        components = ev.components()
        stack = ev.stack.nodes
        head = "".join(f"<th>{escape(c)}</th>" for c in (*components, *STACK_COLUMNS))
        width = 10 + len(components) + len(STACK_COLUMNS)
        fleet = verdict.fleet
        # the fleet's own checks get a row only when they did not pass: a green "(fleet) PASS" over failing nodes
        # reads as the fleet passing
        rows = [self._row("(fleet)", fleet, None, components, "")] if fleet and fleet.result != "pass" else []
        by_pool: dict[str | None, list[tuple[str, NodeSummary]]] = defaultdict(list)
        for node, s in sorted(verdict.nodes.items(), key=lambda kv: natural_key(kv[0])):
            by_pool[s.pool].append((node, s))
        pools = verdict.pools
        several = len(pools) > 1 or None in by_pool
        for pool in [*pools, *(p for p in by_pool if p not in pools)]:
            members = by_pool.get(pool, [])
            if several:
                rows.append(self._pool_row(pool, pools.get(pool or ""), len(members), width))
            rows += [self._row(node, s, stack.get(node), components, s.origin) for node, s in members]
        if not rows:  # a static gate reads no node: no empty table
            return ""
        return (
            "<table id='gpucert-nodes' border='1' cellpadding='4' style='border-collapse:collapse'>"
            "<thead><tr><th>node</th><th>result</th><th>passed</th><th>failed</th><th>errors</th><th>skipped</th>"
            "<th>waived</th><th>failing checks</th><th>waived checks</th><th>evidence</th>"
            f"{head}</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )

    @staticmethod
    def _pool_row(pool: str | None, info: PoolSummary | None, found: int, width: int) -> str:
        if pool is None or info is None:
            text = f"in no pool (or in several): {found} node{'s' if found != 1 else ''}, held to pool.membership"
            colour = RESULT_COLOURS["fail"]
        else:
            text = (
                f"pool {pool}: {info.product}, {info.gpus_per_node} GPUs per node, baseline "
                f"{info.baseline}; {found} of {info.nodes} nodes; {info.result.upper()}"
            )
            colour = RESULT_COLOURS.get(info.result, "#c0392b")
        return (
            f"<tr class='gpucert-pool' data-pool='{escape(pool or '')}'><th colspan='{width}' "
            f"style='text-align:left;background:#eef;color:{colour}'>{escape(text)}</th></tr>"
        )

    @staticmethod
    def _row(node: str, s: Group, ns: Any, components: list[str], origin: str) -> str:
        versions = [ns.components[c].version or "?" if ns and c in ns.components else "-" for c in components]
        versions += [ns.kubelet_version or "?", ns.container_runtime or "?"] if ns else ["-", "-"]
        colour = RESULT_COLOURS.get(s.result, "#c0392b")
        return (
            f"<tr><td>{escape(node)}</td><td style='color:{colour};font-weight:bold'>{s.result.upper()}</td>"
            f"<td>{s.passed}</td><td>{s.failed}</td><td>{s.errors}</td><td>{s.skipped}</td>"
            f"<td>{s.waived}</td><td>{escape(', '.join(s.failing))}</td>"
            f"<td>{escape(', '.join(s.waived_checks))}</td><td>{escape(origin)}</td>"
            + "".join(f"<td>{escape(v)}</td>" for v in versions)
            + "</tr>"
        )

    def _plots(self) -> str:
        ev = self.ctx.evaluation
        if not ev.measured:
            return ""
        flagged: dict[tuple[str, str, int | None], str] = {}
        passing, noted = CheckStatus.PASS, (CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.WAIVED)
        for o in self.ctx.outcomes.values():  # ~190,000 at 1,024 x 8, nearly all passed: that asked first
            f = o.finding
            if f.status is not passing and f.status in noted and f.node is not None:
                metric = f.check.removeprefix("straggler.").removeprefix("stability.")
                kind = (
                    "waived"
                    if f.status is CheckStatus.WAIVED
                    else "unstable"
                    if f.check.startswith("stability.")
                    else "straggler"
                    if f.check.startswith("straggler.")
                    else "fail"
                )
                flagged[(metric, f.node, f.gpu)] = kind
        out = []
        several = len(self.ctx.spec.pools) > 1
        for pool in self.ctx.spec.pools:  # each pool against its own baseline
            nodes = sorted(ev.pools.members(pool.name), key=natural_key)
            if nodes:
                out += self._pool_plots(
                    ev.baselines[pool.name], nodes, flagged, f" (pool {pool.name})" if several else ""
                )
        rings: list[tuple[str, str | None, FabricEvidence]] = [(name, None, f) for name, f in ev.fabrics.items()]
        rings += [(name, domain, f) for (name, domain), f in ev.domain_fabrics.items()]
        for name, domain, fabric in rings:  # each pool's ring (or domain's), against its baseline's figure
            across = multinode_figure(ev.spec.pool(name)) or ev.baselines[name].metrics.get(
                "nccl.all_reduce.multinode"
            )  # the pool's fabric.ncclBusbw first, as the check judges it
            if across is not None and fabric.nccl is not None:
                curve = [(pt.size_bytes, median(pt.busbw)) for pt in fabric.nccl.points if pt.busbw]
                label = f"{len(fabric.nodes)} nodes x {fabric.gpus_per_node} GPUs" + {
                    "kueue": ", admitted by Kueue",
                    "indexed job": ", an Indexed Job",
                }.get(fabric.admission or "", "")
                where = ring_prefix(name if several else None, domain, topology_key(ev.spec.target)).removesuffix(": ")
                title = "NCCL all-reduce across nodes" + (f" ({where})" if where else "")
                out.append(plots.lines(title, "GB/s", [(label, curve)], across.expected))
        return "<div id='gpucert-plots' style='display:flex;flex-wrap:wrap;gap:8px'>" + "".join(out) + "</div>"

    def _pool_plots(
        self, baseline: GpuBaseline, nodes: list[str], flagged: dict[tuple[str, str, int | None], str], suffix: str
    ) -> list[str]:
        """A strip per GPU metric, the P2P heatmaps of the nodes flagged (or the first), the all-reduce curves."""
        usable = self.ctx.evaluation.usable
        gpus = {  # each node's measured GPUs, once for every strip
            node: [g.index for g in e.gpus] if (e := usable(node)) is not None and e.collected else [] for node in nodes
        }
        out = [
            self._strip(metric, b, gpus, flagged, suffix)
            for metric, b in baseline.metrics.items()
            if metric not in NODE_METRICS and metric not in FABRIC_METRICS
        ]
        p2p = baseline.metrics.get("p2p.bandwidth")
        if p2p is not None:
            bad = [n for n in nodes if any(k[0] == "p2p.bandwidth" and k[1] == n for k in flagged)]
            for node in (bad or nodes[:1])[:MAX_HEATMAPS]:
                m = details.p2p_matrix(self.ctx.evaluation, node)
                if m:
                    out.append(plots.heatmap(f"P2P copy bandwidth, {node}", p2p.unit, m, p2p.expected))
        nccl = baseline.metrics.get("nccl.all_reduce")
        if nccl is not None:
            out += self._nccl_curves(nccl.expected, nodes, flagged, suffix)
        return out

    def _strip(
        self,
        metric: str,
        b: MetricBaseline,
        nodes: Mapping[str, list[int]],
        flagged: dict[tuple[str, str, int | None], str],
        suffix: str,
    ) -> str:
        """Every GPU's figure of `metric`, grouped by node, marked by its finding. Per GPU only its figure: the
        flagged GPUs of the metric are looked up per node, and a point's label (`node/gpuN`) is written only where
        the plot shows it (every point of a strip of at most plots.LABELLED, else the flagged ones)."""
        marks: dict[str, dict[int | None, str]] = defaultdict(dict)  # node -> GPU (None: the node) -> mark
        for (m, node, gpu), kind in flagged.items():
            if m == metric:
                marks[node][gpu] = kind
        points, groups = self._points(metric, nodes, marks, every=False)
        if len(points.values) <= plots.LABELLED:  # a small strip says every point's GPU on hover, the passed too
            points, groups = self._points(metric, nodes, marks, every=True)
        title = f"{metric} per GPU{suffix}"
        return plots.strip_columns(title, b.unit, points, b.expected, b.threshold(), groups)

    def _points(
        self, metric: str, nodes: Mapping[str, list[int]], marks: Mapping[str, dict[int | None, str]], *, every: bool
    ) -> tuple[plots.Columns, list[tuple[str, int]]]:
        """Each measured GPU's believed figure of `metric` (`nodes`: each node's measured GPUs, in fleet order),
        marked, labelled `node/gpuN` where `every` or flagged; and each node's count of points. A node none of whose
        GPUs is flagged (nearly all of a fleet) at once."""
        labels: list[str] = []
        values: list[float] = []
        statuses: list[str] = []
        groups = []
        believed = self.ctx.evaluation.believed  # 8,192 GPUs a strip at 1,024 x 8
        asked = repeat(metric)
        for node, gpus in nodes.items():
            mine = marks.get(node)
            if mine is None and not every:  # RunView.sampled of a usable node measured, each GPU's
                found = [s.value for s in map(believed, asked, repeat(node, len(gpus)), gpus) if isinstance(s, Sampled)]
                values += found
                statuses += ["pass"] * len(found)
                labels += [""] * len(found)
                groups.append((node, len(found)))
                continue
            count = len(values)
            whole = "pass" if mine is None else mine.get(None, "pass")  # a node behind as a whole marks each GPU
            for gpu in gpus:
                s = believed(metric, node, gpu)
                if isinstance(s, Sampled):
                    mark = whole if mine is None else mine.get(gpu, whole)
                    labels.append(f"{node}/gpu{gpu}" if every or mark != "pass" else "")
                    values.append(s.value)
                    statuses.append(mark)
            groups.append((node, len(values) - count))
        return plots.Columns(labels, values, statuses), groups

    def _nccl_curves(
        self, expected: float, nodes: list[str], flagged: dict[tuple[str, str, int | None], str], suffix: str
    ) -> list[str]:
        """The nodes' median all-reduce curve, with the flagged nodes' own (or the first few) beside it."""
        curves = {n: details.nccl_curve(self.ctx.evaluation, n) for n in nodes}
        curves = {n: c for n, c in curves.items() if c}
        if not curves:
            return []
        by_size: dict[int, list[float]] = defaultdict(list)
        for c in curves.values():
            for size, v in c:
                by_size[size].append(v)
        median_curve = [(s, sorted(v)[len(v) // 2]) for s, v in sorted(by_size.items())]
        bad = [n for n in curves if ("nccl.all_reduce", n, None) in flagged]
        shown = [(f"median of {len(curves)} nodes", median_curve)]
        shown += [(n, curves[n]) for n in (bad or list(curves)[: MAX_NCCL_LINES - 1])[: MAX_NCCL_LINES - 1]]
        return [plots.lines(f"NCCL all-reduce bus bandwidth{suffix}", "GB/s", shown, expected)]

    def _fleet(self) -> str:
        """The fleet's (each pool's) median against its SKU figure per metric (informational: peers cannot see a
        fleet that is behind as a whole), and the comparisons too few peers ruled out."""
        verdict = self.ctx.verdict
        lines, undecided = (verdict.fleet_against_sku, verdict.undecided) if verdict else ((), ())
        if not lines and not undecided:
            return ""
        behind = " style='color:#b9770e;font-weight:bold'"
        several = len({x.pool for x in lines}) > 1  # a pool column where the lines are of several pools
        rows = "".join(
            f"<tr{behind if x.behind else ''}>"
            + (f"<td>{escape(x.pool)}</td>" if several else "")
            + f"<td>{escape(x.metric)}</td>"
            f"<td>{x.median:.4g} {escape(x.unit)}</td><td>{x.expected:.4g}</td><td>{x.deviation:+.1%}</td>"
            f"<td>{x.count}</td><td>{'behind the SKU figure as a whole' if x.behind else ''}</td></tr>"
            for x in lines
        )
        head = ("<th>pool</th>" if several else "") + "<th>metric</th><th>median</th>"
        table = (
            "<h3>The fleet against the SKU figure (informational)</h3><table id='gpucert-fleet' border='1' "
            f"cellpadding='4' style='border-collapse:collapse'><thead><tr>{head}<th>SKU figure</th>"
            f"<th>deviation</th><th>figures</th><th>note</th></tr></thead><tbody>{rows}</tbody></table>"
            if lines
            else ""
        )
        items = "".join(
            f"<li>{escape(u.comparison)} ({escape(', '.join(u.where))}): {escape(u.why)}; for "
            f"{escape(', '.join(u.metrics))}</li>"
            for u in undecided
        )
        listed = (
            f"<h3>Comparisons not made (too few peers)</h3><ul id='gpucert-undecided'>{items}</ul>" if items else ""
        )
        return table + listed

    def _headline(self) -> str:
        verdict = self.ctx.verdict
        if verdict is None:  # never say PASS before the verdict does
            return "<h2 id='gpucert-result' style='color:#b9770e'>Certification INCOMPLETE: no verdict</h2>"
        c, s = verdict.coverage, verdict.summary
        line = (
            f"{s.checks} checks decided of {c.required} required: {s.passed} passed, {s.failed} failed, "
            f"{s.errors} errors, {s.skipped} skipped because a check they depend on failed"
        )
        if s.waived:
            line += f", {s.waived} waived (failed, and accepted by a waiver in force: see Expected failures)"
        retest = verdict.retest
        if retest:
            line += (
                f". Re-test of {retest.source}: {len(retest.measured)} nodes measured now "
                f"({', '.join(sorted(retest.measured, key=natural_key))}), "
                f"{len(retest.carried)} carried over with their signed evidence"
            )
            if retest.absent:
                line += f"; not in the fleet now, so not re-tested: {', '.join(retest.absent)}"
        if not c.complete:
            line += f". INCOMPLETE: of the required checks, {', '.join(incomplete_parts(c))}"
        return (
            f"<h2 id='gpucert-result' style='color:{RESULT_COLOURS.get(verdict.result, '#c0392b')}'>"
            f"{escape(headline(verdict))}</h2><p id='gpucert-coverage'>{escape(line)}</p>"
        )

    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        note = ""
        if self._many():
            note = (
                f"<p>{self.ctx.collected} checks: passed checks are counted in the table below and not listed "
                "one by one; every failure keeps its full detail in the results table.</p>"
            )
        target = self.ctx.evaluation.inventory.target
        banner = (
            "<p style='color:#b9770e;font-weight:bold'>Target: SIMULATED fleet, not real hardware.</p>"
            if target == "simulated"
            else f"<p>Target: {escape(target)}</p>"
        )
        recert = details.recertify_summary(self.ctx.evaluation)
        if recert:
            banner += f"<p id='gpucert-recertify'><b>{escape(recert)}</b></p>"
        failures = failures_table(self.ctx.verdict, self._serial, natural_key) if self.ctx.verdict else ""
        signature = signature_hint(str(self.ctx.folder.path), self.signer)
        prefix.append(
            f"{LAYOUT}{self._headline()}{failures}<p>run <code>{escape(self.ctx.folder.id)}</code>, spec "
            f"<code>{escape(self.ctx.spec.metadata.name)}</code></p>{banner}{signature}{note}"
            f"{self._node_table()}{node_trend(self.ctx.evaluation)}{self._fleet()}{self._plots()}"
            f"{fabric_section(self.ctx.evaluation, self.ctx.outcomes)}"
        )


def measurement_times(ev: Evaluation) -> list[tuple[str, str]]:
    """Each measured node's evidence start and finish time (a re-test's carried nodes with their own)."""
    if not ev.measured:
        return []
    return [(e.started, e.finished) for n in ev.inventory.names if (e := ev.usable(n)) is not None and e.collected]


def count_checks_in_footer(config: Any, verdict: Verdict, measured: str) -> None:
    """pytest-html's footer counts only the tests that ran and the time pytest took to evaluate them ("637 tests
    took 2 s") where the verdict counts every check it decided (638, one skipped for a failing cause), and the
    run's time is its measurement: make the footer say the checks, the measurement time and then pytest's own."""
    s = verdict.summary
    for plugin in config.pluginmanager.get_plugins():
        if hasattr(plugin, "_run_count") and hasattr(plugin, "_report"):
            original = plugin._run_count

            def run_count(original: Any = original) -> str:
                evaluated = str(original()).replace(" took ", " evaluated in ", 1)
                return f"{s.checks} checks ({s.skipped} skipped for a failing cause); {measured}; {evaluated}"

            plugin._run_count = run_count
