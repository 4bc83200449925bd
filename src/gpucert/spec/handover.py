"""Per-node handover baselines (`baselines/nodes/<node>.yaml`, `kind: NodeBaseline`).

`gpucert baseline record RUN_DIR` writes one per node that passed: each GPU by serial (so a swapped GPU is
noticed), and per metric the median, the spread (a robust coefficient of variation: MAD x 1.4826 / median), the
sample count and the unit, with the run id, its date and the digest of its certificate. Recertification compares
a node with its own file: a GPU may be well inside the SKU's tolerance and still be measurably slower than it was.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field

from gpucert.errors import ConfigError, EvidenceError
from gpucert.evaluate.peers import probe_of_metric
from gpucert.evaluate.rules.performance import Sampled, believable, samples_of
from gpucert.evaluate.stats import summarize
from gpucert.files import write_atomic
from gpucert.measure.evidence import NodeEvidence
from gpucert.plan.checks import NODE_METRICS
from gpucert.plan.records import read_run_info
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict import node_result
from gpucert.report.verdict_model import NodeSummary, Verdict, read_verdict
from gpucert.spec.baseline import GpuBaseline, load_baseline
from gpucert.spec.cluster import DEFAULT_POOL, load_spec
from gpucert.spec.documents import Document, load_document
from gpucert.spec.names import NameError_, check_node_name, inside

__all__ = [
    "HandoverGpu",
    "MetricRecord",
    "NodeBaseline",
    "load_node_baseline",
    "node_baseline_of",
    "record_baselines",
    "sha256_of",
]


class MetricRecord(Document):
    median: Annotated[float, Field(gt=0)]
    spread: Annotated[float, Field(ge=0)]
    n: Annotated[int, Field(ge=1)]
    unit: str


class HandoverGpu(Document):
    index: Annotated[int, Field(ge=0)]
    serial: str | None = None
    uuid: str | None = None
    metrics: dict[str, MetricRecord] = Field(default_factory=dict)


class Recorded(Document):
    run: str
    date: str
    result: Literal["pass", "waived", "fail", "incomplete"]  # the node's result in the run (waived: verdict v3)
    certificate: str | None = None  # sha256 of the run's certificate.intoto.json; None when the run was not signed
    forced: str | None = None  # why a node that failed was recorded anyway (`--force --reason`)
    # the spec (metadata.name) and SKU baseline (sha256 of the file) of the run: a recertification compares a node
    # only with a handover of the same spec and baseline
    spec: str | None = None
    baseline: str | None = None
    allow_unsigned: bool = Field(False, alias="allowUnsigned")  # recorded from an unsigned run on purpose


class NodeBaseline(Document):
    api_version: Literal["gpucert.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["NodeBaseline"]
    node: str
    sku: str
    recorded: Recorded
    gpus: list[HandoverGpu]
    node_metrics: dict[str, MetricRecord] = Field(default_factory=dict, alias="nodeMetrics")

    def gpu(self, index: int) -> HandoverGpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def load_node_baseline(path: Path) -> NodeBaseline:
    return load_document(path, NodeBaseline)


Figures = dict[str, tuple[str, float, int]]  # per metric: the unit, the SKU figure, the samples a figure needs


def _figures(folder: RunFolder, sku: GpuBaseline) -> Figures:
    """What a figure of each metric of the SKU baseline is held to, by the run's own spec (its inputs/ copy)."""
    certify = load_spec(folder.spec_copy).certify
    return {m: (b.unit, b.expected, certify.min_samples(probe_of_metric(m))) for m, b in sku.metrics.items()}


def _record(ev: NodeEvidence, metric: str, index: int | None, figures: Figures) -> MetricRecord | None:
    """The figure as the evaluation believes it (rules.performance.believable: the samples the spec asks of the
    probe, numbers, not absurd), with the spread of the samples behind it; None when there is none to believe."""
    unit, expected, least = figures[metric]
    figure = believable(ev, metric, index, expected, least)
    if not isinstance(figure, Sampled):
        return None
    spread = summarize(samples_of(ev, metric, index)).spread
    return MetricRecord(median=round(figure.value, 6), spread=round(spread, 6), n=figure.n, unit=unit)


def _node_baseline(ev: NodeEvidence, sku: str, figures: Figures, recorded: Recorded) -> NodeBaseline:
    gpus = []
    for g in ev.gpus:
        records = {m: _record(ev, m, g.index, figures) for m in figures if m not in NODE_METRICS}
        metrics = {m: r for m, r in records.items() if r is not None}
        gpus.append(HandoverGpu(index=g.index, serial=g.serial, uuid=g.uuid, metrics=metrics))
    node_records = {m: _record(ev, m, None, figures) for m in NODE_METRICS if m in figures}
    node_metrics = {m: r for m, r in node_records.items() if r is not None}
    return NodeBaseline.model_validate(
        {
            "apiVersion": "gpucert.io/v1alpha1",
            "kind": "NodeBaseline",
            "node": ev.node,
            "sku": sku,
            "recorded": recorded.model_dump(by_alias=True),
            "gpus": [g.model_dump(by_alias=True) for g in gpus],
            "nodeMetrics": {k: v.model_dump(by_alias=True) for k, v in node_metrics.items()},
        }
    )


