"""A soak's rounds on a Kubernetes cluster: each round is the certification's probe Jobs (one per node, at most
`maxParallel` at once, cleaned up after the round) on nodes cordoned and labelled `gpucert.io/soak=running` before
the first round, and the round lasts its length in real time (`end_round`, after the round's all-reduce).

The label says `failed` once the node leaves the soak, and its result (`pass`, `incomplete`) at the end; the
nodes stay cordoned for their owner to release. A probe pod never restarts (restartPolicy Never, backoffLimit 0:
podspec.py and jobs.py): a container that dies fails the pod, and the node's round is not measured (`soak.round`),
so `restarts` is always 0 here. A probe error of any kind makes the round not measured too (fail closed): the soak
cannot judge a round that did not run whole.

Where the spec asks for certify.multinode, `fabric_round` runs each ring's all-reduce after the round's probe Jobs,
as certify runs it (fabric.py: the Indexed Job and headless Service, or the JobSet Kueue admits under target.gang);
whatever stops it (a process that failed or hung past the Job's deadline, not admitted in time) is its round's
error, never an exception. Every object of the run carries its label, so `sweep` finds what a killed controller
left, and deletes it before a resumed one runs a round.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from gpucert.evaluate.soak_round import FabricRound, RoundEvidence
from gpucert.measure.evidence import FabricEvidence, Measurement, NcclEvidence, NodeEvidence
from gpucert.measure.targets.base import MeasurePlan
from gpucert.measure.targets.kubernetes.gang import delete_jobsets
from gpucert.measure.targets.kubernetes.runs import LABEL_RUN, cleanup_runs, run_label
from gpucert.measure.targets.kubernetes.target import KubernetesTarget
from gpucert.spec.cluster import Probe

__all__ = ["LABEL_SOAK", "KubernetesSoak"]

LABEL_SOAK = "gpucert.io/soak"


class KubernetesSoak:
    """`run_round` on a cluster: the nodes marked once, then a round of probe Jobs each time."""

    def __init__(
        self,
        target: KubernetesTarget,
        probes: Sequence[str],
        run_id: str,
        round_s: float,
        gpus: Mapping[str, int] | None = None,
        *,
        pools: Mapping[str, str] | None = None,
        rdma: Mapping[str, str] | None = None,
    ) -> None:
        self.target = target
        self.probes = tuple(Probe(p) for p in probes)
        self.run_id = run_id
        self.round_s = round_s
        self.gpus = dict(gpus or {})  # the GPUs each node's pool expects (a pod requests them all)
        self.pools = dict(pools or {})  # each node's pool
        self.rdma = dict(
            rdma or {}
        )  # each fabric pool's RDMA resource (its rails.resource): the all-reduce requests it
        self._marked: set[str] = set()
        self._round_ends = 0.0  # when the round run_round began ends (time.monotonic)

    def _mark(self, nodes: Sequence[str]) -> None:
        control = self.target.node_control(Path())  # a cluster keeps the marks on its Nodes, not in a folder
        for node in nodes:
            if node in self._marked:
                continue
            control.cordon(node)
            control.mark(
                node, labels={LABEL_SOAK: "running"}, annotations={"gpucert.io/soak-run": self.run_id}, uncordon=False
            )
            self._marked.add(node)

    @contextlib.contextmanager
    def hold(self, nodes: Sequence[str]) -> Iterator[None]:
        """Each node's Lease (the one recertification takes) for as long as the controller runs: a second soak or
        a recertification of a soaking node is refused while this one lives, and a lease of a controller that died
        lapses on its own (nodes.py). The run's own leases are taken over at once: the run folder's lock, held
        before this, makes this controller the run's only one, so they are a killed controller's of this run."""
        control = self.target.node_control(Path())
        with contextlib.ExitStack() as stack:
            for node in nodes:
                stack.enter_context(control.lock(node, f"soak {self.run_id}", reclaim=True))
            self.sweep()
            yield

    def sweep(self) -> int:
        """Delete what a controller of this run killed mid-round left (its probe and all-reduce Jobs, pods,
        Services, ConfigMaps, and JobSets under target.gang), before the first round it runs: a Ctrl-C cleans up
        on its way out, a kill cannot, and the resumed round's Jobs take the same names. Returns how many went."""
        kube, ns, label = self.target.kube, self.target.options.namespace, run_label(self.run_id)
        gone = 0
        if self.target.options.gang is not None:  # a JobSet has the name of the ConfigMap that owns it (fabric.py)
            owners = kube.pages(
                "list",
                f"configmaps in namespace {ns}",
                kube.core.list_namespaced_config_map,
                namespace=ns,
                label_selector=f"{LABEL_RUN}={label}",
            )
            gone = delete_jobsets(kube, ns, [cm["metadata"]["name"] for cm in owners])
        return gone + cleanup_runs(kube, ns, label)

    def mark(self, node: str, status: str) -> None:
        """`gpucert.io/soak=<status>` on the node: failed when it leaves the soak; pass or incomplete at the end."""
        self.target.node_control(Path()).mark(node, labels={LABEL_SOAK: status}, annotations={}, uncordon=False)

    def run_round(
        self, nodes: Sequence[str], index: int, start_h: float, end_h: float, dcgm_level: int | None = None
    ) -> Iterator[RoundEvidence]:
        began = time.monotonic()
        self._mark(nodes)
        probes = (*self.probes, *((Probe.DCGM,) if dcgm_level is not None else ()))
        plan = MeasurePlan(run_id=self.run_id, probes=probes, dcgm_level=dcgm_level or 1, gpus=self.gpus)
        measured: list[NodeEvidence] = []
        if nodes:
            self.target.measure(list(nodes), plan, measured.append)
        self._round_ends = began + self.round_s
        for ev in measured:
            yield as_round(ev, index, start_h, end_h)

    def end_round(self) -> None:
        """Wait out the round's length: its probe Jobs and its all-reduce across nodes run inside it, so a soak of
        `duration` takes that long, not that plus every round's collective."""
        wait = self._round_ends - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def fabric_round(self, nodes: Sequence[str], index: int, start_h: float, end_h: float) -> FabricRound:
        """The all-reduce across `nodes` in the round (certify.multinode): the Indexed Job certify runs, one pod per
        node, with its watchdog; its bus bandwidth at the largest size is the round's figure."""
        if len(nodes) < 2:
            return FabricRound(index, start_h, end_h, tuple(nodes), None, (), ("fewer than two nodes run",))
        plan = MeasurePlan(
            run_id=self.run_id, probes=(Probe.NCCL,), dcgm_level=1, gpus=self.gpus, pools=self.pools, rdma=self.rdma
        )
        (fabric,) = self.target.measure_fabrics([list(nodes)], plan)
        return fabric_as_round(fabric, index, start_h, end_h)


