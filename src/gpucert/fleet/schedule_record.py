"""The record of a schedule round: `<reports>/.schedule/<time>.json` (`gpucert.io/schedule/v1`), written as the
round goes and read back by `gpucert metrics`; each round claims a file of its own."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpucert.errors import EvidenceError, GpucertError
from gpucert.files import read_json
from gpucert.fleet.state import parse_time
from gpucert.plan.layout import run_stamp

__all__ = ["SCHEDULE_DIR", "SCHEDULE_SCHEMA", "ScheduleRecord", "claim_record", "last_schedule"]

SCHEDULE_SCHEMA = "gpucert.io/schedule/v1"
SCHEDULE_DIR = ".schedule"  # beside the run folders: no run folder, so no run reader takes it for one


@dataclass
class ScheduleRecord:
    """What one round did: written to `.schedule/<time>.json` as it goes, read back by the exporter."""

    spec: str
    options: dict[str, Any]
    started: datetime
    finished: datetime
    chosen: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why it was not taken
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> {outcome, run, message}
    pools: dict[str, dict[str, int]] = field(default_factory=dict)
    allowance: int = 0
    failures: int = 0
    breaker_open: bool = False
    breaker: str | None = None

    @property
    def counts(self) -> Counter[str]:
        return Counter(o["outcome"] for o in self.outcomes.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEDULE_SCHEMA,
            "spec": self.spec,
            "started": self.started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "finished": self.finished.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "options": self.options,
            "pools": self.pools,
            "chosen": self.chosen,
            "skipped": self.skipped,
            "outcomes": self.outcomes,
            "breaker": {
                "open": self.breaker_open,
                "failures": self.failures,
                "allowance": self.allowance,
                "reason": self.breaker,
            },
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ScheduleRecord:
        started, finished = parse_time(d["started"]), parse_time(d["finished"])
        if d.get("schema") != SCHEDULE_SCHEMA or started is None or finished is None:
            raise ValueError("not a gpucert.io/schedule/v1 record")
        b = d["breaker"]
        return cls(
            spec=str(d["spec"]),
            options=dict(d["options"]),
            started=started,
            finished=finished,
            chosen=list(d["chosen"]),
            skipped=dict(d["skipped"]),
            outcomes={k: dict(v) for k, v in d["outcomes"].items()},
            pools=dict(d["pools"]),
            allowance=int(b["allowance"]),
            failures=int(b["failures"]),
            breaker_open=bool(b["open"]),
            breaker=b.get("reason"),
        )


def last_schedule(reports: Path, spec: str | None) -> ScheduleRecord | None:
    """The newest round's record (of `spec`, when given); None when there is none that can be read."""
    folder = reports / SCHEDULE_DIR
    for path in sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []:
        try:
            record = ScheduleRecord.from_json(read_json(path))
        except (EvidenceError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if spec is None or record.spec == spec:
            return record
    return None


def claim_record(folder: Path, started: datetime) -> Path:
    """A record file of its own for a round: `<time>.json`, `<time>-2.json`, ... created exclusively, so two rounds
    started in the same second never write one file."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = run_stamp(started)
    for n in range(1, 1000):
        path = folder / (f"{stamp}.json" if n == 1 else f"{stamp}-{n}.json")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        return path
    raise GpucertError(f"{folder}: 999 schedule records of {stamp} already; clear the folder")
