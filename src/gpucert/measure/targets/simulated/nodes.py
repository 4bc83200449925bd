"""Recertification's hold on a simulated node: a lock file per node and the node's cordon, labels and annotations
in a state file, where a Kubernetes node would keep them."""

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

from gpucert.errors import NodeBusyError
from gpucert.files import process_alive, read_json_object, write_atomic
from gpucert.measure.targets.base import NodeState
from gpucert.measure.targets.simulated.world import iso as _iso
from gpucert.spec.names import check_node_name, inside

__all__ = ["LOCK_MAX_AGE_S", "SimulatedNodeControl"]

# a recertification lock older than this is not honoured: its holder crashed or lives on another host (a level-4
# DCGM diagnostic of an 8-GPU node takes a few hours; twelve leaves room for a wait for the node to drain)
LOCK_MAX_AGE_S = 12 * 3600


class SimulatedNodeControl:
    """Recertification's hold on a simulated node: a lock file per node (held by a live process) and the node's
    cordon, labels and annotations in `<state_dir>/<node>.json`, where a Kubernetes node would keep them."""

    def __init__(self, state_dir: Path, names: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.names = names  # the fleet's nodes, in its order

    def _state_path(self, node: str) -> Path:
        return inside(self.state_dir, f"{check_node_name(node)}.json")

    def state(self, node: str) -> dict[str, Any]:
        path = self._state_path(node)
        if path.exists():
            return read_json_object(path, missing="recertification writes it; run it again")
        return {"unschedulable": False, "labels": {}, "annotations": {}}

    def _save(self, node: str, state: dict[str, Any]) -> None:
        write_atomic(self._state_path(node), json.dumps(state, indent=1, sort_keys=True))

    def _lock_path(self, node: str) -> Path:
        return inside(self.state_dir, f"{check_node_name(node)}.lock")

    def _live(self, other: dict[str, Any]) -> bool:
        """Whether a lock's holder may still be running: on this host, a live pid; anywhere, younger than
        LOCK_MAX_AGE_S (a holder on another host cannot be asked, and no lock is held forever)."""
        try:
            acquired = datetime.strptime(str(other.get("acquired")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return False
        if (datetime.now(UTC) - acquired).total_seconds() > LOCK_MAX_AGE_S:
            return False
        if other.get("host") not in (None, socket.gethostname()):
            return True
        return process_alive(int(other.get("pid", 0) or 0))

    @contextlib.contextmanager
    def lock(self, node: str, holder: str) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self._lock_path(node)
        mine = json.dumps(
            {"holder": holder, "pid": os.getpid(), "host": socket.gethostname(), "acquired": _iso(datetime.now(UTC))}
        )
        for _ in range(3):
            # the lock appears with its content or not at all: write it aside, then link it into place (link
            # fails when the lock exists), so no second holder ever reads an empty lock and takes it over
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
            tmp.write_text(mine, encoding="utf-8")
            try:
                os.link(tmp, path)
            except FileExistsError:
                try:
                    other = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    other = {}
                if self._live(other):
                    raise NodeBusyError(
                        f"{node} is already being recertified by {other.get('holder')} (lock {path}, acquired "
                        f"{other.get('acquired')}); nothing was changed. Wait for that run to finish"
                    ) from None
                # its holder is gone (or the lock is older than LOCK_MAX_AGE_S): take it over, but only the
                # lock we read, so two takers cannot both win
                stale = path.with_name(f".{path.name}.stale.{uuid.uuid4().hex}")
                try:
                    os.rename(path, stale)
                except FileNotFoundError:
                    continue  # another taker moved it first
                try:
                    moved = json.loads(stale.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    moved = {}
                if moved != other:  # a fresh lock was taken between our read and our move: give it back
                    with contextlib.suppress(FileExistsError):
                        os.link(stale, path)
                stale.unlink(missing_ok=True)
                continue
            finally:
                tmp.unlink(missing_ok=True)
            break
        else:
            raise NodeBusyError(f"could not take the lock {path} for {node}: others keep taking it; try again")
        try:
            yield
        finally:
            if self.holder(node) == holder:  # a hold taken over by another run is theirs to release
                path.unlink(missing_ok=True)

    def holder(self, node: str) -> str | None:
        try:
            holder: str | None = json.loads(self._lock_path(node).read_text(encoding="utf-8"))["holder"]
        except (OSError, json.JSONDecodeError, KeyError):
            return None
        return holder

    def cordon(self, node: str) -> bool:
        state = self.state(node)
        was = bool(state["unschedulable"])
        state["unschedulable"] = True
        self._save(node, state)
        return was

    def nodes(self) -> list[NodeState]:
        out = []
        for name in self.names:
            state = self.state(name)
            out.append(NodeState(name, bool(state["unschedulable"]), state["labels"], state["annotations"]))
        return out

    def gpu_pods(self, node: str) -> list[str]:
        return []  # a simulated fleet runs no workloads

    def wait_idle(self, node: str, *, drain: bool, timeout_s: float) -> list[str]:
        return []  # a simulated fleet runs no workloads

    def mark(self, node: str, *, labels: dict[str, str], annotations: dict[str, str], uncordon: bool) -> None:
        state = self.state(node)
        state["labels"].update(labels)
        state["annotations"].update(annotations)
        if uncordon:
            state["unschedulable"] = False
        self._save(node, state)