def as_round(ev: NodeEvidence, index: int, start_h: float, end_h: float) -> RoundEvidence:
    """A probe pod's evidence as a soak round: not measured unless it was collected whole."""
    errors = [f"{e.probe}: {e.message}" for e in ev.errors]
    node_measurements = {}
    if ev.nccl is not None and ev.nccl.points:
        largest = max(ev.nccl.points, key=lambda p: p.size_bytes)
        node_measurements["nccl.all_reduce"] = Measurement(unit="GB/s", samples=list(largest.busbw))
    return RoundEvidence(
        node=ev.node,
        round=index,
        start_h=start_h,
        end_h=end_h,
        collected=ev.collected and not errors,
        errors=errors if errors or ev.collected else ["the probe pod collected nothing"],
        gpus=list(ev.gpus),
        node_measurements=node_measurements,
        dcgm=ev.dcgm,
    )


def _largest(nccl: NcclEvidence | None) -> tuple[float, ...]:
    """The bus bandwidth samples at the sweep's largest size (GB/s), as the certify figure reads them."""
    if nccl is None or not nccl.points:
        return ()
    return tuple(max(nccl.points, key=lambda p: p.size_bytes).busbw)


def fabric_as_round(ev: FabricEvidence, index: int, start_h: float, end_h: float) -> FabricRound:
    """A collective's evidence as the soak's round across nodes: measured only when it was collected whole."""
    errors = tuple(f"{e.probe}: {e.message}" for e in ev.errors)
    samples = _largest(ev.nccl)
    if not ev.collected or errors or not samples:
        why = errors or ("the all-reduce across nodes measured nothing",)
        return FabricRound(index, start_h, end_h, tuple(ev.nodes), None, (), why)
    return FabricRound(index, start_h, end_h, tuple(ev.nodes), statistics.median(samples), samples)
