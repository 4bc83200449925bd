"""The run folder's names: its run id, what a run is (its mode), and every file name in it.

```
inputs/spec.yaml, baseline.yaml, handover.yaml   what the run was judged against (signed with the run)
inputs/waivers.yaml                              the deviations accepted (the spec's acceptance.waivers)
inputs/baselines/<pool>.yaml                     each pool's SKU baseline, when the spec has several pools
inputs/gate.json, operator/, base/               the static gate's inputs: operator values and ClusterPolicies, and
                                                 each SKU baseline as it was at the base ref
summary.md                                       the static gate's result in Markdown, for a pull request
inventory.json, stack.json                       what the cluster reported (plan)
evidence/<node>.json, evidence/multinode/        what was measured, written as it arrives (measure): multinode/
                                                 <pool>/nccl.json each pool's all-reduce across its nodes (before
                                                 pools: multinode/nccl.json), multinode/pairs-<round>.json
                                                 the pairs of each round (before: multinode/pairs.json, all);
                                                 a re-test's carried pairs: multinode/carried.json, carried-<i>.json
recertify.json, fleet/<node>.json                a recertification: what was done to the node, its peers
retest/record.json, source.intoto.json           a re-test: which nodes were measured and why, which carried
retest/identity.json                             the identity (GPU serials, VBIOS, driver) read from each node it
                                                 may carry, one document (before: retest/identity/<node>.json each)
retest/source/                                   the source run's run.json, verdict.json, stack.json and
                                                 inventory.json as it signed them: whether a carried node's checks
                                                 keep their signed decisions (acceptance/retest_kept.py)
verdict.json, run.json                           the result and when the run ran (evaluate)
figures.json                                     what the run derived of each measured node (evaluate/held.py)
report.html, junit.xml, allure-results/          the reports
certificate.intoto.json                          the signature over all of it (sign)
```
The one place these are spelled; `RunFolder` turns them into paths. Imports nothing of gpucert, so any room (fleet
state, waivers, the acceptance record) may read a run id's time without importing the run folder.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

__all__ = ["ENVELOPE", "Mode", "multinode_file", "run_id", "run_id_time", "run_stamp"]

# a run id is `<UTC time>-<spec name>[-<suffix>]`: it sorts by time and names the spec, and the time holds no colon
# (a folder name that Windows and URLs take as it is)
_STAMP = "%Y-%m-%dT%H-%M-%SZ"
_STAMP_LEN = len("2026-12-02T18-00-00Z")


def run_stamp(at: datetime) -> str:
    """The time as a run id spells it (`2026-12-02T18-00-00Z`), in UTC (a naive time is taken as UTC)."""
    return (at.astimezone(UTC) if at.tzinfo else at).strftime(_STAMP)


def run_id(name: str, at: datetime | None = None, suffix: str | None = None) -> str:
    """A run id: the time (now unless given), the spec's name and an optional suffix (`recertify-<node>`)."""
    return f"{run_stamp(at or datetime.now(UTC))}-{name}" + (f"-{suffix}" if suffix else "")


