"""The run view's figures (view.RunView is a ViewFigures): each GPU's (or node's) believable figure per metric, kept
once per node, metric and GPU for the evidence is immutable once read, and its check, its peers' index, the exporter
and the reports all ask. The peer index believes a pool's GPUs of a metric at once (rules/performance_batch.py) and
the view keeps its own nodes' figures from that, so a check finds its figure told."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from gpucert.evaluate.peers import probe_of_metric
from gpucert.evaluate.rules.performance import Sampled, believable, samples_of
from gpucert.evaluate.rules.performance_batch import Ask, Believed, believe_many, slots_of
from gpucert.evaluate.rules.stability import SlowSamples
from gpucert.plan.checks import NODE_METRICS

if TYPE_CHECKING:
    from gpucert.evaluate.told import Told
    from gpucert.measure.evidence import GpuEvidence, NodeEvidence
    from gpucert.spec.baseline import GpuBaseline
    from gpucert.spec.cluster import ClusterSpec

__all__ = ["ViewFigures"]

T = TypeVar("T")


class ViewFigures:
    """What RunView keeps of its nodes' figures, and how it answers for them."""

    spec: ClusterSpec
    _usable: dict[str, NodeEvidence | None]
    # per node, each (metric, GPU)'s believable figure, or why not (None: no samples): a float and a count each
    _figures: dict[str, dict[tuple[str, int | None], Sampled | str | None]]
    _figure_keys: dict[tuple[str, int | None], tuple[str, int | None]]  # one (metric, GPU) for all nodes
    _evidence: dict[str, NodeEvidence | None]
    _held: dict[str, Told]  # a re-test's held nodes' figures, as their source derived them (evaluate/held.py)

    if TYPE_CHECKING:

        def usable(self, node: str) -> NodeEvidence | None: ...
        def gpu_of(self, node: str, index: int) -> GpuEvidence | None: ...
        def baseline_of(self, node: str) -> GpuBaseline: ...
        def once(self, name: str, compute: Callable[[], T]) -> T: ...

    def sampled(self, metric: str, node: str, gpu: int | None) -> Sampled | None:
        """The median of one measurement and its sample count; None when not measured (or not to be believed: too
        few samples for the spec's count of the probe, not numbers, absurd; see rules.performance.believable)."""
        ev = self.usable(node)
        if ev is None or not ev.collected:
            return None
        found = self.believed(metric, node, gpu)
        return found if isinstance(found, Sampled) else None

    def believed(self, metric: str, node: str, gpu: int | None) -> Sampled | str | None:
        """rules.performance.believable of the node's usable evidence (the figure, or why it cannot be believed), or
        None when the probe recorded no samples of it: once per node, metric and GPU, for the evidence is immutable
        once read and its check, its peers' index, the exporter and the reports all ask. The node's evidence must be
        usable (ValueError otherwise: a rule asks only after node_evidence said so)."""
        figures = self._figures.get(node)
        if figures is None:
            figures = self._figures[node] = self._held_figures(node)
        key = (metric, gpu)
        if key not in figures:
            key = self._figure_keys.setdefault(key, key)  # every node's dict holds the same key objects
            ev = self.usable(node)
            if ev is None:
                raise ValueError(f"{node} has no usable evidence: no figure of {metric} to believe")
            told = self.once("view_figures: believed by the pools", _Told)
            if told.copied.get(node) != len(told.pools):  # what its pool's index believed of it, kept at once
                told.copied[node] = len(told.pools)
                self._keep_told(node, ev, figures, told)
                if key in figures:
                    return figures[key]
            g = self.gpu_of(node, gpu) if gpu is not None else None
            found = believable(ev, metric, gpu, self.expected(node, metric), self.min_samples(metric), g)
            figures[key] = None if isinstance(found, str) and not samples_of(ev, metric, gpu, g) else found
        return figures[key]

    def _held_figures(self, node: str) -> dict[tuple[str, int | None], Sampled | str | None]:
        """A held node's figures as its source derived them (evaluate/held.py), each (metric, GPU) of its entry at
        once, as `believed` answers (None: refused, with no samples); {} for any other node (or one not usable)."""
        held = self._held.get(node)
        if held is None or self.usable(node) is None:
            return {}
        figures: dict[tuple[str, int | None], Sampled | str | None] = {}
        keys = self._figure_keys
        for metric, rows in held.figures.items():
            for gpu, figure, _slow, sampled in rows:
                key = keys.setdefault((metric, gpu), (metric, gpu))
                if key not in figures:  # a GPU listed twice: its first, as the index lists it
                    figures[key] = figure if sampled or type(figure) is Sampled else None
        return figures

    def _keep_told(
        self, node: str, ev: NodeEvidence, figures: dict[tuple[str, int | None], Sampled | str | None], told: _Told
    ) -> None:
        """Every figure a pool's index believed of this node's own evidence, against the node's SKU figure, into the
        node's figures (the first kept stands): the same as `believable` (rules/performance_batch.py), told once for
        the pool. A fleet peer's evidence, or a figure against another SKU figure than the node's own, is not the
        view's to keep."""
        for found, spans in told.pools:
            span = spans.get(node)
            if span is None:
                continue
            for metric, (b, expected) in found.items():
                if b.evidence[span[0]] is not ev or expected != self.expected(node, metric):
                    continue
                for i in range(*span):
                    figure = b.figures[i]
                    if type(figure) is Sampled:
                        key = self._figure_keys.setdefault((metric, b.gpus[i]), (metric, b.gpus[i]))
                        if key not in figures:
                            figures[key] = figure

    def _believe_pool(self, evidence: Sequence[NodeEvidence], asks: Sequence[Ask]) -> dict[str, Believed]:
        """`believe_many` as the peer index asks it (every GPU of a pool at once, every metric), keeping what it
        believed for the view's own nodes' checks, which ask the same question (`believed`) after: kept node by node
        when a check of the node first asks (at 1,024 x 8 a re-test asks of 3 nodes), not copied for every GPU. A
        held node's figures are its source's (evaluate/held.py), its evidence not read for them."""
        found = self._believe_held(evidence, asks)
        told = self.once("view_figures: believed by the pools", _Told)
        groups: dict[int, tuple[dict[str, tuple[Believed, float | None]], dict[str, tuple[int, int]]]] = {}
        for ask in asks:  # the metrics that share a GPU list (a pool's per-GPU ones; its node-level ones) together
            b = found[ask.metric]
            group = groups.get(id(b.evidence))
            if group is None:
                group = groups[id(b.evidence)] = ({}, _spans(b.evidence))
                told.pools.append(group)
            group[0][ask.metric] = (b, ask.expected)
        return found

    def _believe_held(self, evidence: Sequence[NodeEvidence], asks: Sequence[Ask]) -> dict[str, Believed]:
        """`believe_many` of the evidence, each held node's figures told by its entry rather than believed again:
        the others believed at once, then every slot in the pool's order takes its figure from one or the other."""
        told = {id(ev): t for ev in evidence if (t := self._told_for(ev, asks)) is not None}
        if not told:
            return believe_many(evidence, asks)
        rest = believe_many([ev for ev in evidence if id(ev) not in told], asks)
        slots = {per: slots_of(evidence, per_node=per) for per in {a.metric in NODE_METRICS for a in asks}}
        out: dict[str, Believed] = {}
        for ask in asks:
            s, theirs = slots[ask.metric in NODE_METRICS], rest[ask.metric]
            others = zip(theirs.figures, theirs.slow, strict=True)
            b = out[ask.metric] = Believed(s.evidence, s.gpus, keys=s.keys)
            rows: Iterator[tuple[int | None, Sampled | str, SlowSamples | None, bool]] = iter(())
            last = None
            for ev in s.evidence:
                t = told.get(id(ev))
                if t is None:
                    figure, slow = next(others)
                else:
                    if ev is not last:  # a node's slots follow each other, in its rows' order (_told_for)
                        rows, last = iter(t.figures[ask.metric]), ev
                    _gpu, figure, slow, _sampled = next(rows)
                b.figures.append(figure)
                b.slow.append(slow)
            b.refused = sum(1 for f in b.figures if type(f) is str)
        return out

    def _told_for(self, ev: NodeEvidence, asks: Sequence[Ask]) -> Told | None:
        """The held node's entry where it tells every metric asked, slot for slot (the GPUs `slots_of` lists of its
        evidence, in that order); else None: believed from its evidence."""
        t = self._held.get(ev.node)
        if t is None or self._evidence.get(ev.node) is not ev:
            return None
        seen: dict[int, None] = {}
        for g in ev.gpus:
            seen.setdefault(g.index)
        for ask in asks:
            rows = t.figures.get(ask.metric)
            want = [None] if ask.metric in NODE_METRICS else list(seen)
            if rows is None or [r[0] for r in rows] != want:
                return None
        return t

    def told_rows(self) -> Iterator[tuple[str, str, list[tuple[int | None, Sampled | str, SlowSamples | None]]]]:
        """What the pools' indexes believed of the view's own nodes: per metric and node, each slot's GPU, figure (or
        why not) and slow samples, in the index's order (evaluate/held.py writes them down)."""
        told = self.once("view_figures: believed by the pools", _Told)
        for found, spans in told.pools:
            for metric, (b, _expected) in found.items():
                for node, (start, end) in spans.items():
                    if b.evidence[start] is self._evidence.get(node):
                        yield metric, node, [(b.gpus[i], b.figures[i], b.slow[i]) for i in range(start, end)]

    def min_samples(self, metric: str) -> int:
        """The samples a figure of `metric` needs: the spec's count for its probe (certify.samples)."""
        return self.spec.certify.min_samples(probe_of_metric(metric))

    def expected(self, node: str, metric: str) -> float | None:
        """The SKU figure of `metric` for the node's pool; None when its baseline has none."""
        b = self.baseline_of(node).metrics.get(metric)
        return b.expected if b is not None else None


class _Told:
    """What the peer indexes believed of their pools' evidence: per pool and GPU list (a pool's per-GPU metrics share
    one, its node-level ones another), each metric's `Believed` with the SKU figure it was believed against, and
    where each node's entries are; and per node, how many of them its figures have taken in."""

    def __init__(self) -> None:
        self.pools: list[tuple[dict[str, tuple[Believed, float | None]], dict[str, tuple[int, int]]]] = []
        self.copied: dict[str, int] = {}


def _spans(evidence: Sequence[NodeEvidence]) -> dict[str, tuple[int, int]]:
    """Each node's first run of entries in a `Believed`'s list (a node's GPUs follow each other)."""
    spans: dict[str, tuple[int, int]] = {}
    start = 0
    for i in range(1, len(evidence) + 1):
        if i == len(evidence) or evidence[i] is not evidence[start]:
            spans.setdefault(evidence[start].node, (start, i))
            start = i
    return spans
