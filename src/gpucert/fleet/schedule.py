"""`gpucert schedule SPEC`: one round of recertification, as the in-cluster CronJob runs it (deploy/).

Each round takes the nodes whose last certification is oldest (never certified first), at most `max_nodes` of them,
and recertifies them one after the other with recertify.py (lease, cordon, measure, evaluate, mark). A node is
taken only when it runs no GPU pod (with `drain`, its pods are evicted instead), when nobody else cordoned it (a
node gpucert left cordoned after a failure is taken again, so a repaired node comes back), and when cordoning it
keeps its pool within `max_cordoned_share` of its nodes cordoned at once, counting every cordon in the pool.

The circuit breaker: when more of the round's nodes fail than `max_failure_share` of them (at least one failure is
always marked: one node is no sign of a fleet-wide fault), the round stops. The node that tripped it is left
unmarked and uncordoned, as it was: a fleet-wide failure is more likely gpucert's or the stack's fault than the
hardware's, and a person should look before more nodes leave service. The cordon limit bounds what a series of
rounds can do.

Every round writes `<reports>/.schedule/<time>.json` (what it chose, skipped and found, and the breaker), which
`gpucert metrics` exports. Rounds take turns: each holds the cluster's round lease (ROUND_LOCK) from start to end, so
two rounds started together never each count the pool's cordons before the other's are made; the one that finds it
held takes no node (exit 3). Talks to the nodes through the target's NodeControl only.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.errors import ClusterAccessError, ConfigError, GpucertError, NodeBusyError
from gpucert.files import write_json
from gpucert.fleet.recertify import LABEL_CERTIFIED, RecertifyOptions, node_control, recertify
from gpucert.fleet.schedule_record import SCHEDULE_DIR, SCHEDULE_SCHEMA, ScheduleRecord, claim_record, last_schedule
from gpucert.fleet.state import NodeStatus, RunIndex, node_statuses
from gpucert.measure.targets import open_target
from gpucert.measure.targets.base import NodeControl, NodeState
from gpucert.plan.records import read_recertify_record
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict_model import read_verdict
from gpucert.spec.cluster import ClusterSpec

__all__ = [
    "ROUND_LOCK",
    "SCHEDULE_SCHEMA",
    "ScheduleOptions",
    "ScheduleRecord",
    "claim_record",
    "cordon_limit",
    "eligibility",
    "failure_allowance",
    "last_schedule",
    "oldest_first",
    "run_schedule",
]

# one hold for every round on the cluster (a Lease in the run namespace, as recertify holds a node): rounds take
# turns, so the cordons of two rounds started together count against one max-cordoned-share budget
ROUND_LOCK = "gpucert-schedule-round"


@dataclass(frozen=True, slots=True)
class ScheduleOptions:
    reports: Path
    handover_dir: Path
    max_nodes: int
    max_cordoned_share: float = 0.25
    max_failure_share: float = 0.5
    drain: bool = False
    min_age_s: float = 0.0
    wait_timeout_s: float = 600.0
    keys: tuple[Ed25519PublicKey, ...] = ()  # what a handover baseline's run may be signed with
    without_handover: bool = False  # nodes with no handover baseline are held to the SKU and their peers only

    def check(self) -> None:
        if self.max_nodes < 1:
            raise ConfigError(f"{self.max_nodes}: recertify at least one node a round", key="--max-nodes")
        for key, share in (
            ("--max-cordoned-share", self.max_cordoned_share),
            ("--max-failure-share", self.max_failure_share),
        ):
            if not 0 <= share <= 1 or math.isnan(share):
                raise ConfigError(f"{share}: a share of the nodes is between 0 and 1 (0.25 = a quarter)", key=key)
        if self.min_age_s < 0 or self.wait_timeout_s < 0:
            key = "--min-age-hours" if self.min_age_s < 0 else "--wait-timeout"
            raise ConfigError("a duration is not negative", key=key)


def cordon_limit(pool_nodes: int, share: float) -> int:
    """How many of a pool's nodes may be cordoned at once."""
    return math.floor(pool_nodes * share + 1e-9)


def failure_allowance(chosen: int, share: float) -> int:
    """How many of a round's `chosen` nodes may fail and still be marked: more means the breaker opens."""
    return max(1, math.floor(chosen * share + 1e-9))


def oldest_first(statuses: list[NodeStatus]) -> list[NodeStatus]:
    """Never certified first, then by the time of the newest certification (of any result), then by name."""
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(statuses, key=lambda s: (s.latest is not None, s.latest.at if s.latest else epoch, s.node))


def _left_by_gpucert(state: NodeState) -> bool:
    """A cordon recertification left after a failure (the node is labelled not certified)."""
    return state.labels.get(LABEL_CERTIFIED) == "false"


