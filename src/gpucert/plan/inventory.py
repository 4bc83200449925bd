"""What the target reports it has: nodes and their GPUs. Value types and their JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpucert.errors import EvidenceError
from gpucert.files import read_json, validate, write_json
from gpucert.spec.names import NameError_, check_node_name

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
    write_json(path, inventory.to_json())


class _NodeDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str
    gpu_count: int | None
    gpu_product: str | None
    allocatable_gpus: int
    ready: bool
    ready_reason: str = ""


class _InventoryDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    schema_: str
    target: str
    nodes: list[_NodeDoc]


def read_inventory(path: Path) -> Inventory:
    """The inventory of a run folder; EvidenceError when it is not one gpucert wrote (bad JSON, unknown keys,
    a node name that is not a Kubernetes node name, a node listed twice)."""
    doc = read_json(path, missing="no inventory.json; pass a run folder written by `gpucert certify`")
    if not isinstance(doc, dict) or doc.get("schema") != INVENTORY_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise EvidenceError(f"schema is {got!r}, expected {INVENTORY_SCHEMA!r}", path=path)
    fields = {("schema_" if k == "schema" else k): v for k, v in doc.items()}
    parsed = validate(path, fields, _InventoryDoc)
    seen: set[str] = set()
    for n in parsed.nodes:
        try:
            check_node_name(n.name)
        except NameError_ as exc:
            raise EvidenceError(f"nodes: {exc}", path=path) from None
        if n.name in seen:
            raise EvidenceError(f"nodes: {n.name} is listed twice; an inventory lists each node once", path=path)
        seen.add(n.name)
    return Inventory(target=parsed.target, nodes=tuple(Node(**n.model_dump()) for n in parsed.nodes))
