"""The run view's figures (view.RunView is a ViewFigures): each GPU's (or node's) believable figure per metric, kept
once per node, metric and GPU for the evidence is immutable once read, and its check, its peers' index, the exporter
and the reports all ask. The peer index believes a pool's GPUs of a metric at once (rules/performance_batch.py) and
the view keeps its own nodes' figures from that, so a check finds its figure told."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpucert.evaluate.peers import probe_of_metric
from gpucert.evaluate.rules.performance import Sampled, believable, samples_of
from gpucert.evaluate.rules.performance_batch import Believed, believe_all

if TYPE_CHECKING:
    from gpucert.measure.evidence import GpuEvidence, NodeEvidence
    from gpucert.spec.baseline import GpuBaseline
    from gpucert.spec.cluster import ClusterSpec

__all__ = ["ViewFigures"]


class ViewFigures:
    """What RunView keeps of its nodes' figures, and how it answers for them."""

    spec: ClusterSpec
    _usable: dict[str, NodeEvidence | None]
    # per node, each (metric, GPU)'s believable figure, or why not (None: no samples): a float and a count each
    _figures: dict[str, dict[tuple[str, int | None], Sampled | str | None]]
    _figure_keys: dict[tuple[str, int | None], tuple[str, int | None]]  # one (metric, GPU) for all nodes

    if TYPE_CHECKING:

        def usable(self, node: str) -> NodeEvidence | None: ...
        def gpu_of(self, node: str, index: int) -> GpuEvidence | None: ...
        def baseline_of(self, node: str) -> GpuBaseline: ...

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
            figures = self._figures[node] = {}
        key = (metric, gpu)
        if key not in figures:
            key = self._figure_keys.setdefault(key, key)  # every node's dict holds the same key objects
            ev = self.usable(node)
            if ev is None:
                raise ValueError(f"{node} has no usable evidence: no figure of {metric} to believe")
            g = self.gpu_of(node, gpu) if gpu is not None else None
            found = believable(ev, metric, gpu, self.expected(node, metric), self.min_samples(metric), g)
            figures[key] = None if isinstance(found, str) and not samples_of(ev, metric, gpu, g) else found
        return figures[key]

    def _believe_pool(
        self,
        evidence: Sequence[NodeEvidence],
        metric: str,
        expected: float | None,
        least: int,
        slow: tuple[float, float] | None,
    ) -> Believed:
        """`believe_all` as the peer index asks it (every GPU of a pool at once), keeping the figures it believed of
        the view's own nodes' evidence: their checks ask the same question (`believed`) after. A fleet peer's
        evidence, or a figure against another SKU figure than the node's own, is not the view's to keep."""
        found = believe_all(evidence, metric, expected, least, slow)
        last: NodeEvidence | None = None
        figures: dict[tuple[str, int | None], Sampled | str | None] | None = None
        for ev, gpu, figure in zip(found.evidence, found.gpus, found.figures, strict=True):
            if ev is not last:  # the node's GPUs follow each other: is it the view's, judged by this SKU figure?
                last, node = ev, ev.node
                mine = self._usable.get(node) is ev and expected == self.expected(node, metric)
                figures = self._figures.setdefault(node, {}) if mine else None
            if figures is not None and isinstance(figure, Sampled):
                key = (metric, gpu)
                if key not in figures:
                    figures[self._figure_keys.setdefault(key, key)] = figure
        return found

    def min_samples(self, metric: str) -> int:
        """The samples a figure of `metric` needs: the spec's count for its probe (certify.samples)."""
        return self.spec.certify.min_samples(probe_of_metric(metric))

    def expected(self, node: str, metric: str) -> float | None:
        """The SKU figure of `metric` for the node's pool; None when its baseline has none."""
        b = self.baseline_of(node).metrics.get(metric)
        return b.expected if b is not None else None
