"""The run folder, `reports/<run-id>/`: the one owner of its layout (spelled in layout.py, with the tree of it),
every file name in it, and their readers and writers (through files.py: atomic writes, one JSON reader). Everything
else asks a RunFolder for a path or a document; no other module spells a file name of it.

Touches the file system only; what the documents mean is for their own modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucert.errors import ConfigError, EvidenceError
from gpucert.files import make_folder, read_json_object, write_atomic, write_json
from gpucert.measure.evidence import (
    FabricEvidence,
    FabricPairs,
    NodeEvidence,
    NodeIdentities,
    evidence_target,
    read_evidence,
    read_fabric,
    read_identities,
    write_document,
)
from gpucert.plan import layout
from gpucert.plan.inventory import Inventory, read_inventory, write_inventory
from gpucert.plan.layout import ENVELOPE, Mode, run_id
from gpucert.plan.pairs_files import read_all_pairs
from gpucert.plan.records import read_recertify_record, read_run_info
from gpucert.plan.runfolder_paths import copy_file, link_or_copy, new_node_file, node_file
from gpucert.spec.names import check_file_stem, check_node_name, inside
from gpucert.stack.observe import StackObservation, read_stack, write_stack

__all__ = ["ENVELOPE", "Mode", "RunFolder"]


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class _In:
    """A path in the run folder as a read-only attribute of it: `verdict_path = _In(VERDICT)` is
    `<run folder>/verdict.json`."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, folder: RunFolder, owner: type | None = None) -> Path:
        return folder.path.joinpath(*self.parts)


