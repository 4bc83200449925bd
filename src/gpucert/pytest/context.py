"""The run a pytest session evaluates, as the session's hooks share it (`config.stash[context_key]`): the
Evaluation, the outcomes as items report them, what was collected, a re-test's carried nodes. A value the session,
collection, outcomes and the carried nodes all read, so none of them imports another for it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpucert.acceptance.retest import read_retest_record
from gpucert.acceptance.retest_kept import Kept, held_figures
from gpucert.evaluate.evaluation import Evaluation
from gpucert.plan.checks import CheckKey
from gpucert.plan.records import RetestRecord
from gpucert.plan.runfolder import RunFolder
from gpucert.report.verdict import Outcome
from gpucert.report.verdict_model import Verdict
from gpucert.spec.cluster import ClusterSpec

__all__ = ["RunContext", "context_key", "run_context"]


@dataclass
class RunContext:
    evaluation: Evaluation  # the run, and the spec and baselines it is judged by
    readonly: bool = False  # a session that only lists or shows (--co): reads the run folder, writes nothing
    outcomes: dict[CheckKey, Outcome] = field(default_factory=dict)
    selected: set[CheckKey] | None = None  # the keys the session collected, after -k, --lf, --deselect
    collection_done: bool = False  # the whole collection ran (not cut short by Ctrl-C): `selected` may be recorded
    collected: int = 0
    left_out: int = 0  # items whose check the spec does not require
    evidence_of: dict[CheckKey, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    verdict: Verdict | None = None
    spec: ClusterSpec = field(init=False)
    folder: RunFolder = field(init=False)
    retest: RetestRecord | None = field(init=False)  # the run's re-test record, read once (None: no re-test)
    carried: frozenset[str] = field(init=False)  # a re-test's carried nodes: decided without items (carried.py)
    kept: Kept | None = None  # which carried nodes kept their signed decisions, and why not (carried.py)

    def __post_init__(self) -> None:
        self.spec, self.folder = self.evaluation.spec, self.evaluation.folder
        self.retest = read_retest_record(self.folder)
        self.carried = frozenset(self.retest.carried) if self.retest is not None else frozenset()
        # its carried nodes' evidence held by its head with their source's figures, where derived alike: before any
        # check reads a node's evidence (acceptance/retest_kept.py `held_figures`)
        self.evaluation.hold(held_figures(self.evaluation, self.retest))


context_key = pytest.StashKey[RunContext]()


def run_context(config: pytest.Config) -> RunContext | None:
    return config.stash.get(context_key, None)
