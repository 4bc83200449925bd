"""figures.json (`gpucert.io/figures/v1`): what a run's view derived of each measured node, signed with the run, so a
re-test need not read a carried node's evidence again (issue 28: a re-test pays for what it re-measures).

Per node: the sha256 of its evidence file, the document's head (measure/evidence_held.py: all but its GPUs' health
and samples, DCGM and P2P), its pool, each metric's figures as its pool's index believed them (per GPU in the index's
order: the figure, or why it cannot be believed and whether there were samples, and the slow samples where stability
is judged), and its P2P unit and each GPU's matrix problem. And per pool and metric, what was asked of the figures:
the SKU figure, the samples needed, the sign and maxDeviation.

Written by every run that writes a verdict (`figures_document`). A re-test uses a carried node's entry only where the
same code derived it from the same file under the same inputs, signed by the re-test's own key (acceptance/
retest_kept.py `held_figures`); then the entry is what deriving it again would give, and the node's evidence is
held by its head (read whole only where a rule asks for more). Anything else reads the evidence as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from gpucert.errors import EvidenceError
from gpucert.evaluate.rules.performance import Sampled, p2p_problems
from gpucert.evaluate.rules.performance_batch import Ask
from gpucert.evaluate.rules.stability import SlowSamples
from gpucert.evaluate.told import Told
from gpucert.files import validate
from gpucert.measure.evidence import NodeEvidence, read_evidence
from gpucert.measure.evidence_held import HEAD_EXCLUDE, HeldEvidence, head_of, held

if TYPE_CHECKING:
    from gpucert.evaluate.view import RunView

__all__ = ["FIGURES_SCHEMA", "Told", "figures_document", "heads_of", "parse_figures", "told_of"]

FIGURES_SCHEMA = "gpucert.io/figures/v1"

SlowRow = tuple[int, int, float, float, float, list[float]]
# (GPU or None, the figure or None, its samples (or 1/0: whether there were any), its unit or why not, slow samples)
Row = tuple[int | None, float | None, int, str, SlowRow | None]
AskRow = tuple[float | None, int, float | None, float | None]  # expected, least, sign, maxDeviation (None: no slow)


class HeldNode(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    evidence: str  # sha256 of the evidence file, hex
    pool: str
    head: HeldEvidence
    figures: dict[str, list[Row]] = Field(default_factory=dict)
    p2p: tuple[str, dict[int, str | None]] | None = None  # its unit and each GPU's matrix problem; None: no P2P


class FiguresDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: str = Field(FIGURES_SCHEMA, alias="schema")
    asks: dict[str, dict[str, AskRow]] = Field(default_factory=dict)
    nodes: dict[str, HeldNode] = Field(default_factory=dict)


def _ask_row(ask: Ask) -> AskRow:
    sign, deviation = ask.slow if ask.slow is not None else (None, None)
    return (ask.expected, ask.least, sign, deviation)


def _row(gpu: int | None, figure: Sampled | str, slow: SlowSamples | None, sampled: bool) -> list[Any]:
    s = [slow.k, slow.n, slow.median, slow.low, slow.worst, list(slow.depths)] if slow is not None else None
    if type(figure) is Sampled:
        return [gpu, figure.value, figure.n, figure.unit, s]
    return [gpu, None, int(sampled), str(figure), None]


def figures_document(view: RunView) -> bytes:
    """figures.json of the view's run: every measured node of exactly one pool whose pool's index believed it."""
    asks: dict[str, dict[str, AskRow]] = {}
    for pool in view.spec.pool_names:
        asks[pool] = {m: _ask_row(a) for m, a in view.peers.asks(pool).items()}
        for m in asks[pool]:
            view.peers.index(m, pool)  # believed by the pool, once (most are by now)
    nodes: dict[str, dict[str, Any]] = {}
    whole: set[str] = set()  # held nodes: their source's entry, taken whole (_entry)
    measured = view.measured  # the folder asked once, not once a node and metric
    for metric, node, rows in view.told_rows():
        its = view.pool_name_of(node)
        if its is None or metric not in asks.get(its, {}) or node in whole:
            continue
        entry = nodes.get(node)
        if entry is None:
            ev = view.usable(node) if measured else None  # view.measured_node's
            if ev is None or not ev.collected:
                continue
            entry = nodes[node] = _entry(view, node, ev, its)
            if view.held(node) is not None:
                whole.add(node)
                continue
        entry["figures"][metric] = [
            _row(gpu, figure, slow, type(figure) is Sampled or view.believed(metric, node, gpu) is not None)
            for gpu, figure, slow in rows
        ]
    doc = {"schema": FIGURES_SCHEMA, "asks": asks, "nodes": nodes}
    # json.dumps' document, written by pydantic-core (0.06 s for 8.8 MB at 1,024 x 8, json's encoder 0.29 s); a value
    # JSON cannot say (a NaN in a head: pydantic-core writes the constant) writes no figures.json (ValueError), nor do
    # those words in a head's text: a re-test then reads every document
    data = pydantic_core.to_json(doc)
    if b"NaN" in data or b"Infinity" in data:
        raise ValueError("a value JSON cannot say (NaN or an infinity) in a node's head")
    return data


def _entry(view: RunView, node: str, ev: NodeEvidence, pool: str) -> dict[str, Any]:
    """A node's entry but its figures; a held node's whole: its source's, which derived it alike (held_figures'
    gates; sign and verify hold the re-test's figures.json to its evidence), its document not read for it."""
    told = view.held(node)
    if told is not None:
        entry: dict[str, Any] = told.entry.model_dump(mode="json", by_alias=True, exclude={"head": HEAD_EXCLUDE})
        return entry
    p2p = None
    if ev.p2p is not None:
        p2p = (ev.p2p.unit, view.once(f"p2p.matrix/{node}", lambda: p2p_problems(ev)))
    digest = _sha256(view.folder.evidence_path(node))
    return {"evidence": digest, "pool": pool, "head": head_of(ev), "figures": {}, "p2p": p2p}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_PARSED: dict[str, FiguresDocument] = {}  # the last document parsed, by its sha256: a re-test reads its source's twice


