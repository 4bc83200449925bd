"""The punch list (`gpucert punchlist RUN_DIR`): one row per failing node and GPU, with what a repair ticket needs.

Each row names the node and GPU, the board (serial, UUID, PCI bus id, VBIOS, as the probe read them; a soak's as its
newest round read them), every check that failed there with what was observed against what was expected (and the
limit), the DCGM error ids where DCGM gave them, and the evidence file. Rows are sorted by severity: hardware health
(NVML health, DCGM diagnostics) before a node or GPU that is missing, before performance (against the baseline, or
unstable where its peers are not), before stragglers, before configuration; within a severity by node in natural
order (gpu-node-2 before gpu-node-10), then GPU. Figures in CSV and Markdown have 3 significant digits (JSON keeps
them as measured). Waived findings are not on it (they are accepted, see the verdict); errors are (the check could
not be decided).

Reads a run folder (verdict.json and the evidence) through RunFolder; writes nothing.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gpucert.errors import EvidenceError
from gpucert.evaluate.rules.fabric_ports import link_of
from gpucert.measure.evidence import GpuEvidence, NodeEvidence
from gpucert.plan.checks import Family, family_of
from gpucert.plan.runfolder import RunFolder
from gpucert.report.html import natural_key
from gpucert.report.verdict_model import VerdictFinding, read_verdict
from gpucert.spec.names import NameError_

__all__ = ["FORMATS", "PunchRow", "figure", "punch_list", "render", "severity_of"]

FORMATS = ("csv", "json", "md")
# severity: what a repair ticket is about, in the order they are worked
SEVERITIES = ("hardware", "missing", "performance", "straggler", "configuration", "other")
COLUMNS = (
    "severity",
    "node",
    "gpu",
    "serial",
    "uuid",
    "pci_bus_id",
    "vbios",
    "links",
    "checks",
    "observed",
    "expected",
    "limit",
    "dcgm_errors",
    "status",
    "evidence",
    "message",
)


def figure(value: Any) -> str:
    """A measured figure to 3 significant digits, without an exponent (2486.17 -> 2490, 49.678 -> 49.7); counts
    and words as they are."""
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return str(value)
    digits = 2 - math.floor(math.log10(abs(value)))
    rounded = round(value, digits)
    return f"{rounded:.{max(digits, 0)}f}"


# a soak's checks ranked as certify ranks their like: the GPU's health and DCGM (health.*, dcgm.*) hardware, a round
# that did not measure the node whole (a GPU gone or changed, the pod restarted) missing, drift and baseline
# performance; another soak.* id is "other"
SOAK_SEVERITY = {
    "xid": "hardware",
    "ecc": "hardware",
    "remapped_rows": "hardware",
    "temperature": "hardware",
    "throttle": "hardware",
    "dcgm": "hardware",
    "round": "missing",
    "restarts": "missing",
    "drift": "performance",
    "baseline": "performance",
}


def severity_of(check: str) -> str:
    """The severity class of a failed check (hardware health first)."""
    if check.startswith("soak."):
        return SOAK_SEVERITY.get(check.split(".")[1], "other")
    try:
        family = family_of(check)
    except ValueError:
        return "other"
    if family in (Family.HEALTH, Family.DCGM):
        return "hardware"
    if check in ("node.reachable", "probe.preflight", "inventory.gpus", "handover.identity"):
        return "missing"
    # an unstable GPU, or one fallen against its own history, is a performance fault
    if family in (Family.PERFORMANCE, Family.HANDOVER, Family.STABILITY, Family.DRIFT):
        return "performance"
    if family is Family.STRAGGLER:
        return "straggler"
    if family is Family.FABRIC:  # a port, cable or NIC is hardware; how GDR and NCCL are set up is configuration
        return "configuration" if check in ("fabric.gdr", "fabric.nccl_transport") else "hardware"
    if family in (Family.STACK, Family.INVENTORY, Family.POOL):
        return "configuration"
    return "other"


@dataclass
class PunchRow:
    severity: str
    node: str
    gpu: int | None
    serial: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    vbios: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    dcgm_errors: list[str] = field(default_factory=list)
    evidence: str | None = None
    links: list[str] = field(default_factory=list)  # the fabric's: "rail 3 mlx5_3 port 1 (peer gpu-node-9)"

    def flat(self) -> dict[str, str]:
        """The row for a table: one cell per column, a GPU's several checks joined in severity order."""

        def join(key: str) -> str:
            values = [f.get(key) for f in self.findings]
            if all(v is None for v in values):
                return ""
            unit = [f.get("unit") or "" for f in self.findings]
            return " | ".join(
                "" if v is None else f"{figure(v)} {u}".strip() for v, u in zip(values, unit, strict=True)
            )

        return {
            "severity": self.severity,
            "node": self.node,
            "gpu": "" if self.gpu is None else str(self.gpu),
            "serial": self.serial or "",
            "uuid": self.uuid or "",
            "pci_bus_id": self.pci_bus_id or "",
            "vbios": self.vbios or "",
            "links": " | ".join(self.links),
            "checks": " | ".join(f["check"] for f in self.findings),
            "observed": join("observed"),
            "expected": join("expected"),
            "limit": join("limit"),
            "dcgm_errors": " | ".join(self.dcgm_errors),
            "status": " | ".join(f["status"] for f in self.findings),
            "evidence": self.evidence or "",
            "message": " | ".join(f.get("message", "") for f in self.findings),
        }


