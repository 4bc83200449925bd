"""Re-test (`gpucert certify SPEC --retest RUN_DIR`): measure again only what did not pass, carry the rest over.

A node is measured again when it did not pass in the source run, is new, shows a changed identity (a GPU's serial,
UUID, VBIOS or bus id, the count of its GPUs, or the driver, read from the stack and by a light NVML read of
every node to be carried), or its evidence is older than `acceptance.maxEvidenceAge`. Every other node's evidence is
carried over byte for byte, with its provenance (source run, file digest, when it was measured, its age), together
with the source run's signed envelope: the new folder is complete for evaluation, and `verify` checks each carried
file against the digest the source run signed for it. The source must verify before anything is carried. The
fabric's pairs of two carried nodes are carried too, so the fabric stage measures only the pairs with a node measured
again (acceptance/retest_pairs.py).

Touches the run folders (through RunFolder) and, for the identity read, the target; the choices are pure functions.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.acceptance.retest_kept import keep_source_records
from gpucert.acceptance.retest_pairs import carried_pairs_problems, carry_pairs
from gpucert.errors import ConfigError, EvidenceError, GpucertError
from gpucert.evaluate.held import heads_of, parse_figures
from gpucert.files import sync
from gpucert.measure.evidence import NodeEvidence
from gpucert.measure.targets.base import IdentityTarget, MeasurePlan, Target
from gpucert.plan import layout
from gpucert.plan.carried_pairs import read_carried
from gpucert.plan.inventory import Inventory
from gpucert.plan.records import (
    RETEST_SCHEMA,
    Carried,
    RetestRecord,
    RetestSource,
    read_retest_record,
    read_run_info,
)
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.verdict import node_passed
from gpucert.report.verdict_model import Verdict, read_verdict
from gpucert.resources import code_digest
from gpucert.spec.cluster import ClusterSpec, Probe, load_spec
from gpucert.stack.observe import StackObservation

__all__ = [
    "RETEST_SCHEMA",
    "IdentityTarget",
    "Source",
    "choose",
    "identity_change",
    "open_source",
    "prepare_retest",
    "read_retest_record",
    "verify_carried",
]

MAX_CHANGES_NAMED = 4


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp).astimezone(UTC)
    except ValueError:
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Source:
    """The run re-tested, verified: its folder, verdict, what it signed for each file, and its certificate."""

    folder: RunFolder
    verdict: Verdict
    signed: dict[str, str]  # relative name -> sha256, from its signed statement
    certificate: str  # sha256:<hex> of its envelope
    signer: str | None  # the fingerprint of the given key that verified it (None: no key was given)
    read: dict[str, NodeEvidence | None] = field(default_factory=dict, compare=False, repr=False)
    # its nodes' evidence held by their heads (evaluate/held.py), where the same code wrote its figures.json
    heads: dict[str, NodeEvidence] = field(default_factory=dict, compare=False, repr=False)

    @property
    def run(self) -> str:
        return self.verdict.run

    def evidence(self, node: str) -> NodeEvidence | None:
        """The node's evidence in the source run, read once (choosing, comparing identities and the provenance each
        ask: at fleet scale three reads of every carried node were most of a re-test's preparation)."""
        if node not in self.read:
            self.read[node] = self.heads[node] if node in self.heads else self.folder.read_evidence(node)
        return self.read[node]


def open_source(path: Path, spec: ClusterSpec, keys: list[Ed25519PublicKey]) -> Source:
    """The source run of a re-test, refused (exit 2) unless it is a signed certification of this spec and SKU
    baseline whose files still match what was signed (and whose signature one of `keys` made, when given)."""
    try:
        folder = RunFolder(path.resolve(strict=True))
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"--retest: cannot open the run folder: {exc}", path=path) from None
    if not folder.prepared or not folder.measured or not folder.verdict_path.is_file():
        raise ConfigError("--retest needs a completed, measured run folder written by `gpucert certify`", path=path)
    if folder.recertify_path.exists():
        raise ConfigError("--retest needs a certification of the cluster, not a recertification of a node", path=path)
    if not folder.envelope_path.exists():
        raise ConfigError(
            "--retest carries evidence over only from a signed run (its digests are what the new run trusts): "
            "sign it with `gpucert sign RUN --key KEY` first",
            path=path,
        )
    env = attest.read_envelope(folder.envelope_path)
    signer = None
    if keys:
        signer = next((c.verified_by for c in env.check(keys) if c.verified_by), None)
        if signer is None:
            raise ConfigError(
                f"{env.path} is not signed by the key signing this re-test ({attest.fingerprint(keys[0])}): "
                "give a run signed with the same key",
                path=path,
            )
    signed = env.signed_digests()
    bad = sorted(n for n, d in signed.items() if not (folder.path / n).is_file() or _sha256(folder.path / n) != d)
    if bad:
        raise EvidenceError(
            f"--retest: the run no longer matches what it signed ({', '.join(bad[:5])}): nothing is carried from a "
            "run that does not verify",
            path=path,
        )
    verdict = read_verdict(folder)
    if verdict.spec != spec.metadata.name:
        raise ConfigError(f"--retest: that run certified spec {verdict.spec!r}, not {spec.metadata.name!r}", path=path)
    _same_judgement(folder, spec, path)
    certificate = "sha256:" + _sha256(folder.envelope_path)
    return Source(folder, verdict, signed, certificate, signer, heads=_heads(folder, signed, signer))


