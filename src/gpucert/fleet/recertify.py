"""`gpucert recertify NODE --spec SPEC`: one node, on demand, before it returns to service.

Hold the node (a Lease on a cluster, a lock file on the simulator), cordon it, wait until no GPU pod runs there
(or evict them with --drain), measure that node only, and evaluate it with the configure, certify and recertify
suites: against its own handover baseline, the SKU baseline, and the fleet's latest evidence. On pass it is
labelled certified, annotated and uncordoned; on fail it stays cordoned, labelled not certified, with the failing
check ids. recertify.json in the run folder records all of it and is signed with the run.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.errors import ConfigError, EvidenceError, IncompleteRunError
from gpucert.fleet.handover_binding import verify_handover
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import NodeControl, NodeTarget, Target
from gpucert.plan import run as runner
from gpucert.plan.inventory import Inventory
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict_model import Verdict, read_verdict
from gpucert.spec.cluster import DEFAULT_POOL, ClusterSpec
from gpucert.spec.handover import NodeBaseline, load_node_baseline, sha256_of
from gpucert.spec.names import NameError_, check_node_name, inside
from gpucert.spec.pools import PoolMap

__all__ = [
    "ANNOTATION_FAILING",
    "ANNOTATION_LAST",
    "ANNOTATION_LAST_RUN",
    "LABEL_CERTIFIED",
    "RecertifyOptions",
    "latest_fleet_evidence",
    "node_control",
    "recertify",
]

LABEL_CERTIFIED = "gpucert.io/certified"
ANNOTATION_LAST = "gpucert.io/last-certified"  # {time, run, certificate} of the last passing certification
ANNOTATION_LAST_RUN = "gpucert.io/last-recertification"  # {time, run, result, certificate} of the latest attempt
ANNOTATION_FAILING = "gpucert.io/failing-checks"  # the check ids that failed, comma-separated; "" after a pass
RECERTIFY_SCHEMA = "gpucert.io/recertify/v1"


@dataclass(frozen=True, slots=True)
class RecertifyOptions:
    node: str
    reports: Path
    handover_dir: Path
    cordon: bool = True
    drain: bool = False
    wait_timeout_s: float = 3600
    # a scheduled run chose the node because it was idle: if GPU pods arrive anyway, it puts the node back as it
    # was (uncordoned) and leaves it for a later run, instead of keeping it cordoned for someone to look at
    release_when_busy: bool = False
    # the keys the run a handover baseline was recorded from may be signed with (handover_binding.verify_handover)
    keys: tuple[Ed25519PublicKey, ...] = ()
    # a node with no handover baseline (a node added after handover) is held to the SKU and its peers only when asked
    # for: a baseline that is merely not found (another working folder, a mistyped --handover) never weakens a run
    without_handover: bool = False


def node_control(target: Target, spec: ClusterSpec, reports: Path) -> NodeControl:
    if isinstance(target, NodeTarget):
        return target.node_control(reports)
    raise ConfigError(
        f"recertification takes a node out of service and back: a {target.kind} target has no nodes to hold; "
        "use a kubernetes (or simulated) target",
        path=spec.path,
        key="target.kind",
    )


def _run_of(folder: RunFolder, pool: str) -> tuple[str | None, str | None]:
    """The spec name and the pool's SKU baseline digest a run folder was certified with (None where unknown)."""
    try:
        baseline = folder.baseline_copy_for(pool)
    except NameError_:
        return folder.spec_name(), None
    try:
        digest = sha256_of(baseline) if baseline.is_file() and not baseline.is_symlink() else None
    except OSError:
        digest = None
    return folder.spec_name(), digest


def _pools_in(folder: RunFolder) -> dict[str, str | None]:
    """Each node's pool as the run's verdict says (empty for a run before pools: it had one)."""
    try:
        nodes = read_verdict(folder).nodes
    except EvidenceError:
        return {}
    return {n: s.pool for n, s in nodes.items() if "pool" in s.model_fields_set}


def latest_fleet_evidence(
    reports: Path, nodes: set[str], *, spec: str, baseline: str, pool: str = DEFAULT_POOL
) -> dict[str, Path]:
    """Each node's most recent measured evidence among the run folders under `reports` (run ids sort by time),
    from runs of the same spec (metadata.name) and SKU baseline (sha256) only, and of nodes of the same pool:
    another spec's run, or another pool's node, is no peer."""
    found: dict[str, Path] = {}
    for run_dir in sorted((p for p in reports.iterdir() if p.is_dir()), reverse=True) if reports.is_dir() else []:
        folder = RunFolder(run_dir)
        if _run_of(folder, pool) != (spec, baseline):
            continue
        pools = _pools_in(folder)
        for node in sorted(nodes - found.keys()):
            if pools and pools.get(node) != pool:
                continue
            try:
                ev = folder.read_evidence(node)
            except (EvidenceError, OSError):  # an unreadable file of an old run is no peer
                continue
            if ev is not None and ev.collected and not folder.evidence_path(node).is_symlink():
                found[node] = folder.evidence_path(node)
        if len(found) == len(nodes):
            break
    return found