def parse_figures(data: bytes, path: Path) -> FiguresDocument:
    """figures.json's bytes as a document (EvidenceError naming `path` otherwise); the same bytes parsed once."""
    digest = hashlib.sha256(data).hexdigest()
    doc = _PARSED.get(digest)
    if doc is None:
        doc = validate(path, data, FiguresDocument)
        if doc.schema_ != FIGURES_SCHEMA:
            raise EvidenceError(f"schema is {doc.schema_!r}, expected {FIGURES_SCHEMA!r}", path=path)
        _PARSED.clear()
        _PARSED[digest] = doc
    return doc


def _bound(path: Path, digest: str) -> Callable[[], NodeEvidence | None]:
    """The node's whole document at `path`, only while its bytes are those `digest` names."""

    def load() -> NodeEvidence | None:
        if _sha256(path) != digest:
            raise EvidenceError("no longer the file whose figures were signed", path=path)
        return read_evidence(path)

    return load


def told_of(
    doc: FiguresDocument,
    evidence: Mapping[str, tuple[Path, str]],
    pool_of: Callable[[str], str | None],
    asks: Callable[[str], Mapping[str, Ask]],
) -> dict[str, tuple[HeldEvidence, Told]]:
    """Each node's held evidence and figures, of the nodes in `evidence` (node -> its file and that file's sha256)
    whose entry is of that very file, in the pool it is in now (`pool_of`), which asks now what it asked then
    (`asks(pool)`: each metric's Ask)."""
    out: dict[str, tuple[HeldEvidence, Told]] = {}
    alike: dict[str, bool] = {}
    for node, ev in heads_of(doc, evidence).items():
        entry = doc.nodes[node]
        if pool_of(node) != entry.pool:
            continue
        if entry.pool not in alike:
            then = doc.asks.get(entry.pool)
            alike[entry.pool] = then is not None and {m: _ask_row(a) for m, a in asks(entry.pool).items()} == then
        if alike[entry.pool] and entry.figures.keys() >= doc.asks[entry.pool].keys():
            out[node] = (ev, _told(entry))
    return out


def heads_of(doc: FiguresDocument, evidence: Mapping[str, tuple[Path, str]]) -> dict[str, HeldEvidence]:
    """Each node's evidence held by its head, of the nodes in `evidence` (node -> its file and the sha256 of the
    file that must be read whole where a rule asks for more) whose entry is of that very file."""
    out: dict[str, HeldEvidence] = {}
    for node, (path, digest) in evidence.items():
        entry = doc.nodes.get(node)
        if entry is not None and entry.evidence == digest and entry.head.node == node:
            out[node] = held(entry.head, _bound(path, digest), bytes.fromhex(digest))
    return out


_new = tuple.__new__  # a named tuple made by the tuple's own constructor: its generated __new__ is Python


def _told(entry: HeldNode) -> Told:
    figures = {
        metric: [
            (
                gpu,
                _new(Sampled, (value, n, unit)) if value is not None else unit,
                _new(SlowSamples, (*s[:5], tuple(s[5]))) if s is not None else None,
                value is not None or n > 0,
            )
            for gpu, value, n, unit, s in rows
        ]
        for metric, rows in entry.figures.items()
    }
    return Told(entry.evidence, entry.pool, figures, entry.p2p, entry)