@dataclass(frozen=True, slots=True)
class RunFolder:
    """One run's folder. Paths are properties; documents are read and written through methods."""

    path: Path

    @classmethod
    def create(cls, reports: Path, spec: str, suffix: str | None = None) -> RunFolder:
        """A new, empty run folder `reports/<run id>` for the spec named `spec` (`-2`, `-3`, ... when the id is
        taken), with its inputs/ folder."""
        name = run_id(spec, suffix=suffix)
        make_folder(
            reports,
            not_a_folder="--reports names where run folders are created",
            cannot="cannot create the reports folder",
        )
        for n in range(1, 1000):
            path = reports / (name if n == 1 else f"{name}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise ConfigError(f"cannot create a run folder here: {exc.strerror}", path=reports) from None
            (path / layout.INPUTS).mkdir()
            return cls(path)
        raise EvidenceError("a thousand runs of this name this second: choose another --reports", path=reports)

    @property
    def id(self) -> str:
        return self.path.name

    # ---- paths ------------------------------------------------------------------------------------------------

    inputs = _In(layout.INPUTS)
    spec_copy = _In(layout.INPUTS, layout.SPEC)
    baseline_copy = _In(layout.INPUTS, layout.BASELINE)
    handover_copy = _In(layout.INPUTS, layout.HANDOVER)
    history_copy = _In(layout.INPUTS, layout.HISTORY)
    waivers_copy = _In(layout.INPUTS, layout.WAIVERS)
    gate_path = _In(layout.INPUTS, layout.GATE)
    operator_dir = _In(layout.INPUTS, layout.OPERATOR)
    base_dir = _In(layout.INPUTS, layout.BASE)
    summary_path = _In(layout.SUMMARY)
    figures_path = _In(layout.FIGURES)
    inventory_path = _In(layout.INVENTORY)
    stack_path = _In(layout.STACK)
    evidence_dir = _In(layout.EVIDENCE)
    fleet_dir = _In(layout.FLEET)
    recertify_path = _In(layout.RECERTIFY)
    preflight_path = _In(layout.PREFLIGHT)
    retest_dir = _In(layout.RETEST)
    retest_record_path = _In(layout.RETEST, layout.RETEST_RECORD)
    retest_source_path = _In(layout.RETEST, layout.RETEST_SOURCE)
    retest_kept_dir = _In(layout.RETEST, layout.RETEST_KEPT)
    verdict_path = _In(layout.VERDICT)
    run_info_path = _In(layout.RUN_INFO)
    report_path = _In(layout.REPORT)
    junit_path = _In(layout.JUNIT)
    allure_dir = _In(layout.ALLURE)
    envelope_path = _In(ENVELOPE)
    pairs_path = _In(layout.EVIDENCE, layout.MULTINODE, layout.PAIRS)

    def baseline_copy_for(self, pool: str) -> Path:
        """The SKU baseline the pool's nodes were judged against: `inputs/baselines/<pool>.yaml` when the spec had
        several pools, else `inputs/baseline.yaml`."""
        own = inside(self.inputs / layout.POOL_BASELINES, f"{check_file_stem(pool, 'pool name')}.yaml")
        return own if own.is_file() else self.baseline_copy

    def baseline_copies(self) -> list[Path]:
        """Every SKU baseline copied into inputs/ (one, or one per pool)."""
        folder = self.inputs / layout.POOL_BASELINES
        pools = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
        return [p for p in [self.baseline_copy, *pools] if p.is_file()]

    def evidence_path(self, node: str) -> Path:
        """`evidence/<node>.json`, for a node name only (EvidenceError otherwise): it never leaves evidence/."""
        return node_file(self.evidence_dir, node)

    # ---- what the folder holds --------------------------------------------------------------------------------

    @property
    def prepared(self) -> bool:
        """Whether the run was planned (inventory.json is there): the least an evaluation needs."""
        return self.inventory_path.is_file()

    @property
    def measured(self) -> bool:
        """Whether this run measured nodes (a configure-only or static run has no evidence folder)."""
        return self.evidence_dir.is_dir()

    @property
    def holds_evidence(self) -> bool:
        return self.measured and any(self.evidence_dir.iterdir())

    @property
    def mode(self) -> Mode:
        """What the run is, as run.json recorded it when the run was prepared."""
        mode = read_run_info(self).mode
        if mode not in Mode.recorded():
            raise EvidenceError(
                f"run.json names no mode of gpucert ({', '.join(Mode.recorded())}), so what the run must be judged "
                "by is unknown: not a run folder gpucert prepared",
                path=self.run_info_path,
            )
        return Mode(mode)

    @property
    def suites(self) -> tuple[str, ...]:
        """The suites that judge this run: the static gate, configure only, a certification, a recertification;
        and the waivers' own checks when run.json says the run was prepared with waivers."""
        return (*self.mode.suites, *(("waivers",) if read_run_info(self).waivers else ()))

    def check(self, digests: Mapping[str, str] | None = None) -> None:
        """The folder holds what its mode says it holds (EvidenceError naming the file otherwise): a certification
        without evidence, a recertification record added to a certification, an inventory relabelled, ...
        `digests`: its files' sha256 (relative name -> hex) as a signature read them just now (attest.sign_run),
        by which the node documents the process holds validated are known without reading them again."""
        mode, inventory = self.mode, self.read_inventory()
        self._check_contents(mode, inventory.target)
        self._check_records(mode, inventory.names)
        if mode.measures:
            self._check_evidence_targets(inventory.target, inventory.names, digests or {})

    def _check_contents(self, mode: Mode, target: str) -> None:
        """The inventory's target, evidence/ and the waivers copy agree with the mode and run.json."""
        if (mode is Mode.STATIC) != (target == "static"):
            raise EvidenceError(f"a {mode} run with an inventory of target {target!r}", path=self.inventory_path)
        if mode.measures and not self.measured:
            raise EvidenceError(f"a {mode} run without evidence/: what was measured is gone", path=self.path)
        if not mode.measures and self.measured:
            raise EvidenceError(f"a {mode} run measures nothing, yet holds evidence/", path=self.evidence_dir)
        if read_run_info(self).waivers != self.waivers_copy.exists():
            raise EvidenceError(
                "run.json and inputs/ disagree on whether the run was prepared with waivers: one was added or "
                "removed after",
                path=self.waivers_copy,
            )

    def _check_records(self, mode: Mode, inventory: list[str]) -> None:
        """A recertification and a re-test each have their record, and no other run has one."""
        if (mode is Mode.RECERTIFY) != self.recertify_path.exists():
            raise EvidenceError(
                "recertify.json belongs to a recertification run, and every recertification run has one",
                path=self.recertify_path,
            )
        if (mode is Mode.RETEST) != self.retest_record_path.exists():
            raise EvidenceError(
                "retest/record.json belongs to a re-test run, and every re-test run has one",
                path=self.retest_record_path,
            )
        if mode is Mode.RECERTIFY:
            record = read_recertify_record(self)
            node = record.node if record is not None else None
            if record is None or inventory != [node] or "handover" not in record.model_fields_set:
                raise EvidenceError(
                    f"the recertification record names node {node!r}, the inventory {inventory}: a recertification "
                    "measures exactly its node, and records its handover baseline (or null) and its fleet peers",
                    path=self.recertify_path,
                )

    def _check_evidence_targets(self, target: str, inventory: list[str], digests: Mapping[str, str]) -> None:
        """Every readable node document of the inventory was measured on the inventory's target."""
        for path in (p for p in self.evidence_files() if p.stem in inventory):
            digest = digests.get(path.relative_to(self.path).as_posix())
            try:  # one whose target reads as the inventory's needs no validation here: the evaluation validates it
                said = evidence_target(path, bytes.fromhex(digest) if digest is not None else None)
                ev = None if said == target else read_evidence(path)
            except EvidenceError:
                continue  # an unusable document is its node's finding (node.reachable), not the run's
            if ev is not None and ev.target != target:
                raise EvidenceError(
                    f"evidence of target {ev.target!r} in a run whose inventory is of target {target!r}", path=path
                )

    @property
    def signed(self) -> bool:
        return self.envelope_path.exists()

    def evidence_files(self) -> list[Path]:
        """The node documents in evidence/ (not the multi-node folder)."""
        return sorted(self.evidence_dir.glob("*.json")) if self.measured else []

    # ---- documents --------------------------------------------------------------------------------------------

    def read_inventory(self) -> Inventory:
        return read_inventory(self.inventory_path)

    def write_inventory(self, inventory: Inventory) -> None:
        write_inventory(self.inventory_path, inventory)

    def read_stack(self) -> StackObservation:
        return read_stack(self.stack_path)

    def write_stack(self, stack: StackObservation) -> None:
        write_stack(self.stack_path, stack)

    def read_evidence(self, node: str) -> NodeEvidence | None:
        """The node's evidence, None when none was written; EvidenceError when it is not the node's own."""
        path = self.evidence_path(node)
        if not path.exists() and not path.is_symlink():
            return None
        ev = read_evidence(path)
        if ev.node != node:
            raise EvidenceError(f"this file is named for {node}, but its evidence is of node {ev.node!r}", path=path)
        return ev

    def write_evidence(self, ev: NodeEvidence) -> Path:
        """Write one node's document the moment it arrives (atomically: a reader never sees half of it)."""
        path = self.evidence_path(ev.node)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_document(path, ev)

    def read_fabric(self, pool: str | None, domain: str | None = None) -> FabricEvidence | None:
        """A pool's (or its topology domain's) all-reduce across its nodes (None: a run before pools, layout)."""
        return read_fabric(self.evidence_dir.joinpath(*layout.multinode_file(pool, domain))) if self.measured else None

    def write_fabric(self, ev: FabricEvidence, pool: str, domain: str | None = None) -> Path:
        return write_document(self.evidence_dir.joinpath(*layout.multinode_file(pool, domain)), ev)

    def read_fabric_pairs(self) -> FabricPairs | None:
        """Every pair the run measured, from its round documents (or its one pairs.json: plan/pairs_files.py)."""
        return read_all_pairs(self.pairs_path.parent) if self.measured else None

    def read_recertify(self) -> dict[str, Any] | None:
        """What `gpucert recertify` wrote about the run, or None for a certification."""
        return read_json_object(self.recertify_path) if self.recertify_path.exists() else None

    def write_recertify(self, record: dict[str, Any]) -> None:
        write_json(self.recertify_path, record)

    def read_preflight(self) -> dict[str, Any] | None:
        """What the command recorded of its preflight on a kubernetes target (run, or skipped), or None."""
        return read_json_object(self.preflight_path) if self.preflight_path.exists() else None

    def write_preflight(self, record: dict[str, Any]) -> None:
        write_json(self.preflight_path, record)

    def fleet_peer_files(self) -> list[Path]:
        return sorted(self.fleet_dir.glob("*.json")) if self.fleet_dir.is_dir() else []

    def read_fleet_peers(self) -> list[NodeEvidence]:
        """Other nodes' latest evidence, copied into fleet/ by recertify: the peers a lone node is compared with."""
        return [read_evidence(p) for p in self.fleet_peer_files()]

    def add_fleet_peer(self, node: str, source: Path) -> None:
        self.fleet_dir.mkdir(exist_ok=True)
        copy_file(source, inside(self.fleet_dir, f"{check_node_name(node)}.json"))

    def read_retest(self) -> dict[str, Any] | None:
        """What `gpucert certify --retest` recorded: the source run, each node measured and why, each carried."""
        return read_json_object(self.retest_record_path) if self.retest_record_path.exists() else None

    def write_retest(self, record: dict[str, Any]) -> None:
        self.retest_dir.mkdir(exist_ok=True)
        write_json(self.retest_record_path, record)

    def write_identities(self, evs: list[NodeEvidence]) -> Path:
        """The identities a re-test read from the nodes it may carry, as each answered, in one document
        (`retest/identity.json`); durable with the carried copies at the re-test's one sync before its record
        (files.write_atomic's durable=False)."""
        doc = NodeIdentities(nodes=evs)
        return write_document(self.retest_dir / layout.IDENTITIES, doc, durable=False)

    def read_identities(self) -> list[NodeEvidence]:
        """Every identity the re-test read: its one document, or in a re-test written before it, each node's own
        (`retest/identity/<node>.json`); none for a run that read none."""
        doc = read_identities(self.retest_dir / layout.IDENTITIES)
        if doc is not None:
            return doc.nodes
        folder = self.retest_dir / layout.IDENTITY
        return [read_evidence(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []

    def read_identity(self, node: str) -> NodeEvidence | None:
        return next((ev for ev in self.read_identities() if ev.node == node), None)

    def carry_evidence(self, node: str, source: Path) -> Path:
        """A passing node's evidence from an earlier run, byte for byte (its digest stays the one signed there): a
        hard link to the signed file where the file system allows, else a copy of it (`link_or_copy`); made
        durable by the re-test's one sync before its record."""
        path = new_node_file(self.evidence_dir, node)
        link_or_copy(source, path)
        return path

    def write_summary(self, markdown: str) -> None:
        write_atomic(self.summary_path, markdown)

    def write_figures(self, data: bytes) -> None:
        write_atomic(self.figures_path, data)

    def read_verdict(self) -> dict[str, Any]:
        return read_json_object(self.verdict_path)

    def write_verdict(self, verdict: dict[str, Any]) -> None:
        write_json(self.verdict_path, verdict)

    def read_run_info(self) -> dict[str, Any]:
        return read_json_object(self.run_info_path) if self.run_info_path.exists() else {}

    def write_intent(self, *, spec: str, mode: Mode, reevaluates: str | None = None, waivers: bool = False) -> None:
        """run.json as the run is prepared: what it is (its mode decides the suites that judge it) and of which
        spec, and whether it was prepared with waivers (their own checks judge it then); a re-evaluation keeps the
        mode of the run it re-evaluates and names that run."""
        from gpucert.resources import made_by

        if mode not in Mode.recorded():
            raise ValueError(f"run.json records what a run is, not how it was prepared: {mode!r}")
        info = {
            "run": self.id,
            "spec": spec,
            "mode": str(mode),
            "reevaluates": reevaluates,
            "waivers": waivers,
            "started": _iso(datetime.now(UTC)),
            **made_by(),
        }
        write_json(self.run_info_path, info)

    def write_run_info(self, *, spec: str, target: str, started: float, finished: float) -> None:
        """run.json at the end of the evaluation: when the run ran and with which gpucert (its mode is kept)."""
        from gpucert.resources import made_by

        info = {
            **self.read_run_info(),
            "run": self.id,
            "spec": spec,
            "target": target,
            "started": _iso(datetime.fromtimestamp(started, UTC)),
            "finished": _iso(datetime.fromtimestamp(finished, UTC)),
            **made_by(),
        }
        write_json(self.run_info_path, info)

    def judged_by(self, spec: Path, baselines: dict[str, Path]) -> None:
        """The spec and each pool's baseline given to evaluate this folder are the ones it was prepared with
        (inputs/, signed with the run): a run judged against another spec than the one it records would sign a lie."""
        kept_for = {pool: self.baseline_copy_for(pool) for pool in baselines}
        for given, kept in ((spec, self.spec_copy), *((baselines[p], k) for p, k in kept_for.items())):
            if not kept.is_file():
                raise EvidenceError(f"no {kept.name} in inputs/: not a run folder gpucert prepared", path=self.path)
            if given.read_bytes() != kept.read_bytes():
                name = kept.relative_to(self.inputs).as_posix()
                raise EvidenceError(
                    f"{given} is not the {kept.name} this run was prepared with (inputs/{name}): evaluate a run "
                    "with its own inputs, or re-evaluate its evidence under another spec with --evidence",
                    path=self.path,
                )

    def copy_inputs(self, spec: Path | None, baselines: dict[str, Path], waivers: Path | None = None) -> None:
        """The spec, SKU baselines and waivers as the run used them: signed with it, so the judgement can be re-done.
        One pool's baseline is `inputs/baseline.yaml`; several pools' are `inputs/baselines/<pool>.yaml`."""
        if spec is not None:
            copy_file(spec, self.spec_copy)
        if waivers is not None:
            copy_file(waivers, self.waivers_copy)
        if len(baselines) == 1:
            (baseline,) = baselines.values()
            if baseline.exists():
                copy_file(baseline, self.baseline_copy)
            return
        folder = self.inputs / layout.POOL_BASELINES
        folder.mkdir(exist_ok=True)
        for pool, baseline in baselines.items():
            if baseline.exists():
                copy_file(baseline, inside(folder, f"{check_file_stem(pool, 'pool name')}.yaml"))

    def read_gate(self) -> dict[str, Any] | None:
        """What the static gate was given (inputs/gate.json), or None for a gate of the recipe alone."""
        return read_json_object(self.gate_path) if self.gate_path.exists() else None

    def write_gate(self, record: dict[str, Any]) -> None:
        write_json(self.gate_path, record)

    def add_gate_input(self, folder: Path, name: str, content: bytes) -> Path:
        """A gate input (an operator file, a baseline at the base ref) copied under inputs/, signed with the run."""
        folder.mkdir(exist_ok=True)
        return write_atomic(inside(folder, check_file_stem(name, "file name")), content)

    def copy_handover(self, source: Path) -> None:
        copy_file(source, self.handover_copy)

    def spec_name(self) -> str | None:
        """The spec (metadata.name) the run was certified under, from run.json or verdict.json."""
        for path in (self.run_info_path, self.verdict_path):
            try:
                name = read_json_object(path).get("spec") if path.exists() else None
            except EvidenceError:
                continue
            if isinstance(name, str):
                return name
        return None