def node_baseline_of(folder: RunFolder, node: str, recorded: Recorded) -> tuple[NodeBaseline, list[Path]]:
    """The node's handover baseline as its run's evidence gives it, with the files it comes from (the evidence and
    the SKU baseline of the node's pool). KeyError, ValueError or EvidenceError when the run cannot give it."""
    summary = read_verdict(folder).nodes.get(node)
    if summary is None:
        raise KeyError(node)
    pool = summary.pool_or(DEFAULT_POOL)  # a run before pools had one
    if pool is None:
        raise ValueError(f"{node} is in no pool of the spec (or several): it has no SKU baseline")
    baseline_path = folder.baseline_copy_for(pool)
    sku = load_baseline(baseline_path)
    ev = folder.read_evidence(node)
    if ev is None or not ev.collected:
        raise ValueError(f"{node} was not measured in this run")
    return _node_baseline(ev, sku.sku, _figures(folder, sku), recorded), [folder.evidence_path(node), baseline_path]


def sha256_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def record_baselines(
    run_dir: Path,
    out: Path,
    *,
    certificate: str | None,
    force_reason: str | None = None,
    allow_unsigned: bool = False,
) -> tuple[list[Path], list[str]]:
    """Write `out/<node>.yaml` for every node of the run that passed (and, with a reason, those that failed).

    `certificate` is the digest of the run's certificate (None when unsigned: refused unless `allow_unsigned`,
    which the files then say). Returns the files written and the nodes refused (with why).
    """
    folder = RunFolder(run_dir)
    if not folder.verdict_path.exists():
        raise EvidenceError("no verdict.json: record handover baselines from a completed certification", path=run_dir)
    if certificate is None and not allow_unsigned:
        raise ConfigError(
            "this run is not signed: a handover baseline is what the node is held to later, so record it from a "
            "signed certification (`gpucert sign RUN --key KEY` first), or pass --allow-unsigned to record it anyway "
            "(the files will say so)",
            path=run_dir,
        )
    verdict = read_verdict(folder)
    if not folder.baseline_copies():
        raise EvidenceError("no inputs/baseline.yaml: not a run folder gpucert certify wrote", path=run_dir)
    date = read_run_info(folder).finished or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    recording = _Recording(folder, verdict, out, date, certificate, force_reason)
    written: list[Path] = []
    refused: list[str] = []
    out.mkdir(parents=True, exist_ok=True)
    for node, summary in sorted(verdict.nodes.items()):
        if node == "(fleet)":
            continue
        got = recording.record(node, summary)
        if isinstance(got, Path):
            written.append(got)
        else:
            refused.append(got)
    if not written and not refused:
        raise ConfigError("the run's verdict lists no nodes", path=folder.verdict_path, key="nodes")
    return written, refused


@dataclass(frozen=True, slots=True)
class _Recording:
    """One `gpucert baseline record`: the run's verdict, where the files go, and what each file says of the run."""

    folder: RunFolder
    verdict: Verdict
    out: Path
    date: str
    certificate: str | None
    force_reason: str | None

    def record(self, node: str, summary: NodeSummary) -> Path | str:
        """The node's file, written; or why it was refused."""
        try:
            check_node_name(node)
            target = inside(self.out, f"{node}.yaml")
        except NameError_ as exc:
            return f"{node!r}: {exc}"
        passed = summary.passed_result and self.verdict.result != "incomplete"
        why = self._not_recordable(node, summary, passed)
        if why is not None:
            return why
        pool = summary.pool_or(DEFAULT_POOL)  # a run before pools had one
        if pool is None:
            return f"{node}: in no pool of the spec (or several): it has no SKU baseline to record against"
        baseline_path = self.folder.baseline_copy_for(pool)
        if not baseline_path.is_file():
            return f"{node}: no baseline of pool {pool} in the run's inputs/"
        sku = load_baseline(baseline_path)
        ev = self.folder.read_evidence(node)
        if ev is None:
            return f"{node}: no evidence in this run"
        if not ev.collected:
            return f"{node}: was not measured in this run"
        recorded = Recorded(
            run=self.verdict.run,
            date=self.date,
            result=node_result(summary),
            certificate=self.certificate,
            forced=None if passed else self.force_reason,
            spec=self.verdict.spec,
            baseline=sha256_of(baseline_path),
            allow_unsigned=self.certificate is None,
        )
        nb = _node_baseline(ev, sku.sku, _figures(self.folder, sku), recorded)
        return write_atomic(
            target,
            self._header(node, passed)
            + yaml.safe_dump(nb.model_dump(by_alias=True, exclude_none=False), sort_keys=False),
        )

    def _not_recordable(self, node: str, summary: NodeSummary, passed: bool) -> str | None:
        """An incomplete run, or a node that did not pass, is recorded only when forced (with a reason)."""
        if self.force_reason is not None:
            return None
        if self.verdict.result == "incomplete":
            return f"{node}: the run is incomplete (not every required check ran); record from a complete run"
        if not passed:
            what = f"failed {', '.join(summary.failing)}" if summary.failing else summary.result
            return f"{node}: {what}; pass --force --reason TEXT to record it"
        return None

    def _header(self, node: str, passed: bool) -> str:
        header = f"# handover baseline of {node}, recorded by `gpucert baseline record` from run {self.verdict.run}\n"
        if not passed:
            header += f"# FORCED although the node did not pass: {self.force_reason}\n"
        if self.certificate is None:
            header += "# recorded from an UNSIGNED run (--allow-unsigned)\n"
        return header