def _check_handover(handover: NodeBaseline, path: Path, node: str, spec: ClusterSpec, baseline: set[str]) -> None:
    """A handover baseline is compared with only if it is this node's, of this spec and a SKU baseline of the
    spec's (the node's pool's, once the cluster said which pool the node is in)."""
    if handover.node != node:
        raise ConfigError(f"this file is the handover baseline of {handover.node}, not {node}", path=path, key="node")
    r = handover.recorded
    if r.spec is None or r.baseline is None:
        raise ConfigError(
            "this handover baseline does not say which spec and SKU baseline it was recorded with; re-record it with "
            "`gpucert baseline record` from the node's certification run",
            path=path,
            key="recorded",
        )
    if r.spec != spec.metadata.name:
        raise ConfigError(
            f"recorded under spec {r.spec!r}, not {spec.metadata.name!r}: a node is held only to a handover of the "
            "spec it is recertified under",
            path=path,
            key="recorded.spec",
        )
    if r.baseline not in baseline:
        raise ConfigError(
            f"recorded against another SKU baseline ({r.baseline}) than the spec's ({', '.join(sorted(baseline))}): "
            "record a new handover baseline after a baseline change",
            path=path,
            key="recorded.baseline",
        )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def recertify(
    spec: ClusterSpec,
    opts: RecertifyOptions,
    *,
    evaluate: Callable[[RunFolder], int],
    sign: Callable[[RunFolder], str | None],
    progress: Callable[[str], None] = lambda _: None,
    withhold: Callable[[str, str], str | None] | None = None,
) -> tuple[int, Path]:
    """Recertify `opts.node`; returns the evaluation's exit code (0 pass, 1 fail) and the run folder.

    `withhold(node, result)`, asked once the verdict is known, may return a reason to leave the node unmarked (a
    scheduled run's circuit breaker): no label or annotation is written, and a node this run cordoned is uncordoned,
    as it was before; recertify.json records the reason.
    """
    node = opts.node
    target = open_target(spec)
    control = node_control(target, spec, opts.reports)
    holder = f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}"
    handover = _handover_of(spec, opts)
    with control.lock(node, holder):
        progress(f"holding {node} for recertification ({holder})")
        folder, one, record = _plan_node(target, spec, opts, handover, holder)
        was_cordoned = _out_of_service(control, opts, record, folder, progress)
        runner.measure(target, one, spec, folder)
        code = evaluate(folder)
        verdict = read_verdict(folder)
        withheld = withhold(node, verdict.result) if withhold is not None else None
        record.update(_outcome(verdict, withheld, was_cordoned))
        folder.write_recertify(record)
        digest = sign(folder)  # the certificate's digest, None when not signed
        now_held_by = control.holder(node)
        if now_held_by != holder:
            raise IncompleteRunError(
                f"lost the hold on {node} during the run (now held by {now_held_by or 'nobody'}): the node was not "
                f"marked; its verdict ({verdict.result}) is in {folder.path}"
            )
        if withheld:
            if not was_cordoned:
                control.mark(node, labels={}, annotations={}, uncordon=True)
            restored = ", uncordoned" if not was_cordoned else ""
            progress(f"{node}: {verdict.result.upper()}, left unmarked{restored}: {withheld}")
            return code, folder.path
        _mark(control, node, {"time": record["finished"], "run": folder.id, "certificate": digest}, verdict)
        passed = verdict.passed
        progress(
            f"{node}: {'certified, uncordoned' if passed else 'NOT certified, left cordoned'} "
            f"({LABEL_CERTIFIED}={'true' if passed else 'false'})"
        )
    return code, folder.path


@dataclass(frozen=True, slots=True)
class _Handover:
    """The node's handover baseline (None when it has none), where it was looked for, and each pool's SKU baseline
    digest it must have been recorded against."""

    path: Path
    baseline: NodeBaseline | None
    digests: dict[str, str]


def _handover_of(spec: ClusterSpec, opts: RecertifyOptions) -> _Handover:
    """The node's handover baseline, checked to be this node's, of this spec and one of its SKU baselines, and
    bound to a signed run (before anything is held or measured)."""
    try:
        check_node_name(opts.node)
        path = inside(opts.handover_dir, f"{opts.node}.yaml")
    except NameError_ as exc:
        raise ConfigError(str(exc), key="NODE") from None
    digests = {pool: sha256_of(p) for pool, p in spec.baseline_paths().items()}
    handover = load_node_baseline(path) if path.exists() else None
    if handover is not None:
        _check_handover(handover, path, opts.node, spec, set(digests.values()))
        verify_handover(handover, path, opts.reports, list(opts.keys))
    return _Handover(path, handover, digests)


