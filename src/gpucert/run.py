"""A run folder and the two phases that fill it before evaluation: plan and measure.

`reports/<run-id>/` holds inputs/ (the spec and baseline as used), inventory.json, stack.json and
evidence/<node>.json, each written as soon as it is known, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from gpucert import __version__
from gpucert.baseline import GpuBaseline, check_baseline_for, load_baseline
from gpucert.errors import EvidenceError, IncompleteRunError
from gpucert.evidence import (
    FabricEvidence,
    FabricPairs,
    NodeEvidence,
    ProbeError,
    read_evidence,
    read_fabric,
    read_fabric_pairs,
    write_evidence,
    write_fabric,
    write_fabric_pairs,
)
from gpucert.inventory import Inventory, read_inventory, write_inventory
from gpucert.names import NameError_, check_node_name
from gpucert.spec import ClusterSpec, load_spec
from gpucert.stack.observe import StackObservation, inventory_from_nodes, observe_stack, read_stack, write_stack
from gpucert.targets.base import FabricTarget, MeasurePlan, Target

__all__ = [
    "create_run_dir",
    "evidence_root",
    "import_evidence",
    "load_inputs",
    "measure",
    "neighbour_pairs",
    "new_run_dir",
    "plan",
    "plan_and_measure",
    "plan_static",
]

Progress = Callable[[NodeEvidence], None]


def load_inputs(spec_path: Path) -> tuple[ClusterSpec, GpuBaseline]:
    """The spec and its SKU baseline, each validated alone and against the other (ConfigError, exit 2)."""
    spec = load_spec(spec_path)
    path = spec.resolve(spec.certify.baseline, "certify.baseline")
    baseline = load_baseline(path)
    check_baseline_for(spec, baseline, path)
    return spec, baseline


def create_run_dir(reports: Path, spec: ClusterSpec, suffix: str | None = None) -> Path:
    """A new, empty `reports/<run-id>/`, with the spec and baseline it runs under copied into inputs/."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    base = f"{stamp}-{spec.metadata.name}" + (f"-{suffix}" if suffix else "")
    reports.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        run_dir = reports / (base if n == 1 else f"{base}-{n}")
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            continue
    inputs = run_dir / "inputs"
    inputs.mkdir()
    if spec.path is not None:
        shutil.copy2(spec.path, inputs / "spec.yaml")
    baseline = spec.resolve(spec.certify.baseline)
    if baseline.exists():
        shutil.copy2(baseline, inputs / "baseline.yaml")
    return run_dir


@contextlib.contextmanager
def new_run_dir(reports: Path, spec: ClusterSpec, suffix: str | None = None) -> Iterator[Path]:
    """A new run folder for the block; if the block fails before any node was measured, the folder goes again, so a
    bad input or a cluster that cannot be reached leaves no empty run behind (measured evidence always stays)."""
    existed = reports.exists()
    run_dir = create_run_dir(reports, spec, suffix)
    try:
        yield run_dir
    except BaseException:
        evidence = run_dir / "evidence"
        if not (evidence.is_dir() and any(evidence.iterdir())):
            shutil.rmtree(run_dir, ignore_errors=True)
            if not existed:
                with contextlib.suppress(OSError):
                    reports.rmdir()  # only if empty: a reports folder this run created for nothing goes too
        raise


def plan_and_measure(
    spec: ClusterSpec, run_dir: Path, *, plan_only: bool = False, progress: Progress | None = None
) -> Inventory:
    """Open the spec's target, plan into `run_dir`, and measure every node unless `plan_only`."""
    from gpucert.targets import open_target

    target = open_target(spec)
    inventory = plan(target, spec, run_dir)
    if not plan_only:
        measure(target, inventory, spec, run_dir, progress)
    return inventory


def plan(target: Target, spec: ClusterSpec, run_dir: Path) -> Inventory:
    """Ask the target what it has; write stack.json and inventory.json."""
    nodes, pods = target.observe()
    stack = observe_stack(nodes, pods, spec.stack.sources())
    for name in stack.nodes:
        try:
            check_node_name(name)
        except NameError_ as exc:
            raise IncompleteRunError(
                f"the {target.kind} target reported a node named {name!r}: {exc}; gpucert will not use it as a "
                "file name. Check what answers for the cluster"
            ) from None
    policy = getattr(target, "cluster_policy", None)
    if policy is not None:
        stack = stack.model_copy(update={"cluster_policy": policy})
    write_stack(run_dir / "stack.json", stack)
    inventory = inventory_from_nodes(target.kind, stack)
    write_inventory(run_dir / "inventory.json", inventory)
    return inventory


def plan_static(run_dir: Path) -> None:
    """A run with no cluster: an empty inventory and stack, so only the spec itself is checked."""
    write_stack(run_dir / "stack.json", StackObservation(nodes={}))
    write_inventory(run_dir / "inventory.json", Inventory(target="static", nodes=()))


