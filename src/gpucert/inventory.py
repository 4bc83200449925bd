"""What the target reports it has: nodes and their GPUs. Value types and their JSON form."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpucert.errors import EvidenceError

__all__ = ["INVENTORY_SCHEMA", "Inventory", "Node", "read_inventory", "write_inventory"]

INVENTORY_SCHEMA = "gpucert.io/inventory/v1"


@dataclass(frozen=True, slots=True)
class Node:
    """One node as the cluster describes it (GFD labels, allocatable resources, readiness)."""

    name: str
    gpu_count: int | None  # nvidia.com/gpu.count, None when GFD has not labelled the node
    gpu_product: str | None  # nvidia.com/gpu.product
    allocatable_gpus: int  # status.allocatable["nvidia.com/gpu"], 0 when absent
    ready: bool
    ready_reason: str = ""


@dataclass(frozen=True, slots=True)
class Inventory:
    target: str
    nodes: tuple[Node, ...]

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def to_json(self) -> dict[str, Any]:
        return {"schema": INVENTORY_SCHEMA, "target": self.target, "nodes": [asdict(n) for n in self.nodes]}


def write_inventory(path: Path, inventory: Inventory) -> None:
    path.write_text(json.dumps(inventory.to_json(), indent=1) + "\n", encoding="utf-8")


def read_inventory(path: Path) -> Inventory:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvidenceError("no inventory.json; pass a run folder written by `gpucert certify`", path=path) from None
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"not JSON: {exc}", path=path) from None
    if doc.get("schema") != INVENTORY_SCHEMA:
        raise EvidenceError(f"schema is {doc.get('schema')!r}, expected {INVENTORY_SCHEMA!r}", path=path)
    return Inventory(target=doc["target"], nodes=tuple(Node(**n) for n in doc["nodes"]))