def _dcgm_errors(ev: NodeEvidence | None, gpu: int | None, checks: list[str]) -> list[str]:
    if ev is None or ev.dcgm is None or gpu is None:
        return []
    out = []
    for check in checks:
        if not check.startswith("dcgm."):
            continue
        test = ev.dcgm.results.get(check.removeprefix("dcgm."))
        result = test.gpus.get(gpu) if test is not None else None
        out += [f"{e.name} ({e.id})" for e in (result.errors if result is not None else [])]
    return list(dict.fromkeys(out))


def _links(found: list[dict[str, Any]]) -> list[str]:
    """The fabric links a node's findings name: rail, HCA, port and the peer at the other end where known."""
    out = []
    for f in found:
        link = link_of(f.get("message", "")) if f["check"].startswith("fabric.") else None
        if link is not None:
            rail, hca, port, peers = link
            peer = f" (peer {', '.join(peers)})" if peers else ""
            out.append(f"rail {rail} {hca} port {port}{peer}")
    return list(dict.fromkeys(out))


def _fleet_rows(findings: list[VerdictFinding]) -> list[PunchRow]:
    """A fabric finding of no one node (a link between two racks, a pool's NCCL transport): a row of its own."""
    return [
        PunchRow(severity=severity_of(f.check), node="(fleet)", gpu=None, findings=[f.to_json()])
        for f in findings
        if f.node is None and f.check.startswith("fabric.")
    ]


def _soak_board(run_dir: RunFolder, node: str, gpu: int | None) -> GpuEvidence | None:
    """A soak's board as its newest round that read it recorded it (a soak keeps no certify evidence)."""
    from gpucert.fleet.soak.folder import SoakFolder  # here: the soak's package, loaded by every command's start

    soak = SoakFolder(run_dir)
    rounds = soak.path / "rounds"
    if gpu is None or not rounds.is_dir():
        return None
    for index in sorted((int(d.name) for d in rounds.iterdir() if d.name.isdigit()), reverse=True):
        try:
            raw = soak.read_raw(index, node)
        except (EvidenceError, NameError_):
            continue  # a damaged round tells nothing of the board; an older one may
        board = next((g for g in raw.gpus if g.index == gpu), None) if raw is not None else None
        if board is not None:
            return board
    return None


def punch_list(run_dir: RunFolder) -> list[PunchRow]:
    """The rows of a run's punch list, worst first."""
    verdict = read_verdict(run_dir)
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for f in verdict.failures():
        if f.node is not None:
            groups.setdefault((f.node, f.gpu), []).append(f.to_json())
    rows = []
    for (node, gpu), found in groups.items():
        found.sort(key=lambda f: (SEVERITIES.index(severity_of(f["check"])), f["check"]))
        try:
            ev = run_dir.read_evidence(node)
        except EvidenceError:
            ev = None
        board = ev.gpu(gpu) if ev is not None and gpu is not None else _soak_board(run_dir, node, gpu)
        path = run_dir.evidence_path(node)
        rows.append(
            PunchRow(
                severity=severity_of(found[0]["check"]),
                node=node,
                gpu=gpu,
                serial=board.serial if board else None,
                uuid=board.uuid if board else None,
                pci_bus_id=board.pci_bus_id if board else None,
                vbios=board.vbios if board else None,
                findings=found,
                dcgm_errors=_dcgm_errors(ev, gpu, [f["check"] for f in found]),
                evidence=path.relative_to(run_dir.path.resolve()).as_posix() if path.exists() else None,
                links=_links(found),
            )
        )
    rows += _fleet_rows(verdict.failures())
    rows.sort(key=lambda r: (SEVERITIES.index(r.severity), natural_key(r.node), -1 if r.gpu is None else r.gpu))
    return rows


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def render(rows: list[PunchRow], fmt: str, *, run: str) -> str:
    """The punch list as CSV (one line per row), JSON (rows with their findings) or a Markdown table."""
    if fmt == "json":
        return json.dumps({"run": run, "rows": [asdict(r) for r in rows]}, indent=1) + "\n"
    flat = [r.flat() for r in rows]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(flat)
        return out.getvalue()
    shown = [c for c in COLUMNS if c != "message"]
    lines = [
        f"# Punch list of {run}",
        "",
        f"{len(rows)} failing node/GPU(s), worst first (hardware health, then missing, performance, stragglers, "
        "configuration).",
        "",
        "| " + " | ".join(shown) + " |",
        "|" + "---|" * len(shown),
    ]
    lines += ["| " + " | ".join(_md_cell(r[c]) for c in shown) + " |" for r in flat]
    return "\n".join(lines) + "\n"
