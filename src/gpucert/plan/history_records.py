"""The typed records of a node's history (fleet/history.py writes them; a run folder's inputs/history.json holds
the entries a run was judged against). Pure: models only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HISTORY_SCHEMA", "SNAPSHOT_SCHEMA", "Figure", "GpuEntry", "HistoryEntry", "NodeHistory", "Snapshot"]

HISTORY_SCHEMA = "gpucert.io/history/v1"
SNAPSHOT_SCHEMA = "gpucert.io/history-snapshot/v1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Figure(_Model):
    median: float
    spread: float  # robust relative sd of the run's samples (1.4826 MAD / median)
    n: int


class GpuEntry(_Model):
    index: int
    serial: str | None
    firmware: str | None  # the VBIOS version
    metrics: dict[str, Figure]


class HistoryEntry(_Model):
    schema_: str = Field(HISTORY_SCHEMA, alias="schema")
    spec: str
    baseline: str | None  # sha256 of the SKU baseline the node's pool was judged against
    node: str
    pool: str
    run: str
    time: str
    certificate: str  # the digest of the run's signed certificate
    evidence: str  # sha256 of the node's evidence file as signed
    driver: str | None
    gpus: list[GpuEntry]


class NodeHistory(_Model):
    entries: list[HistoryEntry]  # verified against their signed runs when the run was prepared
    refused: dict[str, str]  # run -> why its entry was refused


class Snapshot(_Model):
    schema_: str = Field(SNAPSHOT_SCHEMA, alias="schema")
    spec: str
    nodes: dict[str, NodeHistory]