def _heads(folder: RunFolder, signed: dict[str, str], signer: str | None) -> dict[str, NodeEvidence]:
    """The source's nodes held by their heads (evaluate/held.py) where the same code wrote its signed figures.json
    and a key given to this re-test verified it (its bytes hashed again as read: open_source checked the files a moment
    before): choosing reads their identity and times, not their documents. Else none (each document is read)."""
    if signer is None or layout.FIGURES not in signed:
        return {}
    try:
        if read_run_info(folder).gpucert_code != code_digest():
            return {}
        data = folder.figures_path.read_bytes()  # the bytes signed, hashed as read: not a file swapped since
        if hashlib.sha256(data).hexdigest() != signed[layout.FIGURES]:
            return {}
        doc = parse_figures(data, folder.figures_path)
        names = {node: folder.evidence_path(node) for node in doc.nodes}
    except (GpucertError, OSError, ValueError):
        return {}
    evidence = {}
    for node, path in names.items():
        digest = signed.get(path.relative_to(folder.path).as_posix())
        if digest is not None:
            evidence[node] = (path, digest)
    return dict(heads_of(doc, evidence))  # NodeEvidence values (dict is invariant)


def _same_judgement(folder: RunFolder, spec: ClusterSpec, path: Path) -> None:
    """Carried evidence is judged again under this spec: it must be the SKU baseline, probes and DCGM level the
    evidence was measured for."""
    for pool, baseline in spec.baseline_paths().items():
        copy = folder.baseline_copy_for(pool)
        if not copy.is_file() or _sha256(copy) != _sha256(baseline):
            raise ConfigError(
                f"--retest: that run judged pool {pool!r} against another SKU baseline than the spec names; re-test "
                "under the baselines of the run, or certify the whole cluster again",
                path=path,
            )
    then = load_spec(folder.spec_copy)
    for key, was, now in (
        ("certify.probes", _probes(then), _probes(spec)),
        ("certify.dcgm.level", then.certify.dcgm.level, spec.certify.dcgm.level),
        ("pools", _expectations(then), _expectations(spec)),
    ):
        if was != now:
            raise ConfigError(
                f"--retest: the run was measured with {key} {was}, the spec says {now}: carried evidence would not "
                "hold what the spec asks; certify the whole cluster again",
                path=spec.path,
                key=key,
            )


def _probes(spec: ClusterSpec) -> str:
    """The spec's probes as YAML says them (`[compute, health]`), never as Python's enum reprs."""
    return f"[{', '.join(sorted(p.value for p in spec.certify.probes))}]"


def _expectations(spec: ClusterSpec) -> dict[str, tuple[dict[str, str], int, str]]:
    """What each pool expects of its nodes (selector, GPUs per node, product): carried evidence holds only under
    the same."""
    return {p.name: (p.node_selector, p.expect.gpus_per_node, p.expect.gpu_product) for p in spec.pools}


def identity_change(then: NodeEvidence, now: NodeEvidence | None) -> str | None:
    """What differs between a node's identity in the source run and read now (None: the same node, GPU for
    GPU). An identity that cannot be read is a change: the node is measured again (fail closed)."""
    if now is None or not now.collected:
        why = "; ".join(e.message for e in now.errors) if now is not None else "no answer"
        return f"its identity could not be read now ({why or 'the probe did not run'})"
    changes: list[str] = []
    if then.system.driver_version != now.system.driver_version:
        changes.append(f"driver {then.system.driver_version} -> {now.system.driver_version}")
    if len(then.gpus) != len(now.gpus):
        changes.append(f"{len(then.gpus)} GPUs -> {len(now.gpus)}")
    for g in then.gpus:
        n = now.gpu(g.index)
        if n is None:
            continue
        for what, a, b in (
            ("serial", g.serial, n.serial),
            ("UUID", g.uuid, n.uuid),
            ("VBIOS", g.vbios, n.vbios),
            ("PCI bus id", g.pci_bus_id, n.pci_bus_id),
        ):
            if a != b:
                changes.append(f"gpu{g.index} {what} {a} -> {b}")
    if not changes:
        return None
    more = len(changes) - MAX_CHANGES_NAMED
    return "changed: " + "; ".join(changes[:MAX_CHANGES_NAMED]) + (f" (and {more} more)" if more > 0 else "")


