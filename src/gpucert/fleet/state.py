"""What gpucert knows of each node's certification now, for the metrics exporter and the recertification scheduler.

Two sources, the newer of which speaks for a node: the newest run folder that judged it (a certification judges
every node of its inventory, a recertification one), and, where a cluster is at hand, the gpucert.io/* marks that
recertification left on the node (they also tell of runs whose folders are elsewhere). A node's pool is decided in
one place, `pool_of`.

Reads run folders through RunFolder (each folder once: they do not change after their verdict is written) and
takes the nodes as a NodeControl reported them; it judges no hardware. Fail closed: a verdict that cannot be read,
or marks that contradict each other, make a node's result `unknown`, which is never certified.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucert.errors import EvidenceError
from gpucert.fleet.recertify import ANNOTATION_FAILING, ANNOTATION_LAST, ANNOTATION_LAST_RUN, LABEL_CERTIFIED
from gpucert.measure.targets.base import NodeState
from gpucert.plan.layout import run_id_time
from gpucert.plan.records import read_run_info
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict_model import read_verdict
from gpucert.spec.cluster import ClusterSpec
from gpucert.spec.names import NameError_, check_node_name

__all__ = [
    "DEFAULT_POOL",
    "FailedCheck",
    "Judgement",
    "NodeStatus",
    "RunIndex",
    "RunRecord",
    "node_statuses",
    "parse_time",
    "pool_of",
]

DEFAULT_POOL = "default"
UNKNOWN = "unknown"  # a judgement that could not be read: never certified
RESULTS = ("pass", "fail", "incomplete")
BAD = ("fail", "error")


NO_POOL = "none"  # a node no pool of the spec selects, or several do (pool.membership fails for it)


def pool_of(spec: ClusterSpec | None, node: str, labels: Mapping[str, str], recorded: str | None = None) -> str:
    """The pool a node belongs to: by its labels (as the cluster has them now) and the spec's pools, else as its
    latest run's verdict recorded it, else the spec's only pool. The one place that says."""
    if spec is not None and labels:
        pools = [p.name for p in spec.pools if p.selects(dict(labels))]
        return pools[0] if len(pools) == 1 else NO_POOL
    if recorded is not None:
        return recorded
    if spec is not None and len(spec.pools) == 1:
        return spec.pools[0].name
    return DEFAULT_POOL


def parse_time(text: object) -> datetime | None:
    """A time as gpucert writes it (`2026-12-02T18:03:00Z`, or any ISO 8601 with a zone); None when it is not."""
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class FailedCheck:
    """A check that failed or errored: where (node None for the fleet, gpu None for a node-level check)."""

    check: str
    node: str | None
    gpu: int | None


@dataclass(frozen=True, slots=True)
class Judgement:
    """What one run said of one node, and when the node was measured for it."""

    result: str  # pass | fail | incomplete | unknown
    at: datetime
    run: str | None
    failing: tuple[FailedCheck, ...] = ()
    folder: RunFolder | None = None  # None when only the node's marks tell of the run
    pool: str | None = None  # the node's pool as the run's verdict says (None: not said, or in no pool)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run folder's verdict as far as certification state goes."""

    id: str
    folder: RunFolder
    spec: str | None
    result: str  # pass | fail | incomplete | unknown (the verdict could not be read)
    when: datetime  # when the run finished (ordering)
    nodes: Mapping[str, Judgement]
    fleet_failing: tuple[FailedCheck, ...] = ()
    problem: str | None = None  # why the verdict could not be read
    recertification: bool = False  # one node's recertification (not the fleet's certification)


def _when(folder: RunFolder) -> tuple[datetime, str | None]:
    """When the run finished, as its run.json says, and why that cannot be read (None when it can). A run whose
    run.json is corrupt, missing, a folder or a FIFO is unreadable, never a certification: it is ordered by the time
    in its id (or its verdict's mtime) only so that it stands where it ran."""
    problem = None
    try:
        finished = parse_time(read_run_info(folder).finished)
        if not folder.run_info_path.exists():
            problem = f"{folder.run_info_path}: missing, so when the run ran is unknown"
        elif finished is None:
            problem = f"{folder.run_info_path}: no finished time (ISO 8601), so when the run ran is unknown"
    except EvidenceError as exc:
        finished, problem = None, str(exc)
    if finished is not None:
        return finished, None
    return run_id_time(folder.id) or datetime.fromtimestamp(folder.verdict_path.lstat().st_mtime, UTC), problem


def _unreadable(folder: RunFolder, when: datetime, problem: str) -> RunRecord:
    """A run whose verdict cannot be read: each node it held (by its inventory, or the node a recertification names
    in its id) is `unknown` as of that run."""
    try:
        names = list(folder.read_inventory().names)
    except (EvidenceError, OSError, ValueError):
        _, _, node = folder.id.partition("-recertify-")
        try:
            names = [check_node_name(node)] if node else []
        except NameError_:
            names = []
    judged = {n: Judgement(UNKNOWN, when, folder.id, (), folder) for n in names}
    recert = folder.recertify_path.exists()
    return RunRecord(folder.id, folder, folder.spec_name(), UNKNOWN, when, judged, (), problem, recert)