def eligibility(
    status: NodeStatus, pools: dict[str, list[NodeState]], opts: ScheduleOptions, now: datetime | None
) -> str | None:
    """Why the node may not be taken now (None when it may), before its pods are looked at; `now` None leaves its
    age aside (judged once, when the round chose it)."""
    state = status.state
    if state is None:
        return "not among the target's nodes"
    if state.unschedulable and not _left_by_gpucert(state):
        return "cordoned by someone else"
    if (
        now is not None
        and status.latest is not None
        and opts.min_age_s
        and (now - status.latest.at).total_seconds() < opts.min_age_s
    ):
        age_h = (now - status.latest.at).total_seconds() / 3600
        return f"certified {age_h:.1f} h ago, less than the minimum age of {opts.min_age_s / 3600:g} h"
    if not state.unschedulable:
        pool = pools[status.pool]
        cordoned = sum(1 for n in pool if n.unschedulable)
        limit = cordon_limit(len(pool), opts.max_cordoned_share)
        if cordoned + 1 > limit:
            return (
                f"pool {status.pool} has {cordoned} of {len(pool)} nodes cordoned; one more would exceed "
                f"max cordoned share {opts.max_cordoned_share:g} ({limit} at once)"
            )
    return None


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _pools(statuses: list[NodeStatus]) -> dict[str, list[NodeState]]:
    pools: dict[str, list[NodeState]] = {}
    for s in statuses:
        if s.state is not None:
            pools.setdefault(s.pool, []).append(s.state)
    return pools


def _busy(control: NodeControl, node: str, opts: ScheduleOptions) -> str | None:
    if opts.drain:
        return None
    busy = control.gpu_pods(node)
    return f"runs GPU pods ({', '.join(busy)}) and drain is off" if busy else None


def _choose(
    statuses: list[NodeStatus], control: NodeControl, opts: ScheduleOptions, record: ScheduleRecord, now: datetime
) -> list[str]:
    """Walk the nodes oldest first and take up to max_nodes that may be recertified now."""
    pools = _pools(statuses)
    for pool, members in sorted(pools.items()):
        record.pools[pool] = {
            "nodes": len(members),
            "cordoned": sum(1 for n in members if n.unschedulable),
            "cordonLimit": cordon_limit(len(members), opts.max_cordoned_share),
        }
    chosen: list[str] = []
    for s in oldest_first(statuses):
        if len(chosen) == opts.max_nodes:
            break
        skip = eligibility(s, pools, opts, now) or _busy(control, s.node, opts)
        if skip is not None:
            record.skipped[s.node] = skip
            continue
        chosen.append(s.node)
    return chosen