def _driver(stack: StackObservation, node: str) -> str | None:
    ns = stack.nodes.get(node)
    comp = ns.components.get("driver") if ns is not None else None
    return comp.version if comp is not None else None


def choose(
    nodes: list[str],
    source: Source,
    stack_now: StackObservation,
    now: datetime,
    max_age_s: int | None,
) -> tuple[dict[str, str], list[str]]:
    """The nodes to measure again (node -> why), and the candidates to carry once their identity is read."""
    results = source.verdict.nodes
    stack_then = source.folder.read_stack()
    measure: dict[str, str] = {}
    candidates: list[str] = []
    for node in nodes:
        r = results.get(node)
        if r is None:
            measure[node] = f"new: not in {source.run}"
            continue
        if not r.passed_result:
            failing = ", ".join(r.failing) or "checks that did not run"
            measure[node] = f"did not pass in {source.run} ({r.result}: {failing})"
            continue
        try:
            ev = source.evidence(node)
        except EvidenceError as exc:
            measure[node] = f"its evidence in {source.run} cannot be used: {exc}"
            continue
        if ev is None or not ev.collected:
            measure[node] = f"not measured in {source.run}"
            continue
        then_driver, now_driver = _driver(stack_then, node), _driver(stack_now, node)
        if then_driver != now_driver:
            measure[node] = f"changed: driver {then_driver} -> {now_driver} (the cluster's stack)"
            continue
        measured = _when(ev.finished)
        if measured is None:
            measure[node] = f"when its evidence was measured cannot be read ({ev.finished!r})"
            continue
        age = (now - measured).total_seconds()
        if max_age_s is not None and age > max_age_s:
            measure[node] = (
                f"stale: measured {age / 86400:.1f} days ago ({ev.finished}), more than acceptance.maxEvidenceAge"
            )
            continue
        candidates.append(node)
    return measure, candidates


def _provenance(source: Source, node: str, now: datetime, before: RetestRecord | None) -> Carried:
    """Where a carried node's evidence comes from; `before` is the source's own re-test record (None: a full run).
    Its digest is the one the source signed for the file, which open_source found the file to match: hashed again
    here it was a second read of every carried file (a copy that then differs is refused by verify and sign)."""
    name = source.folder.evidence_path(node).relative_to(source.folder.path).as_posix()
    ev = source.evidence(node)
    assert ev is not None
    earlier = before.carried.get(node) if before is not None else None  # carried again: first measured there
    measured = _when(ev.finished)
    return Carried(
        run=source.run,
        measured_in=earlier.measured_in if earlier is not None else source.run,
        file=name,
        sha256=source.signed.get(name) or _sha256(source.folder.path / name),
        measured=ev.finished,
        age_seconds=int((now - measured).total_seconds()) if measured is not None else None,
    )