def read_run(folder: RunFolder) -> RunRecord | None:
    """The run's certification record; None for a folder that is no certification (nothing measured: a configure
    or static run) or not yet judged (no verdict.json: a run in progress, or one stopped before its evaluation)."""
    if not folder.measured or not os.path.lexists(folder.verdict_path):
        return None
    when, undated = _when(folder)
    if undated is not None:
        return _unreadable(folder, when, undated)
    if not folder.verdict_path.is_file():  # a folder or a FIFO where the verdict should be: unreadable, not absent
        return _unreadable(folder, when, f"{folder.verdict_path}: not a regular file (a folder, a FIFO or a device)")
    try:
        v = read_verdict(folder)
    except EvidenceError as exc:
        return _unreadable(folder, when, str(exc))
    failed = [FailedCheck(f.check, f.node, f.gpu) for f in v.failures()]
    judged = {}
    for node, n in v.nodes.items():
        result = "pass" if n.passed_result else n.result
        at = parse_time(n.measured) or when
        failing = tuple(f for f in failed if f.node == node)
        judged[node] = Judgement(result, at, folder.id, failing, folder, n.pool)
    fleet = tuple(f for f in failed if f.node is None)
    recert = folder.recertify_path.exists()
    return RunRecord(folder.id, folder, v.spec, v.result, when, judged, fleet, None, recert)


def _stat_key(path: Path) -> tuple[int, int]:
    try:
        st = path.lstat()
    except OSError:
        return (0, 0)
    return st.st_mtime_ns, st.st_size


@dataclass
class RunIndex:
    """Every run folder under `reports`, each read once (again only when its verdict.json or run.json changes)."""

    reports: Path
    _cache: dict[str, tuple[tuple[int, ...], RunRecord | None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def runs(self, spec: str | None = None) -> list[RunRecord]:
        """The certification runs (of spec `spec`, when given), newest first."""
        with self._lock:
            seen: dict[str, tuple[tuple[int, ...], RunRecord | None]] = {}
            for path in self.reports.iterdir() if self.reports.is_dir() else []:
                if path.name.startswith(".") or not path.is_dir() or path.is_symlink():
                    continue
                folder = RunFolder(path)
                key = _stat_key(folder.verdict_path) + _stat_key(folder.run_info_path)
                cached = self._cache.get(path.name)
                seen[path.name] = cached if cached and cached[0] == key else (key, read_run(folder))
            self._cache = seen
        records = [r for _, r in seen.values() if r is not None and (spec is None or r.spec == spec)]
        return sorted(records, key=lambda r: (r.when, r.id), reverse=True)

    def specs(self) -> set[str]:
        return {r.spec for r in self.runs() if r.spec is not None}


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One node's certification as gpucert knows it now."""

    node: str
    pool: str
    latest: Judgement | None  # the newest judgement (None: never certified)
    certified_at: datetime | None  # when the node was last measured for a passing certification
    state: NodeState | None = None  # the node in the cluster, when one was read

    @property
    def certified(self) -> bool:
        return self.latest is not None and self.latest.result == "pass"


def _json(node: str, key: str, text: str | None) -> dict[str, Any]:
    """A JSON annotation recertification wrote on `node` ({} where there is none); a damaged one is an error naming
    the node, the annotation and the fix, never taken for a node never certified (fail closed)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        why = f"not JSON ({exc})"
    else:
        if isinstance(data, dict):
            return data
        why = f"not a JSON object ({type(data).__name__})"
    raise EvidenceError(
        f"node {node}: annotation {key} is {why}, not what gpucert wrote: recertify the node, or remove the "
        f"annotation (kubectl annotate node {node} {key}-)"
    )


def _from_marks(state: NodeState) -> tuple[Judgement | None, datetime | None]:
    """What recertification wrote on the node: its latest attempt, and its last pass. The label and the latest
    attempt's result must agree, or the node's result is `unknown`."""
    attempt = _json(state.name, ANNOTATION_LAST_RUN, state.annotations.get(ANNOTATION_LAST_RUN))
    at = parse_time(attempt.get("time"))
    judged = None
    if at is not None:
        result = str(attempt["result"]) if attempt.get("result") in RESULTS else UNKNOWN
        label = state.labels.get(LABEL_CERTIFIED)
        if label is not None and (label == "true") != (result == "pass"):
            result = UNKNOWN
        checks = [c for c in (state.annotations.get(ANNOTATION_FAILING) or "").split(",") if c]
        run = attempt.get("run") if isinstance(attempt.get("run"), str) else None
        judged = Judgement(result, at, run, tuple(FailedCheck(c, state.name, None) for c in checks))
    return judged, parse_time(_json(state.name, ANNOTATION_LAST, state.annotations.get(ANNOTATION_LAST)).get("time"))


def node_statuses(
    runs: list[RunRecord], cluster: list[NodeState] | None, spec: ClusterSpec | None = None
) -> list[NodeStatus]:
    """Each node's status from `runs` (newest first) and, when given, the cluster's nodes: then only those nodes
    (a node gone from the cluster is no longer of the fleet), else every node any run judged."""
    by_node: dict[str, list[Judgement]] = {}
    for r in runs:
        for node, j in r.nodes.items():
            by_node.setdefault(node, []).append(j)
    states = {s.name: s for s in cluster} if cluster is not None else {}
    names = list(states) if cluster is not None else sorted(by_node)
    out = []
    for name in names:
        judged = by_node.get(name, [])
        latest = judged[0] if judged else None
        passed = [j.at for j in judged if j.result == "pass"]
        state = states.get(name)
        if state is not None:
            marked, last_pass = _from_marks(state)
            elsewhere = marked is not None and marked.run not in {j.run for j in judged}  # its folder is not here
            if marked is not None and elsewhere and (latest is None or marked.at > latest.at):
                latest = marked
            if last_pass is not None:
                passed.append(last_pass)
        recorded = next((j.pool for j in judged if j.pool is not None), None)
        pool = pool_of(spec, name, state.labels if state is not None else {}, recorded)
        out.append(NodeStatus(name, pool, latest, max(passed) if passed else None, state))
    return out