def measure(
    target: Target, inventory: Inventory, spec: ClusterSpec, run_dir: Path, progress: Progress | None = None
) -> None:
    """Measure every node of the inventory; each node's evidence lands on disk the moment it arrives."""
    evidence_dir = run_dir / "evidence"
    evidence_dir.mkdir(exist_ok=True)
    measure_plan = MeasurePlan(
        run_id=run_dir.name, probes=tuple(spec.certify.probes), dcgm_level=spec.certify.dcgm.level
    )

    collected: list[str] = []

    def sink(ev: NodeEvidence) -> None:
        write_evidence(evidence_dir, ev)
        if ev.collected and ev.gpus:  # a node with no GPU to offer is no member of a collective
            collected.append(ev.node)
        if progress is not None:
            progress(ev)

    target.measure(inventory.names, measure_plan, sink)
    multinode = spec.certify.multinode
    if multinode is not None:
        order = {n: i for i, n in enumerate(inventory.names)}
        nodes = sorted(collected, key=order.__getitem__)[: multinode.max_nodes]
        write_fabric(evidence_dir, measure_fabric(target, nodes, measure_plan))
        if multinode.pairs and len(nodes) >= 3 and isinstance(target, FabricTarget):
            done: list[FabricEvidence] = []
            for rnd in neighbour_pairs(nodes):
                done += target.measure_fabrics(rnd, measure_plan)
                write_fabric_pairs(evidence_dir, FabricPairs(pairs=done))


def neighbour_pairs(nodes: list[str]) -> list[list[list[str]]]:
    """Every pair of neighbours on the ring of `nodes`, in rounds where no node is in two pairs at once."""
    pairs = [[nodes[i], nodes[(i + 1) % len(nodes)]] for i in range(len(nodes) if len(nodes) > 2 else 1)]
    rounds: list[list[list[str]]] = []
    for pair in pairs:
        free = next((r for r in rounds if not any(n in g for g in r for n in pair)), None)
        if free is None:
            rounds.append([pair])
        else:
            free.append(pair)
    return rounds


def measure_fabric(target: Target, nodes: list[str], plan: MeasurePlan) -> FabricEvidence:
    """The all-reduce across `nodes`, or a document that says why it could not run."""
    if len(nodes) >= 2 and isinstance(target, FabricTarget):
        return target.measure_fabrics([nodes], plan)[0]
    why = (
        f"{len(nodes)} node(s) could be measured: an all-reduce across nodes needs at least two"
        if len(nodes) < 2
        else f"the {target.kind} target measures one host: there is no fabric between nodes to measure"
    )
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return FabricEvidence(
        run_id=plan.run_id,
        target=target.kind,
        probe_version=__version__,
        started=now,
        finished=now,
        nodes=nodes,
        gpus_per_node=0,
        collected=False,
        errors=[ProbeError(probe="nccl", message=why, unavailable=True)],
    )


def evidence_root(source: Path) -> Path:
    """The run folder holding recorded evidence given as the folder or its evidence/ folder."""
    try:
        src = source.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise EvidenceError(f"cannot open: {exc}", path=source) from None
    if not src.is_dir():
        raise EvidenceError("--evidence needs a run folder or its evidence/ folder, got a file", path=src)
    root = src.parent if src.name == "evidence" else src
    if not (root / "evidence").is_dir() or not (root / "inventory.json").is_file():
        raise EvidenceError("not a gpucert run folder (expected inventory.json, stack.json and evidence/)", path=src)
    return root


def _copy_regular(src: Path, dst: Path) -> None:
    """Copy a file or a folder of files; a link or anything else that is not a plain file or folder is refused,
    so recorded evidence cannot pull in a file from outside its folder."""
    if src.is_symlink() or not (src.is_file() or src.is_dir()):
        raise EvidenceError("not a plain file or folder (links are refused in recorded evidence)", path=src)
    if src.is_file():
        shutil.copy2(src, dst)
        return
    dst.mkdir()
    for child in sorted(src.iterdir()):
        _copy_regular(child, dst / child.name)


def _check_recorded(run_dir: Path) -> None:
    """Recorded evidence is an input like a spec: every document must be one gpucert wrote, of the node it is
    named for, or the re-evaluation stops with the file named (EvidenceError, exit 2)."""
    read_inventory(run_dir / "inventory.json")
    read_stack(run_dir / "stack.json")
    for path in sorted((run_dir / "evidence").iterdir()):
        if path.is_dir() and path.name == "multinode":
            read_fabric(path.parent)
            read_fabric_pairs(path.parent)
            continue
        if path.suffix != ".json" or not path.is_file():
            raise EvidenceError("not an evidence document (evidence/ holds <node>.json and multinode/)", path=path)
        try:
            check_node_name(path.stem)
        except NameError_ as exc:
            raise EvidenceError(str(exc), path=path) from None
        ev = read_evidence(path)
        if ev.node != path.stem:
            raise EvidenceError(
                f"this file is named for {path.stem}, but its evidence is of node {ev.node!r}", path=path
            )


def import_evidence(source: Path, run_dir: Path) -> None:
    """Copy recorded evidence (a run folder, or its evidence/ folder) into a new run folder for re-evaluation."""
    root = evidence_root(source)
    try:
        for name in ("inventory.json", "stack.json"):
            if not (root / name).exists():
                raise EvidenceError(f"missing {name}; pass a complete run folder", path=root)
            _copy_regular(root / name, run_dir / name)
        _copy_regular(root / "evidence", run_dir / "evidence")
        _check_recorded(run_dir)
    except EvidenceError as exc:
        shutil.rmtree(run_dir / "evidence", ignore_errors=True)  # nothing was measured: the run folder goes
        raise EvidenceError(str(exc).replace(str(run_dir), str(root))) from None  # name the user's file
    # a recertification's run: what the node was compared with comes along, so it re-evaluates the same
    if (root / "recertify.json").exists():
        _copy_regular(root / "recertify.json", run_dir / "recertify.json")
        if (root / "fleet").is_dir():
            _copy_regular(root / "fleet", run_dir / "fleet")
        if (root / "inputs" / "handover.yaml").exists():
            _copy_regular(root / "inputs" / "handover.yaml", run_dir / "inputs" / "handover.yaml")