def run_id_time(run_id: str) -> datetime | None:
    """The time at the head of a run id, None when the id does not start with one (a folder renamed by hand)."""
    try:
        return datetime.strptime(run_id[:_STAMP_LEN], _STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None


class Mode(StrEnum):
    """What a run is. Every mode but EVIDENCE is recorded in run.json when the run is prepared (and signed with it):
    it decides the suites that judge the run, so no file added to or removed from the folder can turn a
    certification into a lighter one."""

    STATIC = "static"  # the recipe alone, no cluster
    PLAN = "plan"  # the cluster's inventory and stack, nothing measured (configure)
    MEASURE = "measure"  # plan, then measure every node: a certification
    RECERTIFY = "recertify"  # one node against its handover baseline
    RETEST = "retest"  # a certification that measured part of the fleet and carried the rest over
    # recorded evidence, re-evaluated: how a run is prepared, never what it is; the new run records the mode of the
    # run it re-evaluates
    EVIDENCE = "evidence"

    @classmethod
    def recorded(cls) -> tuple[Mode, ...]:
        """The modes run.json may name."""
        return tuple(m for m in cls if m is not cls.EVIDENCE)

    @property
    def suites(self) -> tuple[str, ...]:
        """The suites that judge a run of this mode."""
        return _SUITES[self]

    @property
    def measures(self) -> bool:
        """Whether a run of this mode measured the hardware (so holds evidence/ and may cover a node)."""
        return self in (Mode.MEASURE, Mode.RECERTIFY, Mode.RETEST)


_SUITES = {
    Mode.STATIC: ("static",),
    Mode.PLAN: ("configure",),
    Mode.MEASURE: ("configure", "certify"),
    Mode.RECERTIFY: ("configure", "certify", "recertify"),
    Mode.RETEST: ("configure", "certify"),
}

INPUTS = "inputs"
SPEC = "spec.yaml"
BASELINE = "baseline.yaml"
POOL_BASELINES = "baselines"  # a folder: one <pool>.yaml per pool when the spec has several
HANDOVER = "handover.yaml"
HISTORY = "history.json"  # the nodes' history as verified when the run was prepared (fleet/history.py)
WAIVERS = "waivers.yaml"
GATE = "gate.json"
OPERATOR = "operator"
BASE = "base"
SUMMARY = "summary.md"
INVENTORY = "inventory.json"
STACK = "stack.json"
EVIDENCE = "evidence"
MULTINODE = "multinode"  # a folder, so it can never collide with a node's `<node>.json`
FABRIC = "nccl.json"
PAIRS = "pairs.json"  # every pair in one document: runs written before a document per round
PAIRS_ROUND = "pairs-{:04d}.json"  # the pairs of one round of the fabric stage (1-based; never a pool's folder name)
# a re-test's pairs carried from its source run: multinode/carried.json names the carried nodes and the source's
# pairs documents, copied byte for byte as multinode/carried-<i>.json (files: a folder there would be a pool's)
CARRIED_PAIRS = "carried.json"
CARRIED_PAIRS_FILE = "carried-{}.json"


DOMAINS = "domains"  # multinode/<pool>/domains/<domain>/: a pool's rings, one per topology domain


def multinode_file(pool: str | None, domain: str | None = None) -> tuple[str, ...]:
    """The all-reduce across a pool's nodes, under evidence/: `multinode/<pool>/nccl.json` (a pool name is a DNS
    label: never `pairs.json`, never a path); None: where a run before pools kept its one ring. With `domain` (the
    value of target.gang.topologyKey on its nodes: a label value, never empty, `.`, `..` or a path), that
    domain's ring: `multinode/<pool>/domains/<domain>/nccl.json`."""
    if pool is not None and domain is not None:
        return (MULTINODE, pool, DOMAINS, domain, FABRIC)
    return (MULTINODE, FABRIC) if pool is None else (MULTINODE, pool, FABRIC)


RECERTIFY = "recertify.json"
PREFLIGHT = "preflight.json"  # whether `gpucert preflight` ran before the measure, or was skipped
FLEET = "fleet"
RETEST = "retest"
RETEST_RECORD = "record.json"
RETEST_SOURCE = "source.intoto.json"  # the source run's envelope: what it signed for the evidence carried over
IDENTITY = "identity"  # the folder of one identity document a node (re-tests before retest/identity.json)
IDENTITIES = "identity.json"
RETEST_KEPT = "source"  # the source run's run.json, verdict.json, stack.json and inventory.json, byte for byte
VERDICT = "verdict.json"
FIGURES = "figures.json"  # what the run derived of each measured node, signed with it (evaluate/held.py)
RUN_INFO = "run.json"
REPORT = "report.html"
JUNIT = "junit.xml"
ALLURE = "allure-results"
ENVELOPE = "certificate.intoto.json"
