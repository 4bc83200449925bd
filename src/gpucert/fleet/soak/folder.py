"""The soak's files in its run folder, and the lock that keeps one controller per run.

```
soak/plan.json                    what the soak is: spec (path and digest), nodes and pools, rounds, criteria
soak/rounds/<NNNN>/<node>.json    each node's raw round (RoundEvidence), written as the node finishes
soak/rounds/<NNNN>/_fabric.json   the all-reduce across nodes of the round (FabricRound), written as it finishes
                                  (`_fabric.<pool>.json`: a pool's, where each pool has its own)
soak/rounds/<NNNN>/summary.json   the round judged: every node's summary, findings and the restart policy's
                                  moves; written last, it is the round's commit (a round without it is redone
                                  for the nodes that have no raw file yet, never repeated for the others)
soak/progress.json                per node: rounds, clean hours, status, ETA (rewritten after every round)
soak/result.json                  the soak's outcome per node (at the end)
soak/report.html                  the rounds over time per metric and pool, clean hours per node (at the end)
soak/metrics.prom                 the progress as Prometheus gauges (after every round)
soak/controller.lock              the controller that holds the run (pid, host, since)
```
Every file is written whole or not at all (a temporary name, then a rename). Touches the file system only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpucert.errors import EvidenceError, GpucertError
from gpucert.evaluate.soak_round import FabricRound, RoundEvidence
from gpucert.files import process_alive, read_json_object, write_atomic, write_json
from gpucert.measure.evidence import write_document
from gpucert.plan.runfolder import RunFolder
from gpucert.spec.names import check_node_name, inside

__all__ = ["SoakBusyError", "SoakFolder"]

SOAK = "soak"
FABRIC_FILE = "_fabric.json"  # no node's name: a Kubernetes name has no "_"
FABRIC_SCHEMA = "gpucert.io/soak-fabric-round/v1"


class SoakBusyError(GpucertError):
    """Another controller holds the soak's run: this one refuses to start (nothing was changed)."""

    exit_code = 2

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class SoakFolder:
    """`<run>/soak/`: paths, documents and the controller's lock."""

    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self.path = run.path / SOAK

    @property
    def plan_path(self) -> Path:
        return self.path / "plan.json"

    @property
    def progress_path(self) -> Path:
        return self.path / "progress.json"

    @property
    def result_path(self) -> Path:
        return self.path / "result.json"

    @property
    def report_path(self) -> Path:
        return self.path / "report.html"

    @property
    def lock_path(self) -> Path:
        return self.path / "controller.lock"

    def round_dir(self, index: int) -> Path:
        return self.path / "rounds" / f"{index:04d}"

    def raw_path(self, index: int, node: str) -> Path:
        return inside(self.round_dir(index), f"{check_node_name(node)}.json")

    def summary_path(self, index: int) -> Path:
        return self.round_dir(index) / "summary.json"

    def fabric_path(self, index: int, ring: str = "") -> Path:
        """The round's all-reduce across nodes (`ring`: a pool's, where the spec has one per pool)."""
        return self.round_dir(index) / (f"_fabric.{check_node_name(ring)}.json" if ring else FABRIC_FILE)

    # ---- documents ----------------------------------------------------------------------------------------------

    def write_plan(self, plan: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json(self.plan_path, plan)

    def read_plan(self) -> dict[str, Any]:
        return read_json_object(
            self.plan_path, missing="not a soak's run folder: pass the folder `gpucert soak` created"
        )

    def write_raw(self, ev: RoundEvidence) -> None:
        write_document(self.raw_path(ev.round, ev.node), ev)

    def read_raw(self, index: int, node: str) -> RoundEvidence | None:
        path = self.raw_path(index, node)
        if not path.is_file():
            return None
        try:
            return RoundEvidence.model_validate_json(path.read_bytes())
        except ValueError as exc:
            raise EvidenceError(_damaged_raw(exc, self.run.path), path=path) from None

    def write_fabric(self, f: FabricRound, ring: str = "") -> None:
        """The round's all-reduce across nodes as it finished: a controller killed before the round's commit
        takes it from here instead of running it again."""
        self.round_dir(f.round).mkdir(parents=True, exist_ok=True)
        write_json(self.fabric_path(f.round, ring), {"schema": FABRIC_SCHEMA, **f.to_json()})

    def read_fabric(self, index: int, ring: str = "") -> FabricRound | None:
        path = self.fabric_path(index, ring)
        if not path.is_file():
            return None
        doc = read_json_object(path)
        try:
            return FabricRound.from_json(doc)
        except (KeyError, TypeError, ValueError) as exc:
            raise EvidenceError(f"is not a soak round gpucert wrote ({exc.__class__.__name__})", path=path) from None

    def write_summary(self, index: int, summary: dict[str, Any]) -> None:
        # compact: json's C encoder (an indent takes the pure-Python one, ten times slower on a 64-node round)
        self.round_dir(index).mkdir(parents=True, exist_ok=True)
        write_atomic(self.summary_path(index), json.dumps(summary, separators=(",", ":")))

    def read_summary(self, index: int) -> dict[str, Any] | None:
        path = self.summary_path(index)
        return read_json_object(path) if path.is_file() else None

    def write_progress(self, progress: dict[str, Any]) -> None:
        write_json(self.progress_path, progress)

    def write_result(self, result: dict[str, Any]) -> None:
        write_json(self.result_path, result)

    # ---- one controller per run ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run for this process; refused while another live controller (on this host: its pid answers;
        elsewhere: always, it cannot be asked) holds it. A lock whose process is gone is taken over."""
        self.path.mkdir(parents=True, exist_ok=True)
        mine = {"pid": os.getpid(), "host": socket.gethostname(), "since": datetime.now(UTC).isoformat()}
        for _ in range(3):
            tmp = self.path / f".controller.{os.getpid()}.{uuid.uuid4().hex}.tmp"
            tmp.write_text(json.dumps(mine), encoding="utf-8")
            try:
                os.link(tmp, self.lock_path)  # fails when the lock exists: the lock appears whole or not at all
            except FileExistsError:
                self._take_over_stale()
                continue
            finally:
                tmp.unlink(missing_ok=True)
            break
        else:
            raise SoakBusyError("could not take the soak's lock: others keep taking it; try again", path=self.lock_path)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(self.lock_path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                    self.lock_path.unlink()

    def _take_over_stale(self) -> None:
        try:
            other = json.loads(self.lock_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            other = {}
        if other.get("host") not in (None, socket.gethostname()) or process_alive(int(other.get("pid", 0) or 0)):
            raise SoakBusyError(
                f"another controller (pid {other.get('pid')} on {other.get('host')}, since {other.get('since')}) "
                f"runs this soak; nothing was changed. Wait for it, or stop it and `gpucert soak --resume "
                f"{self.run.path}`",
                path=self.lock_path,
            )
        stale = self.path / f".controller.stale.{uuid.uuid4().hex}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.lock_path, stale)  # only one taker wins the rename
            stale.unlink()


def _damaged_raw(exc: ValueError, run: Path) -> str:
    """One node's raw round that is not what gpucert wrote: the key at fault and what to do. A round not yet
    committed takes a node's raw file where one is left, else measures the node again (controller._measure)."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    first = errors[0] if errors else None
    key = ".".join(str(p) for p in first["loc"]) if first else ""
    why = f"{first['msg']} at {key or 'the top'}" if first else exc.__class__.__name__
    return (
        f"is not a soak round gpucert wrote ({why}); move the file out of the run folder and run "
        f"`gpucert soak --resume {run}` again: the node's round is measured again"
    )