def prepare_retest(
    target: Target,
    inventory: Inventory,
    spec: ClusterSpec,
    folder: RunFolder,
    source: Source,
    *,
    stack: StackObservation | None = None,
) -> dict[str, str]:
    """Decide what to measure, read the identity of every node that may be carried, carry the others over with
    their provenance and the source's envelope, and write `retest/record.json`. Returns the nodes to measure.
    `stack`: the cluster's now, as the plan wrote it to stack.json (None: read from there)."""
    now = datetime.now(UTC)
    stack_now = folder.read_stack() if stack is None else stack
    measure, candidates = choose(inventory.names, source, stack_now, now, spec.acceptance.max_evidence_age_s)
    identities: dict[str, NodeEvidence] = {}

    def sink(ev: NodeEvidence) -> None:
        identities[ev.node] = ev

    if candidates:  # NVML only: serials, UUIDs, VBIOS, bus ids and the driver, no load on the GPUs
        plan = MeasurePlan(run_id=folder.id, probes=(Probe.HEALTH,), dcgm_level=spec.certify.dcgm.level)
        if isinstance(target, IdentityTarget):
            target.read_identities(candidates, plan, sink)
        else:
            target.measure(candidates, plan, sink)
    if identities:  # one document, not a file a node: at fleet scale the files' creation was most of the read
        folder.write_identities(list(identities.values()))
    carried: dict[str, Carried] = {}
    before = read_retest_record(source.folder)  # once, not once a node: a re-test's record names every carried node
    for node in candidates:
        then = source.evidence(node)
        assert then is not None
        why = identity_change(then, identities.get(node))
        if why is not None:
            measure[node] = why
        else:
            carried[node] = _provenance(source, node, now, before)
    folder.retest_dir.mkdir(exist_ok=True)
    shutil.copyfile(source.folder.envelope_path, folder.retest_source_path)
    keep_source_records(source.folder, folder)  # what its carried nodes' signed decisions are held to (retest_kept)
    for node, entry in carried.items():  # from the file its provenance names (found inside the source's evidence/)
        folder.carry_evidence(node, source.folder.path / entry.file)
    # the pairs of two carried nodes too: the fabric stage then measures only the pairs with a node measured again;
    # not where the source failed a check of the fabric as a whole (a pair of racks: their uplink), which rests on
    # pairs of carried nodes that only measuring them again can clear
    if not _fabric_failed_as_a_whole(source.verdict):
        carried_nodes = [n for n in inventory.names if n in carried]
        carry_pairs(source.folder, source.run, source.signed, spec, folder, carried_nodes)
    # the identity document and the carried copies, written without a sync each (4,116 fsyncs at 1,024 nodes),
    # reach the disk together before the record that names them: a crash before it leaves no record, so no re-test
    sync()
    record = RetestRecord(
        source=RetestSource(
            run=source.run, certificate=source.certificate, result=source.verdict.result, signer=source.signer
        ),
        at=_iso(now),
        max_evidence_age=spec.acceptance.max_evidence_age,
        measured={n: measure[n] for n in inventory.names if n in measure},
        carried=carried,
        absent=tuple(sorted(set(source.verdict.nodes) - set(inventory.names))),
    )
    folder.write_retest(record.to_json())
    return measure


def _fabric_failed_as_a_whole(verdict: Verdict) -> bool:
    """Whether the run failed (or could not decide) a fabric check of no single node: a pair of racks' bandwidth,
    a pool's transport."""
    return any(
        f.node is None and f.check.startswith("fabric.") and f.status in ("fail", "error") for f in verdict.findings
    )


def verify_carried(run_dir: Path, keys: list[Ed25519PublicKey] | None) -> list[str]:
    """Problems with a re-test's carried evidence: each carried file must be, byte for byte, what its source run
    signed for that node (its envelope travels in retest/), signed by one of `keys` (None: by whichever key, as
    `sign` asks it, which knows no verifier's keys), and a node that passed there. [] for a run that carried nothing
    (carried pairs without a re-test record are a problem)."""
    folder = RunFolder(run_dir)
    try:
        record = read_retest_record(folder)
    except EvidenceError as exc:
        return [f"carried: the re-test record cannot be read: {exc}"]
    if record is None:
        try:
            read_carried(folder)  # carried pairs of no re-test: an error naming carried.json
        except EvidenceError as exc:
            return [f"carried: {exc}"]
        return []
    try:
        env = attest.read_envelope(folder.retest_source_path)
        signed = env.signed_digests()
        statement = env.statement()
    except EvidenceError as exc:
        return [f"carried: the source run's certificate cannot be read: {exc}"]
    source = record.source
    problems = []
    if keys is not None and not any(c.verified_by for c in env.check(keys)):
        problems.append(
            f"carried: the certificate of the source run {source.run} (retest/source.intoto.json) is signed "
            "by none of the given keys: its evidence cannot be trusted"
        )
    if "sha256:" + _sha256(folder.retest_source_path) != source.certificate:
        problems.append("carried: retest/source.intoto.json is not the certificate the re-test record names")
    passed = statement.get("predicate", {}).get("nodes", {})
    for node, entry in sorted(record.carried.items()):
        problems += _carried_problems(folder, source.run, node, entry, signed, passed.get(node))
    return problems + carried_pairs_problems(folder, record, signed)


def _carried_problems(
    folder: RunFolder, source: str, node: str, entry: Carried, signed: dict[str, str], result: object
) -> list[str]:
    """One carried node: its file is what the source run signed and what the record names, and it passed there."""
    try:
        path = folder.evidence_path(node)
    except EvidenceError as exc:
        return [f"carried: {exc}"]
    problems = []
    name = path.relative_to(folder.path.resolve()).as_posix()  # as the statement names it
    actual = _sha256(path) if path.is_file() and not path.is_symlink() else None
    if actual is None or actual != signed.get(name) or actual != entry.sha256:
        problems.append(
            f"carried: {name} is not the evidence run {source} signed for {node} (sha256 "
            f"{(actual or 'missing')[:16]}..., signed {str(signed.get(name))[:16]}...): swapped or altered"
        )
    if not node_passed(result):
        problems.append(f"carried: {node} did not pass in {source} ({result}), yet was carried")
    return problems
