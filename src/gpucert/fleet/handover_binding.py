"""Where a spec's handover baselines live, and the proof that one holds the figures its signed run measured.

Handover baselines are per spec (`baselines/nodes/<spec>/<node>.yaml`, under the root `--handover` names): two
specs with the same node names do not share them. A handover baseline is bound to the run it was recorded from
(`recorded.run`, and `recorded.certificate`, the digest of that run's certificate): recertification finds that run,
checks its certificate is the one named and signed by a key it was given, checks the node's evidence and SKU
baseline are the files that certificate signed, and recomputes the figures from that evidence. A file whose
figures were edited, or that no signed run stands behind, is refused: a node is never held to weaker figures than
it measured.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.errors import ConfigError, EvidenceError
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.spec.handover import NodeBaseline, node_baseline_of
from gpucert.spec.names import NameError_, inside

__all__ = ["NODES_DIR", "handover_dir", "spec_nodes_dir", "trusted_keys", "verify_handover"]

NODES_DIR = Path("baselines") / "nodes"


def _under_file(path: Path) -> bool:
    return any(p.is_file() for p in path.parents)


def spec_nodes_dir(root: Path, spec_name: str | None, path: Path) -> Path:
    """`root/<spec>/`, where `baseline record` files the run at `path`'s baselines (ConfigError when the run names
    no spec a folder could be named after)."""
    try:
        return inside(root, spec_name or "")
    except NameError_ as exc:
        raise ConfigError(f"the run names no spec to file its baselines under ({exc})", path=path) from None


def handover_dir(given: str | None, spec_name: str, key: str = "--handover") -> Path:
    """The folder of a spec's handover baselines: `<root>/<spec>/`, the root `given` (which must then be a
    folder) or baselines/nodes. A spec's nodes are held only to the baselines recorded under that spec."""
    if given is None:
        return NODES_DIR / spec_name
    path = Path(given)
    if path.is_dir():
        return path / spec_name
    why = "is under a file" if _under_file(path) else "is a file" if path.exists() else "does not exist"
    raise ConfigError(
        f"{why}: name the folder `gpucert baseline record --out` wrote (its baselines are in <folder>/<spec>/), or "
        f"leave {key} out for {NODES_DIR}",
        path=path,
        key=key,
    )


def trusted_keys(sign_key: str | None, pubs: list[str] | None) -> tuple[Ed25519PublicKey, ...]:
    """The keys a handover's run may be signed with: the signing key's own, and each `--key PUB`."""
    keys = [attest.load_private_key(Path(sign_key)).public_key()] if sign_key else []
    return (*keys, *(attest.load_public_key(Path(p)) for p in pubs or []))


def _refuse(message: str, path: Path, key: str) -> ConfigError:
    return ConfigError(f"{message}; record the node's handover again from its signed certification", path=path, key=key)


def _signed_run(handover: NodeBaseline, path: Path, reports: Path, keys: list[Ed25519PublicKey]) -> RunFolder:
    """The run the handover was recorded from, its certificate the one named and signed by one of `keys`."""
    r = handover.recorded
    if r.certificate is None:
        raise _refuse(
            "recorded from an unsigned run: its figures cannot be checked against signed evidence",
            path,
            "recorded.certificate",
        )
    try:
        run_dir = inside(reports, r.run)
    except NameError_ as exc:
        raise _refuse(f"names no run folder ({exc})", path, "recorded.run") from None
    if not (run_dir / attest.ENVELOPE).is_file():
        raise ConfigError(
            f"its figures are checked against the signed run they were recorded from, and {r.run} is not under "
            f"{reports} (or is not signed): pass --reports where that run is kept",
            path=path,
            key="recorded.run",
        )
    digest = attest.certificate_digest(run_dir)
    if digest != r.certificate:
        raise _refuse(f"names certificate {r.certificate}, but run {r.run}'s is {digest}", path, "recorded.certificate")
    if not keys:
        raise ConfigError(
            f"its run {r.run} is checked against the key that signed it: pass --sign-key or --key PUB",
            path=path,
            key="recorded.certificate",
        )
    env = attest.read_envelope(run_dir / attest.ENVELOPE)
    if not any(c.verified_by for c in env.check(keys)):
        raise _refuse(f"run {r.run}'s certificate is signed by none of the keys given", path, "recorded.certificate")
    return RunFolder(run_dir)


def verify_handover(handover: NodeBaseline, path: Path, reports: Path, keys: list[Ed25519PublicKey]) -> None:
    """ConfigError unless the handover's figures are those the signed run it names measured on its node."""
    folder = _signed_run(handover, path, reports, keys)
    run = handover.recorded.run
    env = attest.read_envelope(folder.envelope_path)
    signed = env.signed_digests()
    try:
        recomputed, files = node_baseline_of(folder, handover.node, handover.recorded)
    except (EvidenceError, OSError, KeyError, ValueError) as exc:
        raise _refuse(f"run {run} has no usable evidence of {handover.node} ({exc})", path, "recorded.run") from None
    for file in files:
        name = file.relative_to(folder.path).as_posix()
        if signed.get(name) != attest.sha256_file(file):
            raise _refuse(f"run {run}'s {name} is not the file its certificate signed", path, "recorded.run")
    if recomputed.sku != handover.sku:
        raise _refuse(f"sku is {handover.sku}, run {run} measured a {recomputed.sku}", path, "sku")
    mine = {g.index: g for g in recomputed.gpus}
    for i, g in enumerate(handover.gpus):
        was = mine.pop(g.index, None)
        if was != g:
            raise _refuse(
                f"gpu {g.index}'s identity or figures are not those run {run} signed (its evidence gives "
                f"{was.model_dump(by_alias=True) if was else 'no such GPU'})",
                path,
                f"gpus[{i}]",
            )
    if mine:
        raise _refuse(f"GPUs {sorted(mine)} that run {run} measured are left out", path, "gpus")
    if recomputed.node_metrics != handover.node_metrics:
        raise _refuse(f"the node's figures are not those run {run} signed", path, "nodeMetrics")
