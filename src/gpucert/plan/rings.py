"""Every all-reduce across nodes a run folder holds (evidence/multinode/): each pool's, and the one ring of a run
written before pools had rings of their own (layout.multinode_file). Reads through RunFolder; nothing else."""

from __future__ import annotations

from gpucert.measure.evidence import FabricEvidence
from gpucert.plan.layout import DOMAINS
from gpucert.plan.runfolder import RunFolder

__all__ = ["read_domain_rings", "read_rings"]


def read_rings(folder: RunFolder) -> dict[str | None, FabricEvidence]:
    """Each ring by pool (None: the older one-pool layout), as written; EvidenceError for one that is no ring."""
    rings: dict[str | None, FabricEvidence] = {}
    multinode = folder.pairs_path.parent
    if not multinode.is_dir():
        return rings
    for pool in [None, *sorted(p.name for p in multinode.iterdir() if p.is_dir())]:
        doc = folder.read_fabric(pool)
        if doc is not None:
            rings[pool] = doc
    return rings


def read_domain_rings(folder: RunFolder) -> dict[tuple[str, str], FabricEvidence]:
    """Each topology domain's ring by (pool, domain) (target.gang.topologyKey: multinode/<pool>/domains/<domain>/)."""
    rings: dict[tuple[str, str], FabricEvidence] = {}
    multinode = folder.pairs_path.parent
    if not multinode.is_dir():
        return rings
    for pool in sorted(p for p in multinode.iterdir() if (p / DOMAINS).is_dir()):
        for domain in sorted(d.name for d in (pool / DOMAINS).iterdir() if d.is_dir()):
            doc = folder.read_fabric(pool.name, domain)
            if doc is not None:
                rings[(pool.name, domain)] = doc
    return rings