def run_schedule(
    spec: ClusterSpec,
    opts: ScheduleOptions,
    *,
    evaluate: Callable[[RunFolder], int],
    sign: Callable[[RunFolder], str | None],
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[int, ScheduleRecord]:
    """One round; returns its exit code (0 every chosen node passed or none was due, 1 a node failed, 3 the breaker
    opened or a node could not complete) and its record."""
    opts.check()
    target = open_target(spec)
    control = node_control(target, spec, opts.reports)
    holder = f"gpucert schedule {spec.metadata.name} on {socket.gethostname()} pid {os.getpid()}"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(control.lock(ROUND_LOCK, holder))
        except NodeBusyError:
            raise NodeBusyError(
                f"another schedule round holds the cluster's round lease ({control.holder(ROUND_LOCK) or 'unknown'}): "
                "rounds take turns, so their cordons count against one budget; this round took no node. Run it "
                "again when that round is done (a killed round's lease lapses by itself)"
            ) from None
        return _Round(spec, opts, control, evaluate=evaluate, sign=sign, progress=progress).run()


class _Round:
    """One round under way: its record (saved after each step, so a killed round leaves what it did), and each
    chosen node looked at again, recertified and counted against the circuit breaker."""

    def __init__(
        self,
        spec: ClusterSpec,
        opts: ScheduleOptions,
        control: NodeControl,
        *,
        evaluate: Callable[[RunFolder], int],
        sign: Callable[[RunFolder], str | None],
        progress: Callable[[str], None],
    ) -> None:
        self.spec, self.opts, self.control = spec, opts, control
        self.evaluate, self.sign, self.progress = evaluate, sign, progress
        self.index = RunIndex(opts.reports)
        started = _now()
        self.record = ScheduleRecord(
            spec=spec.metadata.name,
            options={
                "maxNodes": opts.max_nodes,
                "maxCordonedShare": opts.max_cordoned_share,
                "maxFailureShare": opts.max_failure_share,
                "drain": opts.drain,
                "minAgeSeconds": opts.min_age_s,
                "waitTimeoutSeconds": opts.wait_timeout_s,
            },
            started=started,
            finished=started,
        )
        self.path = claim_record(opts.reports / SCHEDULE_DIR, started)

    def run(self) -> tuple[int, ScheduleRecord]:
        self.choose()
        for node in self.record.chosen:
            self.take(node)
        self.save()
        return self.finish()

    def save(self) -> None:
        self.record.finished = _now()
        write_json(self.path, self.record.to_json())

    def statuses(self) -> list[NodeStatus]:
        return node_statuses(self.index.runs(self.spec.metadata.name), self.control.nodes(), self.spec)

    def choose(self) -> None:
        record, opts = self.record, self.opts
        record.chosen = _choose(self.statuses(), self.control, opts, record, record.started)
        record.allowance = failure_allowance(len(record.chosen), opts.max_failure_share)
        self.save()
        for skipped, reason in record.skipped.items():
            self.progress(f"skipped {skipped}: {reason}")
        self.progress(
            f"chose {len(record.chosen)} of at most {opts.max_nodes} nodes, oldest certification first: "
            f"{', '.join(record.chosen) or 'none'}"
        )

    def take(self, node: str) -> None:
        record = self.record
        if record.breaker_open:
            record.outcomes[node] = {"outcome": "skipped", "run": None, "message": "the circuit breaker is open"}
            return
        why = self.why_not(node)
        if why is not None:
            record.outcomes[node] = {"outcome": "skipped", "run": None, "message": why}
            self.progress(f"skipped {node}: {why}")
            self.save()
            return
        if not self.recertify(node):
            return
        if record.failures > record.allowance and not record.breaker_open:
            record.breaker_open = True
            record.breaker = (
                f"circuit breaker: {record.failures} of the round's {len(record.chosen)} nodes could not be "
                f"certified, more than max failure share {self.opts.max_failure_share:g} allows ({record.allowance})"
            )
        if record.breaker_open:
            self.progress(f"{record.breaker}; no more nodes this round")
        self.save()

    def why_not(self, node: str) -> str | None:
        """The round is long: look again whether the node may still be taken (a pod may have arrived, a failed node
        may have filled its pool's cordon share)."""
        current = self.statuses()
        status = next((s for s in current if s.node == node), None)
        if status is None:
            return "no longer among the target's nodes"
        return eligibility(status, _pools(current), self.opts, None) or _busy(self.control, node, self.opts)

    def withhold(self, node: str, result: str) -> str | None:
        """The circuit breaker, asked once a node's verdict is known: a failure past the allowance is left as it was."""
        record = self.record
        if result == "pass" or record.failures + 1 <= record.allowance:
            return None
        return (
            f"circuit breaker: {record.failures + 1} of the round's {len(record.chosen)} nodes failed, more than "
            f"max failure share {self.opts.max_failure_share:g} allows ({record.allowance}); a fleet-wide failure is "
            "more likely gpucert's or the stack's fault than the hardware's: the node is left as it was"
        )

    def recertify(self, node: str) -> bool:
        """Recertify one node and record its outcome; False when another recertification holds it (skipped)."""
        opts, record = self.opts, self.record
        ropts = RecertifyOptions(
            node=node,
            reports=opts.reports,
            handover_dir=opts.handover_dir,
            drain=opts.drain,
            wait_timeout_s=opts.wait_timeout_s,
            release_when_busy=True,
            keys=opts.keys,
            without_handover=opts.without_handover,
        )
        self.progress(f"recertifying {node}")
        try:
            code, run_dir = recertify(
                self.spec, ropts, evaluate=self.evaluate, sign=self.sign, progress=self.progress, withhold=self.withhold
            )
        except NodeBusyError as exc:  # another recertification holds it: not this round's to judge
            record.outcomes[node] = {"outcome": "skipped", "run": None, "message": str(exc)}
            self.save()
            return False
        except ClusterAccessError:  # credentials or RBAC: no node of the round would fare better
            self.save()
            raise
        except (GpucertError, OSError) as exc:  # this node's (its handover baseline, a run that could not finish)
            record.failures += 1
            record.outcomes[node] = {"outcome": "error", "run": None, "message": str(exc)}
            self.progress(f"{node}: could not complete: {exc}")
            return True
        record.outcomes[node] = self.outcome(RunFolder(run_dir), code)
        return True

    def outcome(self, folder: RunFolder, code: int) -> dict[str, Any]:
        record = self.record
        result = read_verdict(folder).result
        recertified = read_recertify_record(folder)
        marks = (recertified.marks if recertified is not None else None) or {}
        if marks.get("withheld"):
            record.failures += 1
            outcome, record.breaker_open, record.breaker = "withheld", True, str(marks["withheld"])
        elif result == "pass" and code == 0:
            outcome = "passed"
        else:
            record.failures += 1
            outcome = "failed"
        return {"outcome": outcome, "run": folder.id, "message": result}

    def finish(self) -> tuple[int, ScheduleRecord]:
        record = self.record
        counts = record.counts
        self.progress(
            "round done: "
            + ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "withheld", "error", "skipped") if counts[k])
            if counts
            else "round done: no node was due"
        )
        if record.breaker_open or counts["error"]:
            return 3, record
        return (1 if counts["failed"] else 0), record