def _plan_node(
    target: Target, spec: ClusterSpec, opts: RecertifyOptions, handover: _Handover, holder: str
) -> tuple[RunFolder, Inventory, dict[str, Any]]:
    """The run folder with the node's inventory, its handover baseline and its pool's peers' latest evidence, and
    recertify.json started; a node the cluster does not have, or one without a handover baseline, leaves no run."""
    node = opts.node
    with runner.new_run(opts.reports, spec, runner.Mode.RECERTIFY, suffix=f"recertify-{node}") as folder:
        inventory = runner.plan(target, spec, folder)
        if node not in inventory.names:  # a mistyped node name leaves no run behind
            shown = ", ".join(inventory.names[:5]) + (" ..." if len(inventory.names) > 5 else "")
            raise ConfigError(
                f"{node} is not one of the cluster's GPU nodes selected by the spec ({shown or 'none'})",
                path=spec.path,
                key="target",
            )
        if handover.baseline is None and not opts.without_handover:
            raise ConfigError(
                f"no handover baseline for {node}: pass --handover ROOT, the folder "
                "`gpucert baseline record --out` wrote (it holds <spec>/<node>.yaml), or --without-handover to "
                "recertify a node that has none against the SKU baseline and its peers only",
                path=handover.path.resolve(),
                key="--handover",
            )
        stack = folder.read_stack()
        pool = PoolMap(spec, {n: ns.labels for n, ns in stack.nodes.items()}, inventory.names).name_of(node)
        if handover.baseline is not None and pool is not None:
            _check_handover(handover.baseline, handover.path, node, spec, {handover.digests[pool]})
    one = Inventory(target=inventory.target, nodes=tuple(n for n in inventory.nodes if n.name == node))
    folder.write_inventory(one)
    if handover.baseline is not None:
        folder.copy_handover(handover.path)
    # the node's pool's peers; a node in no pool (or several) has none: pool.membership is its finding
    peers = (
        latest_fleet_evidence(
            opts.reports,
            set(inventory.names) - {node},
            spec=spec.metadata.name,
            baseline=handover.digests[pool],
            pool=pool,
        )
        if pool is not None
        else {}
    )
    for peer, path in sorted(peers.items()):
        folder.add_fleet_peer(peer, path)
    recorded = handover.baseline.recorded.model_dump(mode="json") if handover.baseline is not None else None
    record: dict[str, Any] = {
        "schema": RECERTIFY_SCHEMA,
        "node": node,
        "holder": holder,
        "started": _now(),
        "handover": {"file": str(handover.path), **recorded} if recorded is not None else None,
        "fleetPeers": {p: str(path.parent.parent.name) for p, path in sorted(peers.items())},
    }
    folder.write_recertify(record)
    return folder, one, record


def _out_of_service(
    control: NodeControl,
    opts: RecertifyOptions,
    record: dict[str, Any],
    folder: RunFolder,
    progress: Callable[[str], None],
) -> bool:
    """Cordon the node and wait until no GPU pod runs there (evicting them with --drain); returns whether it was
    cordoned before. A scheduled run that finds it busy puts it back as it was and gives up."""
    node = opts.node
    was_cordoned = True
    if opts.cordon:
        was_cordoned = control.cordon(node)
        record["cordon"] = {"wasCordoned": was_cordoned}
        folder.write_recertify(record)
        progress(f"cordoned {node}")
    try:
        record["waitedFor"] = control.wait_idle(node, drain=opts.drain, timeout_s=opts.wait_timeout_s)
    except IncompleteRunError as exc:
        if not (opts.release_when_busy and not was_cordoned):
            raise IncompleteRunError(
                f"{exc}; the node stays cordoned. Rerun with --drain to evict them, or when they are done"
            ) from None
        control.mark(node, labels={}, annotations={}, uncordon=True)
        record["cordon"]["released"] = True
        folder.write_recertify(record)
        raise IncompleteRunError(f"{exc}; it was uncordoned again, as it was before, for a later run") from None
    record["drained"] = opts.drain
    folder.write_recertify(record)
    return was_cordoned


def _outcome(verdict: Verdict, withheld: str | None, was_cordoned: bool) -> dict[str, Any]:
    """What recertify.json records of the verdict, and the marks the node gets (or why it gets none)."""
    passed = verdict.passed
    return {
        "result": verdict.result,
        "failing": sorted({f.check for f in verdict.findings}),
        "finished": _now(),
        "marks": (
            {"withheld": withheld, "uncordon": not was_cordoned}
            if withheld
            else {
                "labels": {LABEL_CERTIFIED: "true" if passed else "false"},
                "uncordon": passed,
                "annotations": [ANNOTATION_LAST_RUN, ANNOTATION_FAILING] + ([ANNOTATION_LAST] if passed else []),
            }
        ),
    }


def _mark(control: NodeControl, node: str, stamp: dict[str, Any], verdict: Verdict) -> None:
    """Label and annotate the node with the verdict; uncordon it when it passed (a failed node stays cordoned)."""
    passed = verdict.passed
    annotations = {
        ANNOTATION_LAST_RUN: json.dumps({**stamp, "result": verdict.result}, sort_keys=True),
        ANNOTATION_FAILING: ",".join(sorted({f.check for f in verdict.findings})),
    }
    if passed:
        annotations[ANNOTATION_LAST] = json.dumps(stamp, sort_keys=True)
    control.mark(
        node, labels={LABEL_CERTIFIED: "true" if passed else "false"}, annotations=annotations, uncordon=passed
    )
